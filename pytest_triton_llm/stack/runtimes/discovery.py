"""Which tritonserver the local runtime starts, first found wins:

1. --triton-binary PATH
2. the TRITONSERVER environment variable
3. /opt/tritonserver/bin/tritonserver, where NGC serving images keep it (pytest runs inside the image)
4. the binary inside the nvidia-pytriton wheel (the embedded default)

A system binary sits in <prefix>/bin with its backends in <prefix>/backends, as in NGC images.
Its version is what the image declares (TRITON_SERVER_VERSION) until the server itself says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .tritonserver_wheel import WheelNotFound, WheelServer, locate
from ...common.errors import TritonLLMError

NGC_BINARY = Path("/opt/tritonserver/bin/tritonserver")


class ServerNotFound(TritonLLMError, RuntimeError):
    pass


@dataclass(frozen=True)
class FoundServer:
    binary: Path
    origin: str  # how it was found, for the header and the report
    declared_version: str | None  # before the server has started
    backends: Path | None = None  # a system server's backend directory
    wheel: WheelServer | None = None  # the embedded default (its backends are prepared per cache)

    def describe(self) -> str:
        version = f"Triton {self.declared_version}" if self.declared_version else "version read once started"
        backends = self.backends or "the wheel's python backend (prepared in the engine cache)"
        return f"tritonserver {self.binary} ({self.origin}; {version}), backends {backends}"


def find_tritonserver(option: str | None, environ: dict[str, str], ngc_binary: Path = NGC_BINARY) -> FoundServer:
    # the image's TRITON_SERVER_VERSION describes the image's own binary only
    declared = environ.get("TRITON_SERVER_VERSION") or None
    for given, origin in ((option, "--triton-binary"), (environ.get("TRITONSERVER"), "TRITONSERVER")):
        if given:
            binary = Path(os.path.normpath(Path(given).expanduser().absolute()))
            wheel = _wheel_of(binary)
            if wheel is not None:  # the wheel's own binary needs the wheel's backends, prepared in the cache
                return _from_wheel(wheel, f" ({origin})")
            return _system(binary, origin, declared if binary == ngc_binary else None)
    if ngc_binary.is_file():
        return _system(ngc_binary, "the serving image's", declared)
    try:
        wheel = locate()
    except WheelNotFound as exc:
        raise ServerNotFound(f"no tritonserver found: {exc}; or pass --triton-binary PATH") from None
    return _from_wheel(wheel)


def _from_wheel(wheel: WheelServer, how: str = "") -> FoundServer:
    return FoundServer(wheel.binary, f"nvidia-pytriton {wheel.wheel_version}{how}", wheel.triton_version, wheel=wheel)


def _wheel_of(binary: Path) -> WheelServer | None:
    """The installed nvidia-pytriton wheel when `binary` is its tritonserver."""
    try:
        wheel = locate()
    except WheelNotFound:
        return None
    return wheel if binary.resolve() == wheel.binary.resolve() else None


def _system(binary: Path, origin: str, declared: str | None) -> FoundServer:
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise ServerNotFound(f"{origin}: {binary} is not an executable file")
    backends = binary.parent.parent / "backends"
    if not backends.is_dir():
        raise ServerNotFound(
            f"{origin}: no backends directory at {backends}: tritonserver is expected in <prefix>/bin with its "
            "backends in <prefix>/backends, as in NGC images (/opt/tritonserver)"
        )
    return FoundServer(binary, origin, declared, backends=backends)
