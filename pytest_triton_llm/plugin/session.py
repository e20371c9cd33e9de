"""Session state behind the plugin: the lock and the selected deployments, the runtime, served deployments,
start-up timings and the report."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from . import selection
from ..stack.cache import EngineCache
from ..stack.deployments import DeploymentManager, ServedDeployment
from ..stack.capabilities import ServedInputs, family_inputs, repository_inputs
from ..stack.compat import load_compat
from ..stack.engines import backend_of, check_lock, served_by_stand_in
from ..faults import NOT_CLEAN, fault_named
from ..host.images import NO_IMAGE
from ..stack.lock import DeploymentRef, Engine, Lock, load_lock
from .options import DEFAULT_LOCK, Options
from ..perf.calibrate import write_calibrated
from ..perf.history.record import record_session
from ..perf.options import PerfOptions
from ..perf.publish import dummy_deployments, publish
from ..host.processes import reap_orphans, shielded
from ..common.files import write_json
from ..common.progress import Progress
from .report import RunReport
from ..stack.repository import served_family
from ..stack.repository.llmapi import llmapi_family
from ..stack.runtimes import RUNTIMES, Runtime, RuntimeUnavailable, no_gpu_here
from ..common.usage import OptionError


class TritonLLMSession:
    def __init__(self, options: Options, progress: Progress):
        self.options = options
        self.progress = progress
        self.runtime_class = RUNTIMES[options.runtime]
        # a runtime that attaches (--triton-url): deployments come from its server, the lock is optional
        self.attaches = self.runtime_class.attaches
        # --stand-in-fault: a known upstream bug the stand-ins reproduce (checked by options: the name is known)
        self.fault = fault_named(options.server.stand_in_fault) if options.server.stand_in_fault else None
        self.lock = self._load_lock()
        self.openai_engine = self._openai_engine()
        # from the lock; with --triton-url, from the server once it has answered (--deployment names those)
        self.selected: list[DeploymentRef] = []
        if self.lock is not None and not self.attaches:
            self.selected = self.lock.select(list(options.deployments))
        self.cache = EngineCache(options.engines_cache, progress, verify=options.engines_verify)
        self.runtime: Runtime | None = None
        self.runtime_missing: str | None = None  # what the chosen runtime lacks here, said once a test needs it
        self.stopped_by_setup = False  # an xdist worker ended the run with stop_session's line
        if self.selected or self.attaches:
            try:
                self.runtime = self.runtime_class.create(options.server, self.cache.root, progress)
                served = self.runtime.deployments(self.lock, list(options.deployments))
                self.selected = self.selected if served is None else served
            except RuntimeUnavailable as exc:
                self.runtime_missing = str(exc)
        image = options.server.image
        self.report = RunReport(
            {
                "engines_lock": str(self.lock.path) if self.lock else None,
                "engine_cache": str(self.cache.root),
                "deployments": [r.id for r in self.selected],
                "runtime": options.runtime,
                "image": self.runtime.reference
                if self.runtime is not None and self.attaches
                else (image.reference if image else NO_IMAGE),
            },
            self.runtime.gpu if self.runtime is not None else None,
            self.runtime.hardware if self.runtime is not None else None,
        )
        if self.runtime is not None and (block := self.runtime.report_block()) is not None:
            self.report.record_run("server", block)
        if self.fault is not None:
            self.report.run["stand_in_fault"] = self.fault.record()
        self.manager: DeploymentManager | None = None
        self._served_inputs: dict[str, ServedInputs | None] = {}
        self.started = time.monotonic()
        self.first_ready_at: float | None = None  # the first deployment served: engines and server up
        self.first_test_at: float | None = None

    def _load_lock(self) -> Lock | None:
        path = Path(self.options.engines_lock or DEFAULT_LOCK)
        if self.options.engines_lock is None and not path.exists():
            return None  # not a suites run (or a remote one); tests that need a deployment say so
        return check_lock(load_lock(path))

    def _openai_engine(self) -> Engine | None:
        """--openai-engine's entry of the lock (an OptionError names the lock's engines when it has no such entry)."""
        name = self.options.openai.engine if self.options.openai else None
        if name is None:
            return None
        if self.lock is None:
            raise OptionError(f"--openai-engine {name}: {self.missing_lock_message()}")
        if name not in self.lock.engines:
            raise OptionError(f"--openai-engine {name!r}: {self.lock.path} has no such engine ({', '.join(self.lock.engines)})")
        return self.lock.engines[name]

    @property
    def deployments_known(self) -> bool:
        """Deployments can be parametrized: from the lock, or (--triton-url) from the server."""
        return self.lock is not None or self.attaches

    def missing_lock_message(self) -> str:
        return f"no engines lock at {Path(DEFAULT_LOCK).resolve()}: run from the project root or pass --engines-lock PATH"

    def choices(self, fixture: str, needs: set[str], entries: bool = False) -> tuple[list[selection.Choice], str]:
        return selection.choices(fixture, self.selected, needs, self.lacking, entries)

    def lacking(self, ref: DeploymentRef, needs: set[str], entry: str = "ensemble") -> str | None:
        """Why `ref` cannot run a test that needs `needs` (its text requests sent to `entry`): its backend's answer on
        the server in use, then what its served models declare."""
        image = self.runtime.entry if self.runtime else self._image_entry()
        why = backend_of(ref.engine.backend).lacking(needs, image)
        if why is None and (served := self.served_inputs(ref)) is not None:
            why = served.lacking(needs, entry, ref.options)
        return why

    def undeclared_inputs(self, served, needs: set[str]) -> list[str]:
        """The family-dependent inputs a test sent to `served` that none of the capabilities it needs covers."""
        inputs = self.served_inputs(served.ref)
        if inputs is None or not served.client.sent:
            return []
        return inputs.undeclared(served.client.sent, needs, served.ref.layout, served.entry)

    def _image_entry(self):
        image = self.options.server.image
        return load_compat().for_image(image.reference) if image is not None else None

    def served_inputs(self, ref: DeploymentRef) -> ServedInputs | None:
        """What `ref`'s served models declare: a remote server's own, a repository of one's own, else the template
        family of the server's version; None where that version is not known yet (an image not pulled)."""
        if ref.id not in self._served_inputs:
            self._served_inputs[ref.id] = self._read_served_inputs(ref)
        return self._served_inputs[ref.id]

    def _read_served_inputs(self, ref: DeploymentRef) -> ServedInputs | None:
        if self.attaches:
            return self.runtime.served_inputs(ref) if self.runtime is not None else None
        if ref.options.repository is not None:
            return ServedInputs(repository_inputs(Path(ref.options.repository)), f"your repository {ref.options.repository}")
        entry = self._image_entry()
        version = entry.triton if entry is not None else self.runtime.known_version() if self.runtime else None
        if version is None:
            return None
        family = llmapi_family(version) if ref.serving_layout.one_model else served_family(ref, version)
        multimodal = getattr(ref.engine, "vision", None) is not None
        return ServedInputs(family_inputs(family, multimodal), f"template family {family} (Triton {version})")

    def is_stand_in(self, ref: DeploymentRef) -> bool:
        """The reference backend, or (--trtllm-stand-in, in a repository rendered here) any engine: the stand-in serves
        its tensorrt_llm model."""
        return served_by_stand_in(ref, self.options.server.trtllm_stand_in and not self.attaches)

    def load_refused(self) -> str | None:
        """Why tests that stress the server (marker triton_llm_load) do not run on the chosen runtime's, or None."""
        return self.runtime_class.refuses_load(self.options.server)

    def schedule_groups(self) -> dict[str, str]:
        return selection.schedule_groups(self.selected)

    def start(self) -> None:
        self.started = time.monotonic()
        reap_orphans(self.cache.root / "run", self.progress)

    def gpu_missing(self) -> str | None:
        """Why a test marked `gpu` cannot run here, or None: the servers see no NVIDIA GPU."""
        if self.runtime is not None:
            return self.runtime.gpu_missing()
        return None if self.attaches else no_gpu_here(None)  # a server of its own counts its own GPUs

    def fault_line(self) -> str | None:
        """The one line that says a fault is on, for the header and the summary."""
        if self.fault is None:
            return None
        return f"triton-llm: STAND-IN FAULT ON: {self.fault.headline()}; {NOT_CLEAN}"

    def header_lines(self) -> list[str]:
        fault = [line] if (line := self.fault_line()) is not None else []
        if self.options.openai is not None:
            fault.append(
                f"triton-llm: OpenAI endpoint {self.options.openai.url} (the /v1 suites; its model and family from /v1/models)"
            )
        if self.runtime is None:
            return fault
        return [*fault, *self.runtime.header_lines(), f"triton-llm: hardware: {self.runtime.hardware_description()}"]

    def serve(self, ref: DeploymentRef, tmp_path_factory, clean: bool = False, own: bool = False) -> ServedDeployment:
        """The deployment's server; `own`: a server of its own that no other test or session shares (a test that breaks
        it, as the health check kills its engine), to be discarded after the test."""
        if self.manager is None:  # repositories and server logs go under pytest's basetemp
            if self.runtime is None:  # collection stops first where the runtime is missing (plugin.pytest_collection_finish)
                raise RuntimeUnavailable(self.runtime_missing or f"{ref.id}: no runtime was chosen to serve it")
            workdir = tmp_path_factory.mktemp("triton-llm", numbered=False)
            server = self.options.server
            self.manager = DeploymentManager(
                self.cache,
                self.runtime,
                workdir,
                self.progress,
                self.options.engines_rebuild,
                self.options.start_timeout_s,
                server.trtllm_stand_in,
                server.trtllm_models,
                self.fault,
            )
        try:
            served = self.manager.serve(ref, clean, own)
        finally:
            if ref.id in self.manager.records:
                self.report.add_deployment(ref.id, self.manager.records[ref.id])
        if self.first_ready_at is None:
            self.first_ready_at = time.monotonic()
        return served

    def reference_ref(self, name: str) -> DeploymentRef:
        """--perf-against's deployment of the lock, as a deployment of its own ("<id> (reference)"): a second server
        when it is also a deployment under test, never given the session's stand-in fault."""
        if self.attaches or self.lock is None:
            raise OptionError(
                f"--perf-against {name}: the reference is served here from the lock, so it needs a "
                "local or container runtime and an engines lock, not --triton-url"
            )
        known = self.lock.deployments()
        if name not in known:
            raise OptionError(
                f"--perf-against {name}: {self.lock.path} has no such deployment; it has {', '.join(sorted(known))}"
            )
        ref = known[name]
        return dataclasses.replace(ref, name=f"{ref.name} (reference)")

    def release(self, deployment_id: str) -> None:
        if self.manager is not None:
            self.manager.release(deployment_id)

    def discard(self, deployment_id: str) -> None:
        """Stop a server of its own (`serve(..., own=True)`) now: what its test broke serves nothing else."""
        if self.manager is not None:
            self.manager.discard(deployment_id)

    def note_test_start(self) -> None:
        if self.first_test_at is None:
            self.first_test_at = time.monotonic()

    @property
    def startup_s(self) -> float | None:
        """Session start until the first deployment was ready (engine built or reused, server up)."""
        return None if self.first_ready_at is None else round(self.first_ready_at - self.started, 2)

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def first_test_s(self) -> float | None:
        return None if self.first_test_at is None else round(self.first_test_at - self.started, 2)

    def stop_servers(self) -> None:
        if self.manager is not None:
            with shielded():  # a second Ctrl-C or a SIGTERM during shutdown must not leave a server behind
                self.manager.close()

    def publish(self, perf: PerfOptions) -> None:
        """The perf baseline and plot, then the report, the perf history's new runs and calibrated budgets: written
        once, by the process that saw every test."""
        plots = publish(
            self.report.perf_results(),
            self.report.run,
            perf.save,
            self.options.report,
            self.progress,
            dummy_deployments(self.report.deployments),
            self.report.perf_sweeps(),
            self.report.v1_perf_results(),
        )
        if plots:
            self.report.record_run("plots", plots)
        document = self.report.document(self.startup_s, self.first_test_s)
        if self.options.report:
            write_json(Path(self.options.report), document)
        if not (self.report.perf_results() or self.report.v1_perf_results()):
            return
        if perf.history:
            added = record_session(Path(perf.history), document)
            self.progress.say(f"perf history: {added} run(s) added to {perf.history}")
        if perf.calibrate and perf.budgets_file is not None:
            for line in write_calibrated(perf.budgets_file, document):
                self.progress.say(line)
