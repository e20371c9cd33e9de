"""Which known upstream bug of the fault catalog (fixtures/faults.toml) this stand-in model reproduces, if any.

The harness renders `--stand-in-fault NAME` as the config parameter `stand_in_fault` of every model the project's
stand-in serves; each model implements the faults that live in it, by name, and is clean without the parameter.

A warm server (the harness's stack/runtimes/warm.py) is started with $TRITON_LLM_FAULT_SWITCH, a file its holder writes a
fault's name into and empties when it lets go: a clean model reads it at each check, so one warm server serves a fault
campaign's runs one after another instead of a server started per fault. Faults read while a model loads, and those
that leave the model changed after they are off, are never switched (the catalog's own_server).
"""

from __future__ import annotations

import os

import triton_python_backend_utils as pb_utils

PARAMETER = "stand_in_fault"
SWITCH = "TRITON_LLM_FAULT_SWITCH"


def _clean(name: str) -> bool:
    return False


class _Switch:
    """The fault named in the switch file, read again only when the file changed (one stat per check; the holder
    replaces the file, so a new inode tells even a name of the same length written in the same clock tick)."""

    def __init__(self, path: str, model: str):
        self.path, self.model = path, model
        self.seen: tuple[int, int, int] | None = None
        self.name: str | None = None

    def current(self) -> str | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            self.seen, self.name = None, None
            return None
        if (stat.st_ino, stat.st_mtime_ns, stat.st_size) != self.seen:
            with open(self.path, encoding="utf-8") as fh:
                self.name = fh.read().strip() or None
            self.seen = stat.st_ino, stat.st_mtime_ns, stat.st_size
            if self.name is not None:
                pb_utils.Logger.log_warn(f"{self.model}: STAND-IN FAULT {self.name} switched on: not a clean run")
        return self.name


class Faults:
    """`faults("name")` is true when the model reproduces that fault."""

    def __init__(self, params: dict[str, str], model: str):
        self.fixed = params.get(PARAMETER) or None
        self.switch = _Switch(os.environ[SWITCH], model) if self.fixed is None and os.environ.get(SWITCH) else None
        if self.fixed is not None:
            pb_utils.Logger.log_warn(f"{model}: STAND-IN FAULT {self.fixed} on (--stand-in-fault): not a clean run")

    @property
    def name(self) -> str | None:
        return self.switch.current() if self.switch is not None else self.fixed

    def __call__(self, name: str) -> bool:
        return self.name == name

    def among(self, names: tuple[str, ...]):
        """This predicate for code the model hands `names` to (the shared engine), else one that is always false:
        the llmapi and the tensorrt_llm model share the engine, and each owns only its own faults of it."""
        if self.switch is not None:
            return lambda name: name in names and self(name)
        return self if self.fixed in names else _clean
