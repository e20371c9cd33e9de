"""The plugin's own options: the lock and engine cache (--engines-*), the server side (--triton-*), which
deployments run, the report. Declared, checked and exposed here; accuracy and perf declare theirs.

Names follow one scheme: --triton-* for the server, --engines-* for the lock and cache, --accuracy-* and
--perf-* for those suites. Earlier spellings are refused with the new name.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

import pytest

from .images import ImageError, parse_image
from .runtimes import RUNTIMES, ServerOptions
from .usage import OptionError

DEFAULT_LOCK = "engines.lock"
DEFAULT_CACHE = "~/.cache/pytest-triton-llm"
RENAMED = {
    "--gpus": "--triton-gpus",
    "--tritonserver": "--triton-binary",
    "--engine-cache": "--engines-cache",
    "--rebuild-engines": "--engines-rebuild",
    "--cnn-dataset": "--accuracy-dataset",
    "--cnn-split": "--accuracy-split",
    "--cnn-samples": "--accuracy-samples",
}
_FLAGS = ("--rebuild-engines",)  # renamed options that take no value


def add_engine_options(group) -> None:
    """The lock and the engine cache: for pytest and for `pytest-triton-llm serve` (an argparse parser)."""
    group.addoption("--engines-lock", metavar="PATH", help=f"pinned engines and deployments (default: ./{DEFAULT_LOCK})")
    group.addoption(
        "--engines-cache", metavar="DIR", default=DEFAULT_CACHE,
        help=f"built engines, fetched sources, server pidfiles (default: {DEFAULT_CACHE})",
    )  # fmt: skip
    group.addoption("--engines-rebuild", action="store_true", help="rebuild the engines of this run even if cached")


def add_server_options(group) -> None:
    """Where and how tritonserver starts: for pytest and for `pytest-triton-llm serve`."""
    group.addoption(
        "--triton-image", metavar="TAG",
        help="run tritonserver in containers of this image: YY.MM-trtllm (NGC tritonserver:YY.MM-trtllm-python-py3) "
        "or a full image reference",
    )  # fmt: skip
    group.addoption(
        "--triton-runtime", choices=tuple(RUNTIMES), default=None,
        help="container: start --triton-image from this host (the default with --triton-image); local: start "
        "tritonserver here, e.g. inside the serving image, checked against --triton-image's versions when given",
    )  # fmt: skip
    group.addoption(
        "--triton-binary", metavar="PATH",
        help="the local runtime's tritonserver (default: $TRITONSERVER, then /opt/tritonserver/bin/tritonserver, "
        "then the nvidia-pytriton wheel's)",
    )  # fmt: skip
    group.addoption(
        "--triton-gpus", metavar="IDS", default=None,
        help="GPUs for server and build containers: 'all' or ids such as 0,1 (default: all for engines that run on "
        "a GPU, none for reference ones)",
    )  # fmt: skip
    group.addoption(
        "--trtllm-examples", metavar="DIR",
        help="TensorRT-LLM's examples/ for tensorrtllm engine builds (default: the image's /app/examples or beside "
        "the installed tensorrt_llm)",
    )  # fmt: skip
    group.addoption(
        "--triton-start-timeout", metavar="SECONDS", type=float, default=300.0,
        help="how long a server may take to become ready (default: 300)",
    )  # fmt: skip


def add_options(group) -> None:
    add_engine_options(group)
    group.addoption(
        "--deployment", metavar="NAME", action="append", default=[],
        help="run only this deployment, e.g. smollm2-135m:v1 (repeatable)",
    )  # fmt: skip
    group.addoption("--triton-llm-report", metavar="PATH", help="write a JSON report of the run here")
    add_server_options(group)
    group.addoption("--triton-url", metavar="URL", help="test an already running server; no build, no start (not yet supported)")
    for old in RENAMED:  # hidden: only to say what they are called now
        group.addoption(old, dest=_renamed_dest(old), default=None, help=argparse.SUPPRESS,
                        **({"action": "store_true"} if old in _FLAGS else {}))  # fmt: skip


def server_options(opt) -> ServerOptions:
    """The --triton-* server options of parsed arguments (pytest's config.option or argparse's namespace)."""
    try:
        image = parse_image(opt.triton_image) if opt.triton_image else None
    except ImageError as exc:
        raise OptionError(str(exc)) from None
    if opt.triton_gpus is not None and not re.fullmatch(r"all|\d+(,\d+)*", opt.triton_gpus):
        raise OptionError(f"--triton-gpus {opt.triton_gpus!r}: give 'all' or GPU ids such as 0 or 0,1")
    if opt.triton_start_timeout <= 0:
        raise OptionError("--triton-start-timeout must be > 0")
    return ServerOptions(image, opt.triton_runtime, opt.triton_binary, opt.triton_gpus, opt.trtllm_examples)


def runtime_name(server: ServerOptions) -> str:
    """The registry name of the runtime these options choose."""
    return server.runtime or ("container" if server.image else "local")


def _renamed_dest(old: str) -> str:
    return "renamed_" + old.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Options:
    engines_lock: str | None  # None: the default ./engines.lock, which may be absent
    engines_cache: str
    engines_rebuild: bool
    deployments: tuple[str, ...]
    report: str | None
    start_timeout_s: float
    url: str | None
    server: ServerOptions

    @property
    def runtime(self) -> str:
        return runtime_name(self.server)

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        opt = config.option
        for old, new in RENAMED.items():
            if getattr(opt, _renamed_dest(old)):
                raise OptionError(f"{old} is now called {new}")
        if opt.triton_url:
            raise OptionError(f"--triton-url {opt.triton_url}: the remote runtime is not yet supported")
        server = server_options(opt)
        return cls(opt.engines_lock, opt.engines_cache, opt.engines_rebuild, tuple(opt.deployment),
                   opt.triton_llm_report, opt.triton_start_timeout, opt.triton_url, server)  # fmt: skip
