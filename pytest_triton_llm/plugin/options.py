"""The plugin's own options: the lock and engine cache (--engines-*), the server side (--triton-*), an OpenAI endpoint
(--openai-*), which deployments run, the report. Declared, checked and exposed here; accuracy and perf declare theirs.

Names follow one scheme: --triton-* for the server, --engines-* for the lock and cache, --accuracy-* and
--perf-* for those suites. Earlier spellings are refused with the new name.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..faults import fault_named
from ..host.images import ImageError, parse_image
from ..openai.target import OpenAIOptions, openai_options
from ..stack.runtimes import RUNTIMES, ServerOptions
from ..stack.runtimes.remote import remote_options
from ..common.schema import SchemaError
from ..common.usage import OptionError

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
        "--engines-cache",
        metavar="DIR",
        default=DEFAULT_CACHE,
        help=f"built engines, fetched sources, server pidfiles (default: {DEFAULT_CACHE})",
    )
    group.addoption("--engines-rebuild", action="store_true", help="rebuild the engines of this run even if cached")
    group.addoption(
        "--engines-verify",
        action="store_true",
        help="hash every file of a reused engine (default: its files' sizes and mtimes are checked against the manifest)",
    )


def add_server_options(group) -> None:
    """Where and how tritonserver starts: for pytest and for `pytest-triton-llm serve`."""
    _server_choice_options(group)
    _trtllm_options(group)


def _server_choice_options(group) -> None:
    """Which tritonserver serves and how: an image, a runtime, a binary, GPUs, warm servers, the start timeout."""
    group.addoption(
        "--triton-image",
        metavar="TAG",
        help="run tritonserver in containers of this image: YY.MM-trtllm (NGC tritonserver:YY.MM-trtllm-python-py3) "
        "or a full image reference",
    )
    group.addoption(
        "--triton-runtime",
        choices=tuple(RUNTIMES),
        default=None,
        help="container: start --triton-image from this host (the default with --triton-image); local: start "
        "tritonserver here, e.g. inside the serving image, checked against --triton-image's versions when given",
    )
    group.addoption(
        "--triton-binary",
        metavar="PATH",
        help="the local runtime's tritonserver (default: $TRITONSERVER, then /opt/tritonserver/bin/tritonserver, "
        "then the nvidia-pytriton wheel's)",
    )
    group.addoption(
        "--triton-gpus",
        metavar="IDS",
        default=None,
        help="GPUs the servers and build containers use: 'all', 'none' or nvidia-smi ids such as 0,1. Containers "
        "default to all for engines that run on a GPU and none for reference ones; the local runtime sets "
        "CUDA_VISIBLE_DEVICES (default: as inherited), and the reference backend runs on the first GPU it sees",
    )
    group.addoption(
        "--triton-keep-warm",
        metavar="SECONDS",
        type=float,
        default=None,
        help="leave each local server running after the session, for a later session that serves the same repository "
        "(same engine, options and code: it starts nothing and reaches its first test at once); it stops once no "
        "session has held it for SECONDS (default: $TRITON_LLM_KEEP_WARM, else 0: stop with the session). `pytest-triton-llm "
        "cache warm` lists them, `--stop` stops them",
    )
    group.addoption(
        "--triton-start-timeout",
        metavar="SECONDS",
        type=float,
        default=300.0,
        help="how long a server may take to become ready (default: 300)",
    )


def _trtllm_options(group) -> None:
    """What serves behind it: TensorRT-LLM's examples and python models, the stand-in, a stand-in fault."""
    group.addoption(
        "--trtllm-examples",
        metavar="DIR",
        help="TensorRT-LLM's examples/ for tensorrtllm engine builds (default: the image's /app/examples or beside "
        "the installed tensorrt_llm)",
    )
    group.addoption(
        "--trtllm-stand-in",
        action="store_true",
        help="serve tensorrtllm engines' tensorrt_llm model with the project's reference stand-in (python backend), "
        "the rest of the repository as rendered: proves build, engine directory, tokenizer and repository on a host "
        "without TensorRT-LLM; such deployments count as stand-ins (their results say nothing of TensorRT-LLM)",
    )
    group.addoption(
        "--trtllm-models",
        metavar="DIR",
        help="upstream's inflight_batcher_llm python models for tensorrtllm deployments, on a host that cannot fetch "
        "them from GitHub: a checkout of tensorrtllm_backend (TensorRT-LLM from 0.20) at the image's tag; every file "
        "is checked against the sha256 pinned in stack/repository/upstream_models.toml (default: the image's own copy, else "
        "fetched at the pinned commit into the engine cache)",
    )
    group.addoption(
        "--stand-in-fault",
        metavar="NAME",
        help="make the project's stand-in models reproduce a known upstream bug of fixtures/faults.toml (`pytest-triton-llm "
        "faults --list`), to see the suites catch it: the header, the report and the summary say the run is not clean",
    )


def add_options(group) -> None:
    add_engine_options(group)
    group.addoption(
        "--deployment",
        metavar="NAME",
        action="append",
        default=[],
        help="run only this deployment, e.g. smollm2-135m:v1 (repeatable)",
    )
    group.addoption("--triton-llm-report", metavar="PATH", help="write a JSON report of the run here")
    add_server_options(group)
    group.addoption(
        "--triton-url",
        metavar="URL",
        help="test a server that is already running: grpc://HOST:PORT (grpcs:// for TLS); nothing is built, started, "
        "loaded or unloaded; its deployments are read from the server (or pinned in the lock with url =)",
    )
    group.addoption("--triton-http-url", metavar="URL", help="its HTTP endpoint (default: http[s]://same host:8000)")
    group.addoption("--triton-metrics-url", metavar="URL", help="its metrics endpoint (default: http://same host:8002)")
    group.addoption(
        "--triton-header",
        metavar="'NAME: VALUE'",
        action="append",
        default=[],
        help="a header sent with every request to --triton-url, e.g. 'Authorization: Bearer ...' (repeatable; values "
        "are never written to logs, reports or JUnit)",
    )
    group.addoption("--triton-ca-file", metavar="PATH", help="CA certificate for grpcs:// and https:// (default: the system's)")
    group.addoption(
        "--tokenizer",
        metavar="DIR_OR_HF_ID",
        help="the remote server's tokenizer where its preprocessing tokenizer_dir is not readable here; with "
        "--openai-url, the endpoint's (default: its model id: a directory, a GGUF file or a Hugging Face id)",
    )
    group.addoption(
        "--triton-allow-load",
        action="store_true",
        help="with --triton-url: also run the tests that put the server under stress (marker triton_llm_load)",
    )
    add_openai_options(group)
    for old in RENAMED:  # hidden: only to say what they are called now
        group.addoption(
            old,
            dest=_renamed_dest(old),
            default=None,
            help=argparse.SUPPRESS,
            **({"action": "store_true"} if old in _FLAGS else {}),
        )


def add_openai_options(group) -> None:
    group.addoption(
        "--openai-url",
        metavar="URL",
        help="test an OpenAI-compatible endpoint (trtllm-serve, Dynamo, Triton's openai_frontend, llama.cpp): "
        "http[s]://HOST:PORT/v1; the /v1 suites run against it, and -m migration pairs it with --deployment",
    )
    group.addoption(
        "--openai-header",
        metavar="'NAME: VALUE'",
        action="append",
        default=[],
        help="a header sent with every request to --openai-url, e.g. 'Authorization: Bearer ...' (repeatable; values "
        "are never written to logs, reports or JUnit)",
    )
    group.addoption(
        "--openai-ca-file", metavar="PATH", help="CA certificate for an https:// --openai-url (default: the system's)"
    )
    group.addoption("--openai-model", metavar="NAME", help="the model to ask (default: the one /v1/models lists)")
    group.addoption(
        "--openai-family",
        metavar="NAME",
        help="the server family whose contract applies (openai_families.toml; default: recognised by /v1/models' owned_by)",
    )
    group.addoption(
        "--openai-engine",
        metavar="NAME",
        help="the engine of --engines-lock whose checkpoint the endpoint serves: its [accuracy] table judges ROUGE "
        "over /v1 (without it the /v1 accuracy test skips)",
    )


def server_options(opt) -> ServerOptions:
    """The --triton-* server options of parsed arguments (pytest's config.option or argparse's namespace)."""
    try:
        image = parse_image(opt.triton_image) if opt.triton_image else None
    except ImageError as exc:
        raise OptionError(str(exc)) from None
    if opt.triton_gpus is not None and not re.fullmatch(r"all|none|\d+(,\d+)*", opt.triton_gpus):
        raise OptionError(f"--triton-gpus {opt.triton_gpus!r}: give 'all', 'none' or GPU ids such as 0 or 0,1")
    if opt.triton_start_timeout <= 0:
        raise OptionError("--triton-start-timeout must be > 0")
    keep_warm_s = keep_warm(opt.triton_keep_warm)
    if opt.trtllm_models is not None and not Path(opt.trtllm_models).is_dir():
        raise OptionError(f"--trtllm-models {opt.trtllm_models}: no such directory")
    if opt.stand_in_fault is not None:
        try:
            fault_named(opt.stand_in_fault)
        except (ValueError, SchemaError) as exc:
            raise OptionError(str(exc)) from None
    server = ServerOptions(
        image,
        opt.triton_runtime,
        opt.triton_binary,
        opt.triton_gpus,
        opt.trtllm_examples,
        trtllm_stand_in=opt.trtllm_stand_in,
        trtllm_models=opt.trtllm_models,
        stand_in_fault=opt.stand_in_fault,
        keep_warm_s=keep_warm_s,
    )
    if opt.triton_keep_warm and not RUNTIMES[runtime_name(server)].keeps_warm:
        raise OptionError(f"--triton-keep-warm keeps local servers only: the {runtime_name(server)} runtime stops its own")
    return server


def keep_warm(given: float | None) -> float:
    """--triton-keep-warm's seconds, else $TRITON_LLM_KEEP_WARM's (a CI job keeps every session's servers warm), else 0."""
    value = given if given is not None else os.environ.get("TRITON_LLM_KEEP_WARM") or 0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise OptionError(f"--triton-keep-warm / TRITON_LLM_KEEP_WARM {value!r}: give seconds >= 0 (0: stop with the session)")
    return seconds


def runtime_name(server: ServerOptions) -> str:
    """The registry name of the runtime these options choose: --triton-runtime's, else the one they choose by default
    (Runtime.default_for)."""
    return server.runtime or next(name for name, runtime in RUNTIMES.items() if runtime.default_for(server))


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
    engines_verify: bool = False
    openai: OpenAIOptions | None = None  # --openai-url and its companions

    @property
    def runtime(self) -> str:
        return runtime_name(self.server)

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        opt = config.option
        for old, new in RENAMED.items():
            if getattr(opt, _renamed_dest(old)):
                raise OptionError(f"{old} is now called {new}")
        server = server_options(opt)
        if opt.triton_url:
            if server.image is not None or (opt.triton_runtime is not None and not RUNTIMES[opt.triton_runtime].attaches):
                raise OptionError("--triton-url tests a running server: give no --triton-image or --triton-runtime with it")
            if opt.triton_keep_warm:
                raise OptionError("--triton-url tests a running server: --triton-keep-warm is for servers a session starts")
            remote = remote_options(
                opt.triton_url,
                opt.triton_http_url,
                opt.triton_metrics_url,
                opt.triton_header,
                opt.triton_ca_file,
                opt.tokenizer,
                opt.triton_allow_load,
            )
            server = dataclasses.replace(server, remote=remote)
        elif opt.triton_header or opt.triton_http_url or opt.triton_metrics_url or opt.triton_ca_file:
            raise OptionError(
                "--triton-header, --triton-http-url, --triton-metrics-url and --triton-ca-file apply to --triton-url; give one"
            )
        if opt.tokenizer and not (opt.triton_url or opt.openai_url):
            raise OptionError("--tokenizer applies to --triton-url or --openai-url; give one")
        return cls(
            opt.engines_lock,
            opt.engines_cache,
            opt.engines_rebuild,
            tuple(opt.deployment),
            opt.triton_llm_report,
            opt.triton_start_timeout,
            opt.triton_url,
            server,
            opt.engines_verify,
            openai_options(
                opt.openai_url,
                opt.openai_header,
                opt.openai_ca_file,
                opt.openai_model,
                opt.openai_family,
                opt.openai_engine,
                opt.tokenizer,
            ),
        )
