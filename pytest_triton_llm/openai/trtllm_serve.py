"""The project's trtllm-serve stand-in (stand_ins/trtllm_serve): the reference model of a lock engine behind
trtllm-serve's OpenAI protocol, for the /v1 checks that only trtllm-serve's own fields can show (ignore_eos, min_tokens,
streamed usage, the 400 for an unknown field, /perf_metrics). Its code and the reference engine's modules it imports by
bare name are copied into a run directory and started as `python server.py CHECKPOINT` on 127.0.0.1, as a managed
process (processes.py), waited for, stopped. Every answer carries the stand-in header (openai_target.STAND_IN_HEADER).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from ..stack.cache import EngineCache
from ..stack.engines import BuildSite, backend_of
from ..common.errors import TritonLLMError
from ..stack.lock import Lock
from .client import OpenAIEndpoint, start_until_listed
from ..host.processes import ManagedProcess
from ..common.progress import Progress
from ..stack.repository.stand_in import version
from ..stack.runtimes.ports import free_ports
from ..stack.runtimes.server import serving_environment

CODE = resources.files("pytest_triton_llm") / "stand_ins"
# the stand-in's own modules, and the reference engine's modules it imports by bare name
MODULES = (
    ("trtllm_serve", "server.py"),
    ("trtllm_serve", "protocol.py"),
    ("triton_models/tensorrt_llm", "generation.py"),
    ("triton_models/tensorrt_llm", "guided.py"),
    ("triton_models/tensorrt_llm", "inflight.py"),
    ("triton_models/tensorrt_llm", "lora.py"),
    ("triton_models/tensorrt_llm", "errors.py"),
    ("triton_models/common", "served_contract.py"),
    ("triton_models/tensorrt_llm", "prefix_cache.py"),
    ("triton_models/tensorrt_llm", "retention.py"),
    ("triton_models/tensorrt_llm", "ngram.py"),
)
SHARED = resources.files("pytest_triton_llm") / "triton" / "hf_tokenizer.py"
MAX_SEQ_LEN = 2048  # tokens, as the llama.cpp server's context: the embedded default's lengths fit


class StandInUnavailable(TritonLLMError, RuntimeError):
    """The stand-in could not start (its extra is missing, or it did not answer): one line, what to do."""


@dataclass(frozen=True)
class TrtllmServeStandIn:
    url: str  # http://127.0.0.1:PORT/v1
    model: str  # the id /v1/models lists
    tokenizer: Path  # what to pass as --tokenizer (the id is a directory's name, as trtllm-serve lists it)
    process: ManagedProcess

    def stop(self) -> None:
        self.process.stop()


def installed(guided: bool = False) -> str | None:
    """Why the stand-in cannot start here, or None; `guided`: with guided decoding (xgrammar)."""
    missing = [name for name in ("fastapi", "uvicorn", "torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        return f'{", ".join(missing)} not installed: pip install -c constraints.txt -e ".[reference]"'
    if guided and importlib.util.find_spec("xgrammar") is None:
        return 'guided_decoding_backend xgrammar: xgrammar not installed: pip install -c constraints.txt -e ".[guided]"'
    return None


def stage(run_dir: Path, checkpoint: Path, served_name: str) -> Path:
    """The stand-in's code in `run_dir`, and a link named `served_name` to the checkpoint (trtllm-serve lists a
    model directory by its name). Returns the link."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for folder, name in MODULES:
        source = CODE
        for part in (*folder.split("/"), name):
            source = source / part
        shutil.copyfile(str(source), run_dir / name)
    shutil.copyfile(str(SHARED), run_dir / "hf_tokenizer.py")
    link = run_dir / "model" / served_name
    link.parent.mkdir(exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(checkpoint.resolve(), target_is_directory=True)
    return link


def command(run_dir: Path, model: Path, tokenizer: Path, port: int, mark: str, options_file: Path | None) -> list[str]:
    argv = [sys.executable, str(run_dir / "server.py"), str(model), "--served-name", model.name, "--tokenizer", str(tokenizer)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max_seq_len", str(MAX_SEQ_LEN), "--stand-in-mark", mark]
    return argv + (["--extra_llm_api_options", str(options_file)] if options_file is not None else [])


def serve_engine(
    lock: Lock,
    name: str,
    cache: EngineCache,
    work_dir: Path,
    *,
    rebuild: bool = False,
    port: int | None = None,
    perf_metrics: int = 0,
    guided_decoding_backend: str | None = None,
    extra_options: dict | None = None,
) -> TrtllmServeStandIn:
    """The stand-in on lock engine `name`'s reference checkpoint, built or reused in `cache` as the reference backend
    builds it (the conversion runs here, whatever the runtime: no build site is asked for)."""
    engine = lock.engines.get(name)
    if engine is None or engine.backend != "reference":
        reference = [n for n, e in lock.engines.items() if e.backend == "reference"]
        raise StandInUnavailable(
            f"--engine {name!r}: the stand-in serves an engine of the reference backend ({', '.join(reference)})"
        )
    built = backend_of("reference").build(cache, name, engine, rebuild, lambda: BuildSite(None))
    return start(
        built.path,
        built.tokenizer_path,
        name,
        work_dir,
        cache.root / "run",
        cache.progress,
        port=port,
        perf_metrics=perf_metrics,
        guided_decoding_backend=guided_decoding_backend,
        extra_options=extra_options,
    )


def start(
    checkpoint: Path,
    tokenizer: Path,
    served_name: str,
    work_dir: Path,
    pid_dir: Path,
    progress: Progress,
    *,
    port: int | None = None,
    perf_metrics: int = 0,
    guided_decoding_backend: str | None = None,
    extra_options: dict | None = None,
    timeout_s: float = 180.0,
) -> TrtllmServeStandIn:
    """Start the stand-in on `checkpoint` and wait until /v1/models answers. `perf_metrics` > 0 runs it as trtllm-serve
    with `return_perf_metrics: true` and `perf_metrics_max_requests: N` in --extra_llm_api_options, and
    `guided_decoding_backend` ("xgrammar") with that option; `extra_options` (LLM API arguments, e.g. a
    speculative_config) go over them. Its answers carry the project's version in the stand-in header."""
    missing = installed(guided=guided_decoding_backend is not None)
    if missing is not None:
        raise StandInUnavailable(missing)
    run_dir = work_dir / "trtllm_serve_stand_in"
    model = stage(run_dir, checkpoint, served_name)
    options: dict = {"guided_decoding_backend": guided_decoding_backend} if guided_decoding_backend else {}
    if perf_metrics > 0:
        options.update(return_perf_metrics=True, perf_metrics_max_requests=perf_metrics)
    options.update(extra_options or {})
    options_file = None
    if options:
        options_file = run_dir / "extra_llm_api_options.yaml"
        options_file.write_text(yaml.safe_dump(options))
    port = port or free_ports(1)[0]
    log_path = work_dir / "trtllm_serve_stand_in.log"
    argv = command(run_dir, model, tokenizer, port, version(), options_file)
    # its torch threads take this xdist worker's share of the cores, as a local tritonserver's do, and no credentials
    process = ManagedProcess(argv, serving_environment(dict(os.environ)), log_path, pid_dir, "trtllm-serve stand-in")
    url = f"http://127.0.0.1:{port}/v1"
    endpoint = OpenAIEndpoint(url, timeout_s=5)
    with progress.step(f"trtllm-serve stand-in: {served_name} on {url} (log {log_path})"):
        listed = start_until_listed(process, endpoint, "the trtllm-serve stand-in", timeout_s, StandInUnavailable)
    return TrtllmServeStandIn(url, listed["id"], tokenizer, process)
