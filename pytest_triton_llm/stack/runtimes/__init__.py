"""Where tritonserver runs, by name. A new runtime is one module implementing base.Runtime plus one line here."""

from __future__ import annotations

from .base import Launch, Runtime, RuntimeUnavailable, ServerOptions, no_gpu_here
from .container import ContainerRuntime
from .local import LocalRuntime
from .remote import RemoteRuntime

RUNTIMES: dict[str, type[Runtime]] = {
    "local": LocalRuntime,
    "container": ContainerRuntime,
    "remote": RemoteRuntime,
}

__all__ = ["RUNTIMES", "Launch", "Runtime", "RuntimeUnavailable", "ServerOptions", "no_gpu_here"]
