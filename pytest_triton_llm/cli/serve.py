"""`pytest-triton-llm serve DEPLOYMENT`: one deployment built (or reused), rendered and served exactly as the
fixtures serve it, until Ctrl-C or SIGTERM; then the server is stopped and its files removed.
`pytest-triton-llm serve-llama-cpp`: llama-cpp-python's /v1 server on a lock engine's GGUF, the same way.
`pytest-triton-llm serve-trtllm-stand-in`: the project's trtllm-serve stand-in on a lock engine's reference checkpoint."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Callable
import tempfile
import threading
from pathlib import Path

import yaml

from ..openai import llama_cpp, trtllm_serve
from ..stack.cache import EngineCache
from ..stack.deployments import DeploymentManager
from ..stack.engines import check_lock
from ..faults import fault_named
from ..stack.lock import load_lock
from ..plugin.options import DEFAULT_LOCK, add_engine_options, add_server_options, runtime_name, server_options
from ..host.processes import reap_orphans, shielded
from ..common.progress import Progress
from ..stack.repository import entry_models
from ..stack.runtimes import RUNTIMES


class _Declare:
    """pytest's `group.addoption` on an argparse parser, so both declare the same options."""

    def __init__(self, parser):
        self.addoption = parser.add_argument


def add_arguments(parser) -> None:
    parser.add_argument("deployment", metavar="DEPLOYMENT", help="a deployment of the lock, e.g. smollm2-135m:inflight")
    add_engine_options(_Declare(parser))
    add_server_options(_Declare(parser))


def serve(args, progress: Progress | None = None, stop: threading.Event | None = None) -> int:
    """Serve `args.deployment` until `stop` is set (SIGINT and SIGTERM set it). Errors raise with one line."""
    progress = progress or Progress()
    stop = stop or _stop_on_signals()
    lock = check_lock(load_lock(Path(args.engines_lock or DEFAULT_LOCK)))
    [ref] = lock.select([args.deployment])
    server = server_options(args)
    cache = EngineCache(args.engines_cache, progress, verify=args.engines_verify)
    reap_orphans(cache.root / "run", progress)
    runtime = RUNTIMES[runtime_name(server)].create(server, cache.root, progress)
    workdir = Path(tempfile.mkdtemp(prefix="triton-llm-serve-"))
    fault = fault_named(server.stand_in_fault) if server.stand_in_fault else None
    manager = DeploymentManager(
        cache,
        runtime,
        workdir,
        progress,
        args.engines_rebuild,
        args.triton_start_timeout,
        server.trtllm_stand_in,
        server.trtllm_models,
        fault,
    )
    try:
        served = manager.serve(ref)
        endpoints = served.server.endpoints
        print(f"http:    http://{endpoints.http}", flush=True)
        print(f"grpc:    grpc://{endpoints.grpc}", flush=True)
        print(f"metrics: http://{endpoints.metrics}/metrics", flush=True)
        entries = ", ".join(entry_models(ref))
        print(
            f"ready: {ref.id} on Triton {served.server.version} ({runtime.describe()}); entry models {entries}; "
            f"repository {served.repository}; Ctrl-C or SIGTERM stops it",
            flush=True,
        )
        return _until_stopped(
            stop, served.server.alive, lambda: f"server {ref.id}: exited on its own; log {served.server.log_path}", progress
        )
    finally:
        with shielded():  # a second Ctrl-C must not leave the server behind
            manager.close()
        for repository in workdir.rglob("model_repository"):  # what was rendered goes; the server's log stays
            shutil.rmtree(repository, ignore_errors=True)
        logs = sorted(workdir.rglob("tritonserver.log"))
        if logs:
            progress.say(f"server log kept: {logs[-1]}")


def add_llama_cpp_arguments(parser) -> None:
    parser.add_argument("--engine", default="smollm2-135m", help="the lock engine whose GGUF it serves (default: smollm2-135m)")
    parser.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument(
        "--threads", type=int, default=None, help="llama.cpp threads (default: OMP_NUM_THREADS if set, else every core)"
    )
    add_engine_options(_Declare(parser))


def serve_llama_cpp(args, progress: Progress | None = None, stop: threading.Event | None = None) -> int:
    """Serve `args.engine`'s GGUF over /v1 until `stop` is set; prints the URL to pass as --openai-url."""
    progress = progress or Progress()
    stop = stop or _stop_on_signals()
    lock = load_lock(Path(args.engines_lock or DEFAULT_LOCK))
    cache = EngineCache(args.engines_cache, progress, verify=args.engines_verify)
    reap_orphans(cache.root / "run", progress)
    gguf = llama_cpp.gguf_of(lock, args.engine, cache.root / "sources", progress)
    workdir = Path(tempfile.mkdtemp(prefix="triton-llm-llama-cpp-"))
    server = llama_cpp.start(gguf, workdir / "llama_cpp.log", cache.root / "run", progress, port=args.port, threads=args.threads)
    try:
        log = workdir / "llama_cpp.log"
        print(f"ready: --openai-url {server.url} (model {server.model}); log {log}; Ctrl-C or SIGTERM stops it", flush=True)
        return _until_stopped(
            stop, server.process.alive, lambda: f"llama_cpp.server {_ended(server.process.returncode)}; log {log}", progress
        )
    finally:
        with shielded():
            server.stop()


def add_trtllm_stand_in_arguments(parser) -> None:
    parser.add_argument(
        "--engine",
        default="smollm2-135m",
        help="the lock engine (reference backend) whose checkpoint it serves (default: smollm2-135m)",
    )
    parser.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument(
        "--perf-metrics",
        type=int,
        default=0,
        metavar="N",
        help="serve /perf_metrics as trtllm-serve does with return_perf_metrics and perf_metrics_max_requests N (default: off)",
    )
    parser.add_argument(
        "--guided-decoding-backend",
        choices=["xgrammar"],
        default=None,
        help="serve response_format as trtllm-serve does with guided_decoding_backend set (needs the guided extra; "
        "default: unset, and a guided request is refused as trtllm-serve refuses it)",
    )
    parser.add_argument(
        "--extra-llm-api-options",
        metavar="YAML",
        default=None,
        help="LLM API arguments, as trtllm-serve's --extra_llm_api_options (over the two options above), e.g. a "
        "speculative_config with decoding_type NGram: the stand-in drafts by prompt lookup, as TensorRT-LLM's NGram",
    )
    add_engine_options(_Declare(parser))


def serve_trtllm_stand_in(args, progress: Progress | None = None, stop: threading.Event | None = None) -> int:
    """Serve `args.engine`'s reference checkpoint behind trtllm-serve's protocol until `stop` is set; prints the
    options to pass (--openai-url, --tokenizer)."""
    progress = progress or Progress()
    stop = stop or _stop_on_signals()
    lock = check_lock(load_lock(Path(args.engines_lock or DEFAULT_LOCK)))
    cache = EngineCache(args.engines_cache, progress, verify=args.engines_verify)
    reap_orphans(cache.root / "run", progress)
    workdir = Path(tempfile.mkdtemp(prefix="triton-llm-trtllm-stand-in-"))
    server = trtllm_serve.serve_engine(
        lock,
        args.engine,
        cache,
        workdir,
        rebuild=args.engines_rebuild,
        port=args.port,
        perf_metrics=args.perf_metrics,
        guided_decoding_backend=args.guided_decoding_backend,
        extra_options=_llm_api_options(args.extra_llm_api_options),
    )
    try:
        log = workdir / "trtllm_serve_stand_in.log"
        print(
            f"ready: --openai-url {server.url} --tokenizer {server.tokenizer} (model {server.model}; the project's "
            f"trtllm-serve stand-in); log {log}; Ctrl-C or SIGTERM stops it",
            flush=True,
        )
        return _until_stopped(
            stop,
            server.process.alive,
            lambda: f"the trtllm-serve stand-in exited on its own (exit {server.process.returncode}); log {log}",
            progress,
        )
    finally:
        with shielded():
            server.stop()


def _llm_api_options(path: str | None) -> dict:
    """--extra-llm-api-options's YAML mapping; a file that is not one stops the command in one line."""
    if path is None:
        return {}
    try:
        options = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"--extra-llm-api-options {path}: {exc}") from None
    if not isinstance(options, dict):
        raise SystemExit(f"--extra-llm-api-options {path}: expected a YAML mapping of LLM API arguments")
    return options


def _until_stopped(stop: threading.Event, alive, gone: Callable[[], str], progress: Progress) -> int:
    """0 once `stop` is set; 1, saying `gone()`, if the server exits before."""
    while not stop.wait(1.0):
        if not alive():
            progress.say(gone())
            return 1
    return 0


def _ended(returncode: int | None) -> str:
    """How llama_cpp.server ended by itself; for SIGILL, what to rebuild: a llama.cpp compiled for this CPU's reported
    features (GGML_NATIVE) may run instructions the kernel has not enabled, AMX tiles on a VM (ggml-org/llama.cpp#26954)."""
    if returncode is None or returncode >= 0:
        return f"exited on its own (exit {returncode})"
    if -returncode == signal.SIGILL:
        return (
            "was killed by SIGILL, an instruction this CPU refuses: reinstall the llama-cpp extra built with "
            "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF' (docs/troubleshooting.md)"
        )
    return f"was killed by {signal.Signals(-returncode).name}"


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop
