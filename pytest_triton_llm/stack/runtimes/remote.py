"""The remote runtime (--triton-url): a tritonserver that is already running elsewhere (a Kubernetes Service, a
Slurm allocation, a shared GPU box). Nothing is built, rendered, started, loaded or unloaded: the deployments are
read from the server (its version, repository index, model configs and metadata), or pinned in a lock with `url =`.

What serves is read positively, never guessed from a backend's name: TensorRT-LLM's llmapi model by its contract
(text_input with sampling_param_* inputs), the project's stand-in by the parameter it publishes
(stack/repository/stand_in.py), anything else as TensorRT-LLM (the C++ backend, or upstream's python tensorrt_llm model)."""

from __future__ import annotations

import json
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from ..cache import BuiltEngine
from ...host.endpoints import Endpoints
from ..engines.base import BuildSite
from ...host.hardware import REMOTE
from ..capabilities import ServedInputs, canonical
from ...triton.llmapi_contract import speaks_llmapi
from ..lock import ENSEMBLE_LAYOUT, LLMAPI_LAYOUT, Batching, Deployment, DeploymentRef, Lock, ServingLayout
from ...common.progress import Progress
from ..repository import ENTRY_MODELS
from ..repository.stand_in import STAND_IN_PARAMETER
from ...triton.tensor_contract import config_parameters, flag
from ...triton.tokenizer_source import TokenizerNotFound, tokenizer_dir
from ...common.usage import OptionError, header_pairs
from .base import Launch, RemoteOptions, RuntimeBase, RuntimeUnavailable, ServerOptions
from .server import ServerStartError, TritonServer

ENGINE_NAME = "remote"  # discovered deployments are named remote:v1, remote:inflight
_BATCHING: dict[str, Batching] = {"V1": "v1", "inflight_fused_batching": "inflight", "inflight_batching": "inflight"}


def _host_port(url: str, schemes: tuple[str, str], default_port: int, option: str) -> tuple[str, bool]:
    parts = urlsplit(url if "://" in url else f"{schemes[0]}://{url}")
    if parts.scheme not in schemes:
        raise OptionError(f"{option} {parts.scheme}://...: give {schemes[0]}:// or {schemes[1]}:// (TLS)")
    if parts.username or parts.password:
        raise OptionError(f"{option}: no credentials in the URL; send them with --triton-header 'NAME: VALUE'")
    if not parts.hostname:
        raise OptionError(f"{option}: no host in the URL")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or default_port}", parts.scheme == schemes[1]


def remote_options(
    url: str,
    http_url: str | None,
    metrics_url: str | None,
    headers: list[str],
    ca_file: str | None,
    tokenizer: str | None,
    allow_load: bool,
) -> RemoteOptions:
    """--triton-url and its companions, checked; HTTP and metrics default to the same host, ports 8000 and 8002."""
    grpc, grpc_tls = _host_port(url, ("grpc", "grpcs"), 8001, "--triton-url")
    host = grpc.rsplit(":", 1)[0]
    http, http_tls = _host_port(
        http_url or f"{'https' if grpc_tls else 'http'}://{host}:8000", ("http", "https"), 8000, "--triton-http-url"
    )
    metrics, metrics_tls = _host_port(metrics_url or f"http://{host}:8002", ("http", "https"), 8002, "--triton-metrics-url")
    pairs = header_pairs(headers, "--triton-header")
    if ca_file is not None and not Path(ca_file).is_file():
        raise OptionError(f"--triton-ca-file {ca_file}: no such file")
    endpoints = Endpoints(http, grpc, metrics, http_tls, grpc_tls, metrics_tls, ca_file, pairs)
    return RemoteOptions(f"{'grpcs' if grpc_tls else 'grpc'}://{grpc}", endpoints, tokenizer, allow_load)


@dataclass(frozen=True)
class ServedEngine:
    """What the suites read of an engine (lock.Engine's fields), as a remote server's configs and engine files say."""

    backend: str  # tensorrtllm, llmapi, or reference where the model publishes the project's stand-in parameter
    max_batch_size: int
    max_input_len: int | None  # None: not readable here (a lock deployment pinned to the URL gives it)
    max_output_len: int | None
    add_special_tokens: bool = True
    skip_special_tokens: bool = True
    lora: None = None  # the LoRA suite's adapters are made per lock engine: not yet for a discovered one
    entry_models: tuple[str, ...] = ()  # of ensemble, tensorrt_llm_bls: those the server has ready
    accuracy: None = None
    equality: None = None  # equality.rule_for: the half-precision default, the dtype being unknown
    dtype: str = "as served"
    tp_size: int = 1
    pp_size: int = 1
    deployments: dict = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size


@dataclass(frozen=True)
class Discovered:
    """One deployment read off the server: its ref, where its tokenizer is, its engine directory if readable, and the
    inputs its models declare."""

    ref: DeploymentRef
    tokenizer_dir: Path
    engine_dir: Path | None
    inputs: dict = field(default_factory=dict)  # model -> declared input names


class RemoteRuntime(RuntimeBase):
    name: ClassVar[str] = "remote"
    attaches: ClassVar[bool] = True
    entry = None  # which NGC image serves is not known from outside
    hardware = REMOTE
    gpu = "none"  # none of this host's: the server's hardware is not known from outside

    def __init__(self, options: RemoteOptions, metadata: dict, progress: Progress):
        self.options, self.metadata, self.progress = options, metadata, progress
        self.endpoints = options.endpoints
        self.reference = f"remote {options.url}"
        self._discovered: dict[str, Discovered] = {}

    @classmethod
    def default_for(cls, options: ServerOptions) -> bool:
        return options.remote is not None  # --triton-url

    @classmethod
    def refuses_load(cls, options: ServerOptions) -> str | None:
        """A shared server is not this session's to stress, unless --triton-allow-load."""
        remote = options.remote
        if remote is None or remote.allow_load:
            return None
        return f"stresses the server; {remote.url} is not this session's: pass --triton-allow-load to run it"

    @classmethod
    def create(cls, options: ServerOptions, cache_root: Path, progress: Progress) -> RemoteRuntime:
        remote = options.remote
        if remote is None:
            raise OptionError("--triton-runtime remote needs --triton-url grpc://HOST:PORT")
        endpoints = remote.endpoints
        where = endpoints.http_url("/v2")
        try:
            status, body = endpoints.get(where, timeout=15)
        except (OSError, urllib.error.URLError) as exc:
            raise RuntimeUnavailable(f"--triton-url {remote.url}: no answer from {where} ({exc})") from None
        if status in (401, 403):
            raise RuntimeUnavailable(
                f"--triton-url {remote.url}: {where} answered HTTP {status}: the server wants "
                "credentials; pass them with --triton-header 'Authorization: Bearer ...'"
            )
        if status != 200:
            raise RuntimeUnavailable(f"--triton-url {remote.url}: {where} answered HTTP {status}, not a Triton server")
        try:
            metadata = json.loads(body)
            metadata["version"]
        except (ValueError, KeyError, TypeError):
            raise RuntimeUnavailable(
                f"--triton-url {remote.url}: {where} answered {body[:80]!r}, not Triton's server "
                "metadata (is --triton-http-url the server's HTTP port?)"
            ) from None
        runtime = cls(remote, metadata, progress)
        runtime._check_grpc()
        return runtime

    def _check_grpc(self) -> None:
        from tritonclient.utils import InferenceServerException

        client = self.endpoints.grpc_client()
        try:
            client.is_server_ready(headers=self.endpoints.header_dict())
        except InferenceServerException as exc:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: gRPC: {exc.message()}") from None
        finally:
            client.close()

    # -- what serves ----------------------------------------------------------------------------
    @property
    def triton_version(self) -> str:
        return self.metadata["version"]

    def known_version(self) -> str:
        return self.triton_version

    def served_inputs(self, ref: DeploymentRef) -> ServedInputs | None:
        """What the server's own models declare (their metadata)."""
        found = self._discovered.get(ref.id)
        return ServedInputs(found.inputs, f"the server at {self.options.url}") if found and found.inputs else None

    def describe(self) -> str:
        return f"remote server {self.options.url} (Triton {self.triton_version})"

    def header_lines(self) -> list[str]:
        return [f"server: remote {self.options.url}, Triton {self.triton_version}; nothing built or started here"]

    def report_block(self) -> dict:
        return {
            "summary": f"remote {self.options.url}, Triton {self.triton_version}, not started by this session",
            "origin": "remote",
            "url": self.options.url,
            "version": self.triton_version,
        }

    def build_site(self) -> BuildSite:
        raise RuntimeUnavailable("the remote runtime builds nothing")

    def hardware_description(self) -> str:
        return "the remote server's (not known from here)"

    def gpu_missing(self) -> None:
        return None  # the remote server's GPUs are not this host's to count

    def start(self, launch: Launch) -> TritonServer:
        raise ServerStartError(f"{launch.deployment_id}: the remote runtime starts no server")

    # -- the deployments it serves ----------------------------------------------------------------
    def deployments(self, lock: Lock | None, names: list[str]) -> list[DeploymentRef]:
        """The lock's deployments pinned to this URL (checked against the server; their engine recipes give the limits
        the server does not show), else those read off the server; `names` (--deployment) picks among them."""
        pinned = [r for r in (lock.deployments().values() if lock else []) if r.options.url == self.options.url]
        found = self._discover(limits_needed=not pinned)
        if pinned and lock is not None:  # (pinned ones come from a lock)
            served = {(d.ref.layout, d.ref.options.batching): d for d in found}
            for ref in pinned:
                seen = served.get((ref.layout, ref.options.batching))
                if seen is None or seen.ref.options.decoupled != ref.options.decoupled:
                    what = ", ".join(
                        f"{d.ref.layout} {d.ref.options.batching} decoupled={d.ref.options.decoupled}" for d in found
                    )
                    raise RuntimeUnavailable(
                        f"{lock.path}: deployment {ref.id} pins url = {self.options.url} as {ref.layout} "
                        f"{ref.options.batching} decoupled={ref.options.decoupled}, but the server serves {what}"
                    )
                self._discovered[ref.id] = Discovered(ref, seen.tokenizer_dir, seen.engine_dir, seen.inputs)
            refs = pinned
        else:
            refs = [d.ref for d in found]
            self._discovered.update({d.ref.id: d for d in found})
        if names:
            unknown = [n for n in names if n not in {r.id for r in refs}]
            if unknown:
                known = ", ".join(r.id for r in refs) or "none"
                raise RuntimeUnavailable(f"--deployment {unknown[0]}: the server at {self.options.url} serves {known}")
            refs = [r for r in refs if r.id in names]
        return refs

    def attach(self, ref: DeploymentRef) -> tuple[BuiltEngine, TritonServer]:
        """The running server, and the engine as far as it can be read here (tokenizer, limits)."""
        found = self._discovered[ref.id]
        digest = _engine_digest(found.engine_dir) or "unknown (remote)"
        engine = BuiltEngine(ref.engine_name, found.tokenizer_dir, {"digest": digest}, True, 0.0)
        server = TritonServer(ref.id, self.endpoints, Path("(remote: no log here)"), None, self.options.url)
        server.metadata, server.ready_seconds = self.metadata, 0.0
        return engine, server

    def _discover(self, limits_needed: bool = True) -> list[Discovered]:
        index = self._decoded("/v2/repository/index", self._post("/v2/repository/index", b"{}"))
        ready = {m["name"] for m in index if m.get("state") == "READY"}
        if "tensorrt_llm" not in ready:
            raise RuntimeUnavailable(
                f"--triton-url {self.options.url}: no ready tensorrt_llm model (ready: {', '.join(sorted(ready)) or 'none'})"
            )
        configs = {m: self._json(f"/v2/models/{m}/config") for m in ready & {"tensorrt_llm", "preprocessing", "postprocessing"}}
        inputs = {
            m: frozenset(canonical(t["name"]) for t in self._json(f"/v2/models/{m}")["inputs"])
            for m in ready & {"tensorrt_llm", *ENTRY_MODELS}
        }
        core = configs["tensorrt_llm"]
        params = config_parameters(core)
        stand_in = STAND_IN_PARAMETER in params  # the project's own model says so; upstream's python model does not
        decoupled = bool(core.get("model_transaction_policy", {}).get("decoupled"))
        layout, batching, backend = self._layout(inputs["tensorrt_llm"], params, stand_in)
        engine_dir = _readable_dir(params.get("gpt_model_path") or params.get("engine_dir"))
        pre = config_parameters(configs.get("preprocessing", {}))
        tokenizer_dir = self._tokenizer_dir(pre.get("tokenizer_dir"))
        limits = _build_config(engine_dir) or {}
        if "max_input_len" not in limits and limits_needed:
            raise RuntimeUnavailable(
                f"--triton-url {self.options.url}: the engine's limits (max_input_len) are not readable here (engine "
                f"directory {params.get('gpt_model_path')!r}); pin the deployment in a lock with url = "
                f'"{self.options.url}" so its engine recipe gives them'
            )
        post = config_parameters(configs.get("postprocessing", {}))
        max_input = limits.get("max_input_len")
        engine = ServedEngine(
            backend=backend,
            max_batch_size=int(core.get("max_batch_size") or limits.get("max_batch_size") or 1),
            max_input_len=int(max_input) if max_input is not None else None,
            max_output_len=int(limits.get("max_output_len") or limits.get("max_seq_len", 0) - max_input) if max_input else None,
            add_special_tokens=flag(pre.get("add_special_tokens"), True),
            skip_special_tokens=flag(post.get("skip_special_tokens"), True),
            entry_models=(layout.entry,) if layout.one_model else tuple(m for m in ENTRY_MODELS if m in ready),
        )
        exclude = flag(params.get("exclude_input_in_output"), not layout.one_model)  # upstream llmapi: the prompt echoed
        options = Deployment(
            batching=batching,
            decoupled=decoupled,
            exclude_input_in_output=exclude,
            layout=layout.name if layout.one_model else None,
        )
        name = layout.name if layout.one_model else batching
        # ServedEngine stands in for lock.Engine: the fields of it that the suites read, as the server shows them
        ref = DeploymentRef(ENGINE_NAME, engine, name, options)  # type: ignore[arg-type]
        return [Discovered(ref, tokenizer_dir, engine_dir, inputs)]

    def _layout(self, core_inputs: frozenset[str], params: dict, stand_in: bool) -> tuple[ServingLayout, Batching, str]:
        """(layout, batching, engine backend) of the served tensorrt_llm model, from its inputs and parameters."""
        if speaks_llmapi(core_inputs):  # TensorRT-LLM's llmapi model: always in-flight, text in and out
            return LLMAPI_LAYOUT, "inflight", "reference" if stand_in else "llmapi"
        model_type = params.get("gpt_model_type")
        batching = _BATCHING.get(model_type or "")
        if batching is None:  # TensorRT-LLM's own models refuse to load without one (GetParameter)
            raise RuntimeUnavailable(
                f"--triton-url {self.options.url}: tensorrt_llm has gpt_model_type "
                f"{model_type!r}, not one of {', '.join(_BATCHING)}"
            )
        return ENSEMBLE_LAYOUT, batching, "reference" if stand_in else "tensorrtllm"

    def _tokenizer_dir(self, served: str | None) -> Path:
        readable = _readable_dir(served)
        if readable is not None and (readable / "tokenizer_config.json").is_file():
            return readable
        given = self.options.tokenizer
        if given is None:
            raise RuntimeUnavailable(
                f"--triton-url {self.options.url}: the server's tokenizer_dir {served!r} is not "
                "readable here; pass --tokenizer DIR_OR_HF_ID"
            )
        try:
            return tokenizer_dir(given, "--tokenizer")
        except TokenizerNotFound as exc:
            raise RuntimeUnavailable(str(exc)) from None

    def _get(self, path: str) -> bytes:
        try:
            status, body = self.endpoints.get(self.endpoints.http_url(path), timeout=30)
        except (OSError, urllib.error.URLError) as exc:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path}: {exc}") from None
        if status != 200:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path} answered HTTP {status}")
        return body

    def _json(self, path: str) -> dict:
        return self._decoded(path, self._get(path))

    def _decoded(self, path: str, body: bytes):
        try:
            return json.loads(body)
        except ValueError:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path} answered {body[:80]!r}, not JSON") from None

    def _post(self, path: str, body: bytes) -> bytes:
        try:
            with self.endpoints.open(self.endpoints.http_url(path), body, timeout=30) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path} answered HTTP {exc.code}") from None
        except (OSError, urllib.error.URLError) as exc:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path}: {exc}") from None


def _readable_dir(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_dir() else None


def _build_config(engine_dir: Path | None) -> dict | None:
    """max_input_len and friends from the engine: TensorRT-LLM's config.json, or the reference engine's engine.json."""
    for name in ("config.json", "engine.json"):
        path = engine_dir / name if engine_dir else None
        if path is not None and path.is_file():
            build = json.loads(path.read_text()).get("build_config")
            if isinstance(build, dict) and "max_input_len" in build:
                return build
    return None


def _engine_digest(engine_dir: Path | None) -> str | None:
    manifest = engine_dir / "manifest.json" if engine_dir else None
    if manifest is not None and manifest.is_file():
        return json.loads(manifest.read_text()).get("digest")
    return None
