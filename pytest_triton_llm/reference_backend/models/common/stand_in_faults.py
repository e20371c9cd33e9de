"""Which known upstream bug of the fault catalog (fixtures/faults.toml) this stand-in model reproduces, if any.

The harness renders `--stand-in-fault NAME` as the config parameter `stand_in_fault` of every model the project's
stand-in serves; each model implements the faults that live in it, by name, and is clean without the parameter.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

PARAMETER = "stand_in_fault"


def _clean(name: str) -> bool:
    return False


class Faults:
    """`faults("name")` is true when the model reproduces that fault."""

    def __init__(self, params: dict[str, str], model: str):
        self.name = params.get(PARAMETER) or None
        if self.name is not None:
            pb_utils.Logger.log_warn(f"{model}: STAND-IN FAULT {self.name} on (--stand-in-fault): not a clean run")

    def __call__(self, name: str) -> bool:
        return self.name == name

    def among(self, names: tuple[str, ...]):
        """This predicate for code the model hands `names` to (the shared engine), else one that is always false:
        the llmapi and the tensorrt_llm model share the engine, and each owns only its own faults of it."""
        return self if self.name in names else _clean
