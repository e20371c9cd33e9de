"""The remote runtime (--triton-url): a tritonserver that is already running elsewhere (a Kubernetes Service, a
Slurm allocation, a shared GPU box). Nothing is built, rendered, started, loaded or unloaded: the deployments are
read from the server (its version, repository index and model configs), or pinned in a lock with `url =`."""

from __future__ import annotations

import json
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..cache import BuiltEngine
from ..endpoints import Endpoints
from ..engines.base import BuildSite
from ..lock import Deployment, DeploymentRef, Lock
from ..progress import Progress
from ..repository import ENTRY_MODELS
from ..tensor_contract import config_parameters, flag
from ..usage import OptionError
from .base import Launch, RuntimeUnavailable, ServerOptions
from .server import ServerStartError, TritonServer

ENGINE_NAME = "remote"  # discovered deployments are named remote:v1, remote:inflight
_BATCHING = {"V1": "v1", "inflight_fused_batching": "inflight", "inflight_batching": "inflight"}


@dataclass(frozen=True)
class RemoteOptions:
    """--triton-url and what goes with it."""

    url: str  # as shown: grpc[s]://host:port, never with credentials
    endpoints: Endpoints
    tokenizer: str | None = None  # --tokenizer: a directory or a Hugging Face id, where tokenizer_dir is not readable
    allow_load: bool = False  # --triton-allow-load: tests that stress the server run too


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


def remote_options(url: str, http_url: str | None, metrics_url: str | None, headers: list[str], ca_file: str | None,
                   tokenizer: str | None, allow_load: bool) -> RemoteOptions:  # fmt: skip
    """--triton-url and its companions, checked; HTTP and metrics default to the same host, ports 8000 and 8002."""
    grpc, grpc_tls = _host_port(url, ("grpc", "grpcs"), 8001, "--triton-url")
    host = grpc.rsplit(":", 1)[0]
    http, http_tls = _host_port(http_url or f"{'https' if grpc_tls else 'http'}://{host}:8000", ("http", "https"), 8000,
                                "--triton-http-url")  # fmt: skip
    metrics, metrics_tls = _host_port(metrics_url or f"http://{host}:8002", ("http", "https"), 8002, "--triton-metrics-url")
    pairs = []
    for number, header in enumerate(headers, 1):
        name, sep, value = header.partition(":")
        if not sep or not name.strip() or not value.strip():
            raise OptionError(f"--triton-header number {number}: expected 'NAME: VALUE'")  # the text may be a secret
        pairs.append((name.strip(), value.strip()))
    if ca_file is not None and not Path(ca_file).is_file():
        raise OptionError(f"--triton-ca-file {ca_file}: no such file")
    endpoints = Endpoints(http, grpc, metrics, http_tls, grpc_tls, metrics_tls, ca_file, tuple(pairs))
    return RemoteOptions(f"{'grpcs' if grpc_tls else 'grpc'}://{grpc}", endpoints, tokenizer, allow_load)


@dataclass(frozen=True)
class ServedEngine:
    """What the suites read of an engine (lock.Engine's fields), as a remote server's configs and engine files say."""

    backend: str  # tensorrtllm, or reference where the tensorrt_llm model is this project's python stand-in
    max_batch_size: int
    max_input_len: int
    max_output_len: int
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
    """One deployment read off the server: its ref, where its tokenizer is, and its engine directory if readable."""

    ref: DeploymentRef
    tokenizer_dir: Path
    engine_dir: Path | None


class RemoteRuntime:
    name = "remote"
    entry = None  # which NGC image serves is not known from outside
    hardware = "remote"
    gpu = "none"  # none of this host's: the server's hardware is not known from outside

    def __init__(self, options: RemoteOptions, metadata: dict, progress: Progress):
        self.options, self.metadata, self.progress = options, metadata, progress
        self.endpoints = options.endpoints
        self.reference = f"remote {options.url}"
        self._discovered: dict[str, Discovered] = {}

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
            raise RuntimeUnavailable(f"--triton-url {remote.url}: {where} answered HTTP {status}: the server wants "
                                     "credentials; pass them with --triton-header 'Authorization: Bearer ...'")  # fmt: skip
        if status != 200:
            raise RuntimeUnavailable(f"--triton-url {remote.url}: {where} answered HTTP {status}, not a Triton server")
        runtime = cls(remote, json.loads(body), progress)
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

    def describe(self) -> str:
        return f"remote server {self.options.url} (Triton {self.triton_version})"

    def header_lines(self) -> list[str]:
        return [f"server: remote {self.options.url}, Triton {self.triton_version}; nothing built or started here"]

    def report_block(self) -> dict:
        return {"summary": f"remote {self.options.url}, Triton {self.triton_version}, not started by this session",
                "origin": "remote", "url": self.options.url, "version": self.triton_version}  # fmt: skip

    def build_site(self) -> BuildSite:
        raise RuntimeUnavailable("the remote runtime builds nothing")

    def engine_dir_in_server(self, engine_name: str) -> None:
        return None

    def python_models_in_image(self) -> None:
        return None  # nothing is rendered for a server of its own

    def start(self, launch: Launch) -> TritonServer:
        raise ServerStartError(f"{launch.deployment_id}: the remote runtime starts no server")

    # -- the deployments it serves ----------------------------------------------------------------
    def deployments(self, lock: Lock | None, names: list[str]) -> list[DeploymentRef]:
        """The lock's deployments pinned to this URL (checked against the server), else those read off the server;
        `names` (--deployment) picks among them."""
        found = self._discover()
        pinned = [r for r in (lock.deployments().values() if lock else []) if r.options.url == self.options.url]
        if pinned:
            served = {d.ref.options.batching: d for d in found}
            for ref in pinned:
                seen = served.get(ref.options.batching)
                if seen is None or seen.ref.options.decoupled != ref.options.decoupled:
                    what = ", ".join(f"{d.ref.options.batching} decoupled={d.ref.options.decoupled}" for d in found)
                    raise RuntimeUnavailable(
                        f"{lock.path}: deployment {ref.id} pins url = {self.options.url} as {ref.options.batching} "
                        f"decoupled={ref.options.decoupled}, but the server serves {what or 'no tensorrt_llm model'}"
                    )
                self._discovered[ref.id] = Discovered(ref, seen.tokenizer_dir, seen.engine_dir)
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

    def _discover(self) -> list[Discovered]:
        index = json.loads(self._post("/v2/repository/index", b"{}"))
        ready = {m["name"] for m in index if m.get("state") == "READY"}
        if "tensorrt_llm" not in ready:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: no ready tensorrt_llm model "
                                     f"(ready: {', '.join(sorted(ready)) or 'none'})")  # fmt: skip
        configs = {m: json.loads(self._get(f"/v2/models/{m}/config")) for m in ready & {"tensorrt_llm", "preprocessing",
                                                                                         "postprocessing"}}  # fmt: skip
        core = configs["tensorrt_llm"]
        params = config_parameters(core)
        batching = _BATCHING.get(params.get("gpt_model_type", "V1"))
        if batching is None:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: tensorrt_llm gpt_model_type "
                                     f"{params.get('gpt_model_type')!r} is not one the suites know")  # fmt: skip
        decoupled = bool(core.get("model_transaction_policy", {}).get("decoupled"))
        engine_dir = _readable_dir(params.get("gpt_model_path") or params.get("engine_dir"))
        pre = config_parameters(configs.get("preprocessing", {}))
        tokenizer_dir = self._tokenizer_dir(pre.get("tokenizer_dir"))
        limits = _build_config(engine_dir)
        if limits is None:
            raise RuntimeUnavailable(
                f"--triton-url {self.options.url}: the engine's limits (max_input_len) are not readable here (engine "
                f"directory {params.get('gpt_model_path')!r}); pin the deployment in a lock with url = "
                f'"{self.options.url}" so its engine recipe gives them'
            )
        post = config_parameters(configs.get("postprocessing", {}))
        engine = ServedEngine(
            backend="reference" if core.get("backend") == "python" else "tensorrtllm",
            max_batch_size=int(core.get("max_batch_size") or limits.get("max_batch_size") or 1),
            max_input_len=int(limits["max_input_len"]),
            max_output_len=int(limits.get("max_output_len") or limits.get("max_seq_len", 0) - limits["max_input_len"]),
            add_special_tokens=flag(pre.get("add_special_tokens"), True),
            skip_special_tokens=flag(post.get("skip_special_tokens"), True),
            entry_models=tuple(m for m in ENTRY_MODELS if m in ready),
        )
        exclude = flag(params.get("exclude_input_in_output"), True)
        options = Deployment(batching=batching, decoupled=decoupled, exclude_input_in_output=exclude)
        ref = DeploymentRef(ENGINE_NAME, engine, batching, options)  # type: ignore[arg-type]
        return [Discovered(ref, tokenizer_dir, engine_dir)]

    def _tokenizer_dir(self, served: str | None) -> Path:
        readable = _readable_dir(served)
        if readable is not None and (readable / "tokenizer_config.json").is_file():
            return readable
        given = self.options.tokenizer
        if given is None:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: the server's tokenizer_dir {served!r} is not "
                                     "readable here; pass --tokenizer DIR_OR_HF_ID")  # fmt: skip
        if Path(given).is_dir():
            return Path(given)
        from huggingface_hub import snapshot_download  # an id: its tokenizer files only

        patterns = ["tokenizer*", "special_tokens_map.json", "*.jinja", "vocab*", "merges.txt", "config.json"]
        return Path(snapshot_download(given, allow_patterns=patterns))

    def _get(self, path: str) -> bytes:
        status, body = self.endpoints.get(self.endpoints.http_url(path), timeout=30)
        if status != 200:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path} answered HTTP {status}")
        return body

    def _post(self, path: str, body: bytes) -> bytes:
        try:
            with self.endpoints.open(self.endpoints.http_url(path), body, timeout=30) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeUnavailable(f"--triton-url {self.options.url}: {path} answered HTTP {exc.code}") from None


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
