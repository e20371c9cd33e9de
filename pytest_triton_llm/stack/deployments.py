"""Bring deployments up for a session: engine (cached) -> model repository -> tritonserver -> client."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cache import BuiltEngine, EngineCache
from ..triton.client import LLMClient
from .engines import backend_of, served_by_stand_in
from .engines.base import RenderSite
from ..faults import Fault, injected
from ..triton.hf_tokenizer import load_tokenizer
from .lock import DUMMY, DeploymentRef
from ..common.progress import Progress
from .repository import STAND_IN, model_code, stand_in, write_rendered
from .runtimes import Launch, Runtime
from .runtimes.server import TritonServer


@dataclass
class ServedDeployment:
    """What a suite gets: a deployment served by a running tritonserver, and a client for it."""

    ref: DeploymentRef
    engine: BuiltEngine
    server: TritonServer
    repository: Path
    client: LLMClient
    image: str  # what serves it: images.NO_IMAGE or the image reference
    hardware: str  # the GPU name, or cpu
    entry: str = "ensemble"  # the entry model the client's text requests go to
    remote: bool = False  # served by a server of its own (--triton-url): it sees none of this machine's files
    stand_in: bool = False  # the project's reference stand-in answers as its tensorrt_llm model (served_by_stand_in)
    _tokenizer: object = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.ref.id

    def at_entry(self, model: str) -> ServedDeployment:
        """The same deployment, its client's text requests sent to entry model `model` (ensemble, tensorrt_llm_bls)."""
        client = LLMClient(self.server.endpoints, ensemble=model, decode=self.client.decode)
        client.exclude_input = self.client.exclude_input
        client.sent = self.client.sent  # one record of what the test sent, whichever view sent it
        return dataclasses.replace(self, client=client, entry=model, _tokenizer=self.tokenizer)

    @property
    def tokenizer(self):
        """The engine's own tokenizer (loaded on first use)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.engine.tokenizer_path)
        return self._tokenizer

    @property
    def end_id(self) -> int:
        return self.tokenizer.eos_token_id

    def chat_prompt(self, user_message: str) -> str:
        """`user_message` in the engine's chat template, ready for the assistant's answer."""
        messages = [{"role": "user", "content": user_message}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=self.ref.engine.add_special_tokens)


def weights_record(ref: DeploymentRef) -> dict:
    """A dummy-weight engine's mark in the deployment's record (report JSON, summary): its numbers are speed only."""
    dummy = getattr(getattr(ref.engine, "source", None), "dummy", None)  # a remote server's engine has no lock source
    if dummy is None:
        return {}
    return {"weights": DUMMY, "dummy": {**dummy.describe(), "config": Path(dummy.config).name}}


def _warm_words(warm: dict | None) -> str:
    if not warm:
        return ""
    how = "reused, warm since" if warm["reused"] else "kept warm after the session, since"
    return f"; {how} {warm['since']} ({warm['slot']})"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


class DeploymentManager:
    """Serves deployments on demand, shared by every fixture that asks for one; keeps what was served for the
    summary and the report. A server no fixture holds stays up, idle, until another deployment is started (or
    the session ends): pytest may switch between parameters of one deployment (a test per entry model, then one
    without), and a restart per switch would cost seconds each."""

    def __init__(
        self,
        cache: EngineCache,
        runtime: Runtime,
        workdir: Path,
        progress: Progress,
        rebuild: bool,
        start_timeout_s: float,
        trtllm_stand_in: bool = False,
        trtllm_models: str | None = None,
        fault: Fault | None = None,
    ):
        self.cache = cache
        self.runtime = runtime
        self.workdir = workdir
        self.progress = progress
        self.rebuild = rebuild
        self.start_timeout_s = start_timeout_s
        self.trtllm_stand_in = trtllm_stand_in  # --trtllm-stand-in: tensorrtllm models served by the reference stand-in
        self.trtllm_models = trtllm_models  # --trtllm-models: upstream's python models, where GitHub is out of reach
        self.fault = fault  # --stand-in-fault: rendered into every model the stand-in serves
        self.engines: dict[str, BuiltEngine] = {}
        self.served: dict[str, ServedDeployment] = {}
        self.users: dict[str, int] = {}  # deployment id -> fixtures holding it
        self.records: dict[str, dict] = {}  # deployment id -> what was served, for the summary and report

    def engine_for(self, ref: DeploymentRef) -> BuiltEngine:
        if ref.engine_name not in self.engines:  # --rebuild-engines rebuilds once per session
            backend = backend_of(ref.engine.backend)
            self.engines[ref.engine_name] = backend.build(
                self.cache, ref.engine_name, ref.engine, self.rebuild, self.runtime.build_site
            )
        return self.engines[ref.engine_name]

    def serve(self, ref: DeploymentRef, clean: bool = False, own: bool = False) -> ServedDeployment:
        """The deployment's server, started on first use; `clean`: without the session's stand-in fault; `own`: never
        taken from or left to the warm servers of other sessions (its test breaks it)."""
        if ref.id in self.served:
            self.users[ref.id] += 1
            return self.served[ref.id]
        self._stop_idle()  # the one server held for a switch back is not needed: free its memory first
        start = time.monotonic()
        fault = None if clean else self.fault
        attached = self.runtime.attach(ref)
        if attached is not None:  # served by itself (a remote server): nothing built, rendered or started
            (engine, server), engine_s, repository, swapped = attached, 0.0, Path("(remote)"), False
        else:
            engine = self.engine_for(ref)
            engine_s = time.monotonic() - start
            server, repository, swapped = self._start(ref, engine, fault, own)
        served = self._served(ref, engine, server, repository, remote=attached is not None, swapped=swapped)
        self.progress.say(
            f"server {ref.id}: ready in {server.ready_seconds:.1f} s (Triton {server.version}, "
            f"engine {engine.name} {engine.digest[:12]}){_warm_words(server.warm)}"
        )
        self.served[ref.id] = served
        self.users[ref.id] = 1
        self.records[ref.id] = {
            "engine": engine.name,
            "backend": ref.engine.backend,
            **({"tensorrt_llm_model": "reference stand-in (--trtllm-stand-in)"} if swapped else {}),
            "model_code": model_code(repository),
            "served_by": self._served_by(ref, served.stand_in),
            **self._fault_record(ref, repository, fault),
            **self._server_record(ref, engine, server, engine_s),
            "total_s": round(time.monotonic() - start, 2),
        }
        return served

    def _start(
        self, ref: DeploymentRef, engine: BuiltEngine, fault: Fault | None, own: bool = False
    ) -> tuple[TritonServer, Path, bool]:
        """Render the deployment's repository beside this session's others and start its server: (server, repository,
        whether the stand-in was swapped in). A fault that a clean warm server can switch on is switched on there
        (stack/runtimes/warm.py) rather than rendered into a repository and a server of its own."""
        switched = fault is not None and not fault.own_server and not own and self.runtime.switches_faults()
        rendered = None if switched else fault
        base = self.workdir / _slug(ref.id)
        for restart in range(2, 1000):  # a deployment served again in this session keeps its first log
            if not base.exists():
                break
            base = self.workdir / f"{_slug(ref.id)}-{restart}"
        backend = backend_of(ref.engine.backend)
        repository = backend.render(
            ref,
            engine,
            base / "model_repository",
            self.runtime.triton_version,
            self.runtime.engine_dir_in_server(engine.name),
            self._render_site(backend),
        )
        swapped = self.trtllm_stand_in and not backend.stand_in
        if swapped:
            self._swap_in(ref, repository)
        if rendered is not None:  # laid over the stand-in's models once they are in place (stack/repository/stand_in.py)
            stand_in.add_fault(repository, rendered.name, model_code(repository))
        launch = Launch(
            ref.id,
            repository,
            engine.path,
            engine.name,
            base / "tritonserver.log",
            self.start_timeout_s,
            ref.engine.world_size,
            gpu=backend.needs_gpu and not swapped,
            faulted=rendered is not None,
            own=own,
            fault_switch=fault.name if switched and fault is not None else None,
        )
        return self.runtime.start(launch), repository, swapped

    def _served(
        self, ref: DeploymentRef, engine: BuiltEngine, server: TritonServer, repository: Path, remote: bool, swapped: bool
    ) -> ServedDeployment:
        layout = ref.serving_layout
        served = ServedDeployment(
            ref,
            engine,
            server,
            repository,
            LLMClient(server.endpoints, ensemble=layout.entry),
            self.runtime.reference,
            self.runtime.hardware,
            layout.entry,
            remote=remote,
            stand_in=served_by_stand_in(ref, swapped),
        )
        if layout.one_model:  # the model echoes the prompt unless its own option says otherwise
            served.client.exclude_input = ref.options.exclude_input_in_output
        served.client.decode = lambda ids: served.tokenizer.decode(ids, skip_special_tokens=ref.engine.skip_special_tokens)
        return served

    def _server_record(self, ref: DeploymentRef, engine: BuiltEngine, server: TritonServer, engine_s: float) -> dict:
        return {
            **weights_record(ref),
            "batching": ref.options.batching,
            "layout": ref.layout,
            "engine_digest": engine.digest,
            "engine_path": str(engine.path),
            "engine_cached": engine.cached,
            "engine_s": round(engine_s, 2),
            "runtime": self.runtime.name,
            "image": self.runtime.reference,
            "server_binary": server.binary,
            "server_version": server.version,
            "server_ready_s": round(server.ready_seconds, 2) if server.ready_seconds is not None else None,
            "server_log": str(server.log_path),
            **({"warm": server.warm} if server.warm else {}),
        }

    def _render_site(self, backend) -> RenderSite:
        if backend.stand_in:
            return RenderSite()
        return RenderSite(cache=self.cache, trtllm_models=self.trtllm_models, image_models=self.runtime.python_models_in_image())

    def _swap_in(self, ref: DeploymentRef, repository: Path) -> None:
        """--trtllm-stand-in: the tensorrt_llm model (the llmapi model's code, or the C++ backend's model) served by the
        reference stand-in, the rest as rendered; rendered.json's model_code says so."""
        rendered = repository.parent / f"{repository.name}.rendered.json"
        record = json.loads(rendered.read_text())
        if ref.serving_layout.one_model:
            stand_in.copy_llmapi(repository / "tensorrt_llm" / "1")
            config = repository / "tensorrt_llm" / "config.pbtxt"
            config.write_text(stand_in.marked(config.read_text()))
            swapped = ["tensorrt_llm"]
        else:
            swapped = stand_in.swap_in(repository, record["family"])
        record["model_code"] = {**record.get("model_code", {}), **dict.fromkeys(swapped, STAND_IN)}
        write_rendered(repository, record)
        self.progress.say(
            f"server {ref.id}: {', '.join(swapped) or 'no model'} served by the reference stand-in (--trtllm-stand-in)"
        )

    def _served_by(self, ref: DeploymentRef, stand_in: bool) -> str:
        """What answered as tensorrt_llm: the project's stand-in, or TensorRT-LLM of the image's version, in words that
        keep a matrix of stand-in runs from reading as a TensorRT-LLM compatibility result."""
        if stand_in:
            return STAND_IN
        path = ref.serving_layout.served_by
        entry = self.runtime.entry
        return f"TensorRT-LLM {entry.tensorrt_llm} ({path})" if entry is not None else f"TensorRT-LLM ({path}, version not known)"

    def _fault_record(self, ref: DeploymentRef, repository: Path, fault: Fault | None) -> dict:
        """Whether the session's fault is in this deployment's stand-in, for the record (and the summary)."""
        if self.fault is None:
            return {}
        if fault is None:  # the clean reference of --perf-against
            self.progress.say(f"server {ref.id}: served clean, without the stand-in fault {self.fault.name}")
            return {"stand_in_fault": {"name": self.fault.name, "injected": False, "why": "the clean reference"}}
        why = injected(fault, ref.layout, model_code(repository), STAND_IN)
        if why is None:
            self.progress.say(f"server {ref.id}: STAND-IN FAULT {fault.name} injected into {fault.model}")
            return {"stand_in_fault": {"name": fault.name, "injected": True, "model": fault.model}}
        self.progress.say(f"server {ref.id}: stand-in fault {fault.name} not injected: {why}")
        return {"stand_in_fault": {"name": fault.name, "injected": False, "why": why}}

    def release(self, deployment_id: str) -> None:
        """A fixture is done with the deployment; its server stays up, idle, while nothing else starts."""
        self.users[deployment_id] = max(0, self.users.get(deployment_id, 1) - 1)

    def discard(self, deployment_id: str) -> None:
        """Stop the deployment's server now, whoever holds it (a server of its own that its test broke)."""
        if deployment_id in self.served:
            self._stop(deployment_id)
        self.users.pop(deployment_id, None)

    def _stop_idle(self) -> None:
        for deployment_id in [d for d in self.served if self.users.get(d, 0) == 0]:
            self._stop(deployment_id)

    def _stop(self, deployment_id: str) -> None:
        served = self.served.pop(deployment_id)
        served.client.close()  # an open keep-alive connection holds tritonserver's shutdown
        served.server.stop()
        done = "stopped" if served.server.process is not None else "left running (this session did not start it)"
        if served.server.warm:
            done = f"left warm for later sessions ({served.server.warm['keep_s']:g} s unless one takes it)"
        self.progress.say(f"server {deployment_id}: {done}")

    def close(self) -> None:
        for deployment_id in list(self.served):
            self._stop(deployment_id)
