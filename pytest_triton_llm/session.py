"""Session state behind the plugin: options, the lock, served deployments, timings, the report."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .cache import EngineCache
from .compat import load_compat
from .deployments import DeploymentManager, ServedDeployment
from .lock import DeploymentRef, Lock, load_lock
from .progress import Progress
from .report import RunReport
from .perf.baseline import save_baseline
from .perf.plot import plot_latency_vs_throughput
from .runtimes.images import ImageError, expand_image
from .runtimes.processes import reap_orphans

DEFAULT_LOCK = "engines.lock"
DEFAULT_CACHE = "~/.cache/pytest-triton-llm"


class OptionError(ValueError):
    """A command-line option the plugin refuses; reported as one line with exit code 4."""


@dataclass(frozen=True)
class Options:
    engines_lock: str | None  # None: the default ./engines.lock, which may be absent
    engine_cache: str
    rebuild_engines: bool
    deployments: tuple[str, ...]
    report: str | None
    perf_save: str | None
    triton_image: str | None
    triton_url: str | None
    start_timeout_s: float
    gpus: str | None = None
    triton_runtime: str | None = None  # "container" or "local"; None: container with --triton-image
    tritonserver: str | None = None
    trtllm_examples: str | None = None

    @property
    def runtime(self) -> str:
        return self.triton_runtime or ("container" if self.triton_image else "local")

    def check(self) -> None:
        if self.triton_image:
            try:
                expand_image(self.triton_image)
            except ImageError as exc:
                raise OptionError(str(exc)) from None
        if self.gpus is not None and not re.fullmatch(r"all|\d+(,\d+)*", self.gpus):
            raise OptionError(f"--gpus {self.gpus!r}: give 'all' or GPU ids such as 0 or 0,1")
        if self.triton_url:
            raise OptionError(f"--triton-url {self.triton_url}: the remote runtime is not yet supported")
        if self.start_timeout_s <= 0:
            raise OptionError("--triton-start-timeout must be > 0")
        if self.runtime == "container" and not self.triton_image:
            raise OptionError("--triton-runtime container needs --triton-image: the image to start")
        if self.runtime == "container" and self.tritonserver:
            raise OptionError("--tritonserver is for the local runtime: a container runs its image's own tritonserver")
        if self.runtime == "local" and self.triton_image and self.image_entry() is None:
            raise OptionError(
                f"--triton-runtime local --triton-image {self.triton_image}: give an NGC image listed in "
                "compat.toml (YY.MM-trtllm), whose versions the local tritonserver and tensorrt_llm are checked against"
            )

    def image_entry(self):
        """compat.toml's entry for --triton-image (None without one, or for an image it does not list)."""
        return load_compat().for_image(expand_image(self.triton_image)) if self.triton_image else None


class TritonLLMSession:
    def __init__(self, options: Options, progress: Progress):
        options.check()
        self.options = options
        self.progress = progress
        self.lock = self._load_lock()
        self.selected: list[DeploymentRef] = self.lock.select(list(options.deployments)) if self.lock else []
        self.cache = EngineCache(options.engine_cache, progress)
        self.report = RunReport({
            "engines_lock": str(self.lock.path) if self.lock else None,
            "engine_cache": str(self.cache.root),
            "deployments": [r.id for r in self.selected],
            "runtime": options.runtime,
            "image": expand_image(options.triton_image) if options.triton_image else "local",
        })  # fmt: skip
        self.runtime = self._make_runtime() if self.selected else None
        if self.runtime is not None and options.runtime == "local":
            found, entry = self.runtime.found, self.runtime.entry
            image = f" = image {entry.tag}-trtllm" if entry else ""
            self.report.record_run("server", {  # its summary is the terminal summary's line
                "summary": f"{found.binary} ({found.origin}), Triton {found.declared_version or '?'}{image}",
                "binary": str(found.binary), "origin": found.origin, "declared_version": found.declared_version,
                "backends": str(found.backends) if found.backends else "wheel",
                "compat_image": entry.tag if entry else None,
            })  # fmt: skip
        self.manager: DeploymentManager | None = None
        self.started = time.monotonic()
        self.first_ready_at: float | None = None  # the first deployment served: engines and server up
        self.first_test_at: float | None = None

    def _load_lock(self) -> Lock | None:
        path = Path(self.options.engines_lock or DEFAULT_LOCK)
        if self.options.engines_lock is None and not path.exists():
            return None  # not a suites run; tests that need a deployment say so
        return load_lock(path)

    def missing_lock_message(self) -> str:
        return f"no engines lock at {Path(DEFAULT_LOCK).resolve()}: run from the project root or pass --engines-lock PATH"

    def parameters(self, fixture: str, needs: set[str]) -> tuple[list, list[str], str]:
        """(params, ids, reason when there are none) for the `triton_llm` or `triton_llm_pair` fixture.
        A deployment whose image lacks what the test needs is a parameter skipped with that reason."""
        refs = [r for r in self.selected if needs <= r.capabilities]
        selected = ", ".join(r.id for r in self.selected) or "none"
        if fixture == "triton_llm":
            reason = f"needs a deployment with {', '.join(sorted(needs))} (selected: {selected})"
            return [self._param(r, needs) for r in refs], [r.id for r in refs], reason
        if fixture == "triton_llm_per_engine":
            chosen = {}
            for ref in refs:  # the in-flight deployment of each engine when selected, else its first
                current = chosen.get(ref.engine_name)
                if current is None or (ref.options.batching == "inflight" and current.options.batching != "inflight"):
                    chosen[ref.engine_name] = ref
            reason = f"needs a deployment with {', '.join(sorted(needs)) or 'anything'} (selected: {selected})"
            return [self._param(r, needs) for r in chosen.values()], [r.id for r in chosen.values()], reason
        pairs = self.lock.batching_pairs(refs)
        reason = f"needs a v1 and an inflight deployment of the same engine (selected: {selected})"
        params = [pytest.param(pair, marks=self._image_marks(pair[0], needs | {"v1", "inflight"})) for pair in pairs]
        return params, [f"{v1.engine_name}:{v1.name}-vs-{inf.name}" for v1, inf in pairs], reason

    def _param(self, ref: DeploymentRef, needs: set[str]):
        return pytest.param(ref, marks=self._image_marks(ref, needs | {ref.options.batching}))

    def _image_marks(self, ref: DeploymentRef, needs: set[str]) -> list:
        """A tensorrtllm engine runs what its image's backend supports (compat.toml)."""
        entry = self.runtime.entry if self.runtime is not None else None
        if ref.engine.backend != "tensorrtllm" or entry is None:
            return []
        reason = load_compat().lacking(entry, needs)
        return [pytest.mark.skip(reason=reason)] if reason else []

    def schedule_groups(self) -> dict[str, str]:
        """Parameter id -> the deployments it serves, for scheduling tests over xdist workers."""
        if self.lock is None:
            return {}
        groups = {r.id: r.id for r in self.selected}
        pairs, ids, _ = self.parameters("triton_llm_pair", set())
        groups.update({pid: f"{p.values[0][0].id}+{p.values[0][1].id}" for pid, p in zip(ids, pairs, strict=True)})
        return groups

    def start(self) -> None:
        self.started = time.monotonic()
        reap_orphans(self.cache.root / "run", self.progress)

    def _make_runtime(self):
        """Where tritonserver runs: containers of --triton-image, else a local subprocess (the serving
        image's tritonserver when pytest runs inside one, else the wheel's), checked by the version guard."""
        opts = self.options
        if opts.runtime == "container":
            from .runtimes.container import ContainerRuntime

            return ContainerRuntime(expand_image(opts.triton_image), opts.gpus, self.progress, opts.trtllm_examples)
        from .runtimes.discovery import ServerNotFound, find_tritonserver
        from .runtimes.local import LocalRuntime
        from .version_guard import VersionMismatch, check_versions, installed_tensorrt_llm

        try:
            found = find_tritonserver(opts.tritonserver, dict(os.environ))
            entry = check_versions(load_compat(), found, installed_tensorrt_llm(), opts.image_entry())
        except (ServerNotFound, VersionMismatch) as exc:
            raise OptionError(str(exc)) from None
        return LocalRuntime(self.cache.root, self.progress, found, entry, opts.trtllm_examples)

    def header_lines(self) -> list[str]:
        if self.runtime is None:
            return []
        lines = [f"triton-llm: {self.options.runtime} runtime: {self.runtime.describe()}"]
        if self.options.runtime == "local" and self.runtime.entry is not None:
            lines.append(f"triton-llm: versions as image {self.runtime.entry.describe()} (compat.toml)")
        return lines

    def serve(self, ref: DeploymentRef, tmp_path_factory) -> ServedDeployment:
        if self.manager is None:  # repositories and server logs go under pytest's basetemp
            workdir = tmp_path_factory.mktemp("triton-llm", numbered=False)
            self.manager = DeploymentManager(self.cache, self.runtime, workdir, self.progress,
                                             self.options.rebuild_engines, self.options.start_timeout_s)  # fmt: skip
        try:
            served = self.manager.serve(ref)
        finally:
            if ref.id in self.manager.records:
                self.report.add_deployment(ref.id, self.manager.records[ref.id])
        if self.first_ready_at is None:
            self.first_ready_at = time.monotonic()
        return served

    def release(self, deployment_id: str) -> None:
        if self.manager is not None:
            self.manager.release(deployment_id)

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
            self.manager.close()

    def publish(self) -> None:
        """Perf baseline, plot and the report: written once, by the process that saw every test."""
        perf = self.report.perf_results()
        if perf and self.options.perf_save:
            kept = save_baseline(self.options.perf_save, perf, self.report.run)
            note = f" (the previous file is kept as {kept})" if kept else ""
            self.progress.say(f"perf: baseline saved to {self.options.perf_save}{note}")
        if perf and self.options.report:  # the plot goes next to the report
            try:
                png = plot_latency_vs_throughput(perf, Path(self.options.report).with_suffix(".perf.png"))
            except Exception as exc:  # a missing plot must not cost the report
                self.progress.say(f"WARNING: perf plot not written: {type(exc).__name__}: {exc}")
            else:
                if png is not None:
                    self.report.record_run("plots", [str(png)])
        if self.options.report:
            self.report.write(Path(self.options.report), self.startup_s, self.first_test_s)
