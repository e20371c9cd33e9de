"""The tritonserver binary shipped inside the nvidia-pytriton wheel (only the binary is used).

The wheel has one python backend stub per Python version. Triton loads
`<backend-directory>/python/triton_python_backend_stub`, so the stub of the running
Python is copied with the backend into a directory in the engine cache (never into
site-packages). The stub embeds libpython: it needs this interpreter's LIBDIR first
on LD_LIBRARY_PATH, and it finds its site-packages from the first `python3` on PATH.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock

from ...common.schema import load_toml
from ...common.errors import TritonLLMError

_VERSIONS = Path(__file__).with_name("tritonserver_wheels.toml")


class WheelNotFound(TritonLLMError, RuntimeError):
    pass


@dataclass(frozen=True)
class WheelServer:
    root: Path  # .../site-packages/pytriton/tritonserver
    libs: Path  # .../site-packages/nvidia_pytriton.libs (the binaries' bundled libraries)
    wheel_version: str
    triton_version: str

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        return (
            self.root
            / "python_backend_stubs"
            / f"{sys.version_info.major}.{sys.version_info.minor}"
            / "triton_python_backend_stub"
        )


def locate() -> WheelServer:
    spec = importlib.util.find_spec("pytriton")  # finds the package without importing its API
    if spec is None or not spec.submodule_search_locations:
        raise WheelNotFound(
            "the embedded runtime needs the nvidia-pytriton wheel for its tritonserver binary: "
            "pip install 'pytest-triton-llm[reference]'"
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    version = metadata.version("nvidia-pytriton")
    known = load_toml(_VERSIONS)["nvidia-pytriton"]
    if version not in known:
        raise WheelNotFound(f"nvidia-pytriton {version} is not in {_VERSIONS.name} (known: {', '.join(known)})")
    server = WheelServer(root, root.parent.parent / "nvidia_pytriton.libs", version, known[version])
    if not server.binary.is_file():
        raise WheelNotFound(f"no tritonserver binary at {server.binary}")
    if not server.stub.is_file():
        raise WheelNotFound(
            f"nvidia-pytriton {version} has no python backend stub for Python {sys.version_info.major}.{sys.version_info.minor}"
        )
    return server


def prepare_backends(server: WheelServer, cache_root: Path) -> Path:
    """A backend directory with the python backend and this interpreter's stub; built once per cache."""
    tag = f"{server.triton_version}-py{sys.version_info.major}.{sys.version_info.minor}"
    target = cache_root / "tritonserver" / tag / "backends"
    marker = target / "python" / ".complete"
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / ".lock")):
        if marker.is_file() and marker.read_text() == str(server.root):
            return target
        staging = target.parent / f".backends-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(server.root / "backends" / "python", staging / "python", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(server.stub, staging / "python" / "triton_python_backend_stub")
        (staging / "python" / ".complete").write_text(str(server.root))
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
    return target


def server_environment(libs: Path | None, base: dict[str, str]) -> dict[str, str]:
    """The server's environment: the python backend stub embeds libpython and finds its packages (numpy<2,
    the reference stack) through the first python3 on PATH, so this interpreter's come first; `libs` are
    the wheel's bundled libraries (None for a system server, whose image sets LD_LIBRARY_PATH)."""
    env = dict(base)
    python_bin = Path(sys.executable).parent
    if not (python_bin / "python3").exists():
        raise WheelNotFound(
            f"{python_bin} has no 'python3': the python backend stub finds its packages through it; "
            "run pytest from a virtual environment or a Python installation that provides python3"
        )
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, str(libs or ""), base.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join(p for p in (str(python_bin), base.get("PATH", "")) if p)
    return env
