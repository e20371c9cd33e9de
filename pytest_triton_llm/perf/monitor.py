"""Server metrics and GPU telemetry sampled while a load point runs: its time series and the report's figures."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass, field

from ..triton.server_metrics import family_types, samples
from .telemetry import TelemetryUnavailable, gpu_source, gpu_summary, served_gpu

DEFAULT_SCRAPE_MS = 250
# Triton's per-model families (server docs/user_guide/metrics.md: request counts, cumulative *_duration_us counters,
# the nv_inference_pending_request_count gauge) and TensorRT-LLM's gauges (tensorrtllm_backend
# inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc)
FAMILY_PREFIXES = ("nv_inference_", "nv_trt_llm_")
ACTIVE = 'nv_trt_llm_request_metrics{request_type="active"}'
SCHEDULED = 'nv_trt_llm_request_metrics{request_type="scheduled"}'
KV_USED = 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}'
KV_FREE = 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free"}'
KV_MAX = 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}'
ITERATIONS = 'nv_trt_llm_general_metrics{general_type="iteration_counter"}'  # a gauge that counts
PENDING = "nv_inference_pending_request_count"
QUEUE = "nv_inference_queue_duration_us"
# Triton's request time is queue + compute input + compute infer + compute output (metrics.md, "Latencies")
COMPUTE = (
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
ERRORS_KEPT = 3


class ScrapeFailed(UserWarning):
    """Some samples of a load point could not be read: counted in the report, shown in pytest's warnings summary."""


def series_key(family: str, labels: dict[str, str]) -> str:
    """`family{label="value",...}` without the model and version labels (one model is watched), as Prometheus
    writes a series; the bare family where nothing else labels it."""
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k not in ("model", "version"))
    return f"{family}{{{rest}}}" if rest else family


def page_values(text: str, model: str) -> dict[str, float]:
    """{series key: value} of the nv_inference_* and nv_trt_llm_* samples of `model` in a metrics page."""
    return {
        series_key(family, labels): value
        for family, labels, value in samples(text, FAMILY_PREFIXES)
        if labels.get("model") == model
    }


def counter_keys(text: str, keys) -> set[str]:
    """The keys whose family the page types `counter` (cumulative: their series are read as per-interval rates)."""
    counters = {family for family, kind in family_types(text).items() if kind == "counter"}
    return {key for key in keys if key.split("{")[0] in counters}


@dataclass
class Samples:
    """What a Sampler read: times (clock seconds) and values of the reads that answered, and the failed ones."""

    times: list[float] = field(default_factory=list)
    values: list = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)

    def failed_within(self, start: float, end: float) -> list[str]:
        return [error for t, error in self.failures if start <= t <= end]


class Sampler:
    """Calls `read` when its block starts, every `interval_s` while it runs and once more when it ends, on a thread
    of its own; a read that raises is kept as a failure (time, error), never silently dropped."""

    def __init__(self, read: Callable[[], object], interval_s: float, clock: Callable[[], float] = time.perf_counter):
        self.read, self.interval_s, self.clock = read, interval_s, clock
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perf-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        before = self.clock()
        try:
            value = self.read()
        except Exception as exc:  # noqa: BLE001 (counted and reported: a failed read must not end the load point)
            self.samples.failures.append((before, f"{type(exc).__name__}: {exc}"[:200]))
            return
        # the read stands for the middle of the time it took (a scrape of a busy server can take tens of ms)
        self.samples.times.append((before + self.clock()) / 2)
        self.samples.values.append(value)

    def __enter__(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _mean_max(values: list[float]) -> dict | None:
    return {"mean": round(sum(values) / len(values), 3), "max": round(max(values), 3)} if values else None


def kv_utilisation(values: dict[str, float]) -> float | None:
    """used / (used + free) KV cache blocks (used / max where free is not published), None without them."""
    used, free, most = values.get(KV_USED), values.get(KV_FREE), values.get(KV_MAX)
    if used is None:
        return None
    if free is not None and used + free > 0:
        return used / (used + free)
    return used / most if most else None


def interval_rates(times: list[float], values: list[dict], counters: set[str]) -> dict[str, list[float | None]]:
    """{counter key: per-second rate over each interval}, None for the first sample, where a key is missing, and
    where the counter went down (the server restarted)."""
    rates: dict[str, list[float | None]] = {key: [None] for key in sorted(counters)}
    for i in range(1, len(times)):
        dt = times[i] - times[i - 1]
        for key in rates:
            a, b = values[i - 1].get(key), values[i].get(key)
            rates[key].append(None if a is None or b is None or b < a or dt <= 0 else round((b - a) / dt, 3))
    return rates


def queue_share(before: dict, after: dict) -> float | None:
    """Queue time / (queue + compute time) of the requests Triton finished between two pages; None where it finished
    none or does not publish the durations."""
    keys = (QUEUE, *COMPUTE)
    if any(key not in before or key not in after for key in keys):
        return None
    spent = {key: after[key] - before[key] for key in keys}
    total = sum(spent.values())
    return spent[QUEUE] / total if total > 0 and min(spent.values()) >= 0 else None


def _bracket(times: list[float], start: float, end: float) -> tuple[int, int] | None:
    """Indexes of the last sample at or before `start` and the first at or after `end`, where both exist."""
    first = max((i for i, t in enumerate(times) if t <= start), default=None)
    last = min((i for i, t in enumerate(times) if t >= end), default=None)
    return None if first is None or last is None else (first, last)


def server_summary(sampled: Samples, start: float, end: float, interval_ms: int) -> dict:
    """The report's server_metrics of one load point over [start, end]: gauges by the samples within it, counters
    (queue share, iterations) between the samples that bracket it."""
    times, values = sampled.times, sampled.values
    inside = [v for t, v in zip(times, values, strict=True) if start <= t <= end]
    failed = sampled.failed_within(start, end)
    summary: dict = {
        "interval_ms": interval_ms,
        "samples": len(inside),
        "failed_scrapes": len(failed),
        "scrape_errors": sorted(set(failed))[:ERRORS_KEPT],
    }
    for name, key in (("active_requests", ACTIVE), ("scheduled_requests", SCHEDULED), ("pending_requests", PENDING)):
        summary[name] = _mean_max([v[key] for v in inside if key in v])
    summary["kv_cache_utilisation"] = _mean_max([u for v in inside if (u := kv_utilisation(v)) is not None])
    summary["queue_share"] = summary["iterations"] = summary["iterations_per_s"] = None
    if (bracket := _bracket(times, start, end)) is not None:
        before, after = values[bracket[0]], values[bracket[1]]
        share = queue_share(before, after)
        summary["queue_share"] = None if share is None else round(share, 4)
        if ITERATIONS in before and ITERATIONS in after:
            summary["iterations"] = after[ITERATIONS] - before[ITERATIONS]
            span = times[bracket[1]] - times[bracket[0]]
            summary["iterations_per_s"] = round(summary["iterations"] / span, 2) if span > 0 else None
    seen = {key.split("{")[0] for v in values for key in v}
    summary["missing"] = [f for f in (ACTIVE, KV_USED, PENDING, QUEUE, ITERATIONS) if f.split("{")[0] not in seen]
    return summary


def _columns(times: list[float], rows: list[dict], origin: float) -> dict:
    keys = sorted({key for row in rows for key in row})
    return {
        "t_s": [round(t - origin, 4) for t in times],
        "values": {key: [row.get(key) for row in rows] for key in keys},
    }


class LoadPointMonitor:
    """`with LoadPointMonitor(...) as watch:` around one load point's run_load samples the server's metrics page
    (`fetch`, parsed for `model`) and, where `gpu` serves, its telemetry, every `interval_ms` (0: neither);
    `watch.attach(summary, records)` then adds the report's figures to the load point's summary and keeps the time
    series in `watch.series`."""

    def __init__(
        self,
        fetch: Callable[[], str],
        model: str,
        interval_ms: int,
        gpu: dict | None,
        no_gpu: str = "",
        clock: Callable[[], float] = time.perf_counter,
        gpu_reader: Any = None,  # tests: a reader in place of NVML or nvidia-smi
    ):
        self.fetch, self.model, self.interval_ms, self.clock = fetch, model, interval_ms, clock
        self.gpu, self.no_gpu = gpu, no_gpu
        self.counters: set[str] = set()
        self.server: Sampler | None = None
        self.telemetry: Sampler | None = None
        self.gpu_absent: str | None = None
        self.source: str | None = None
        self.series: dict = {}
        self._reader: Any = gpu_reader

    def _scrape(self) -> dict[str, float]:
        text = self.fetch()
        values = page_values(text, self.model)
        if not values:
            raise ValueError(f"the metrics page has no nv_inference_* or nv_trt_llm_* series of model {self.model!r}")
        self.counters |= counter_keys(text, values)
        return values

    def __enter__(self) -> LoadPointMonitor:
        if self.interval_ms <= 0:
            self.gpu_absent = "off (--perf-scrape-ms 0)"
            return self
        interval_s = self.interval_ms / 1000.0
        try:
            self._reader = self._reader or gpu_source(self.gpu, self.no_gpu)
        except TelemetryUnavailable as exc:
            self.gpu_absent = str(exc)
        else:
            self.source = self._reader.name
            self.telemetry = Sampler(self._reader, interval_s, self.clock).__enter__()
        self.server = Sampler(self._scrape, interval_s, self.clock).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for sampler in (self.server, self.telemetry):
            if sampler is not None:
                sampler.__exit__(*exc)
        if self.telemetry is not None and hasattr(self._reader, "close"):
            self._reader.close()

    def attach(self, summary: dict, records: list) -> dict:
        """`summary` (a load point's run) with server_metrics and gpu_telemetry added; its series in self.series."""
        sent = [r.sent for r in records]
        ends = [r.done if r.done is not None else r.sent for r in records]
        start, end = (min(sent), max(ends)) if records else (float("-inf"), float("inf"))
        if self.server is None:
            summary["server_metrics"] = {"absent": "off (--perf-scrape-ms 0)"}
            summary["gpu_telemetry"] = {"absent": self.gpu_absent}
            return summary
        sampled = self.server.samples
        figures = server_summary(sampled, start, end, self.interval_ms)
        summary["server_metrics"] = {"model": self.model, **figures}
        origin = start if records else (sampled.times or [0.0])[0]
        server = _columns(sampled.times, sampled.values, origin)
        times, values = sampled.times, sampled.values
        server["rates_per_s"] = interval_rates(times, values, self.counters)
        server["queue_share"] = [None] + [_round(queue_share(a, b)) for a, b in zip(values, values[1:], strict=False)]
        server["kv_cache_utilisation"] = [_round(kv_utilisation(v)) for v in values]
        server["failed"] = [{"t_s": round(t - origin, 4), "error": e} for t, e in sampled.failures]
        self.series = {
            "window_s": [0.0, round(end - start, 4)] if records else None,
            "interval_ms": self.interval_ms,
            "model": self.model,
            "server": server,
        }
        if self.telemetry is None:
            summary["gpu_telemetry"] = {"absent": self.gpu_absent}
        else:
            gpu = self.telemetry.samples
            tokens = summary.get("output_tokens", 0)
            found = gpu_summary(gpu.times, gpu.values, start, end, tokens)
            failed = gpu.failed_within(start, end)
            index = (self.gpu or {}).get("index")
            summary["gpu_telemetry"] = {"gpu": index, "source": self.source, **found, "failed_samples": len(failed)}
            if failed:
                summary["gpu_telemetry"]["sample_errors"] = sorted(set(failed))[:ERRORS_KEPT]
            self.series["gpu"] = {"index": index, "source": self.source, **_columns(gpu.times, gpu.values, origin)}
            self.series["gpu"]["failed"] = [{"t_s": round(t - origin, 4), "error": e} for t, e in gpu.failures]
        self._warn(figures["failed_scrapes"], summary["gpu_telemetry"].get("failed_samples", 0), figures["samples"])
        return summary

    def _warn(self, scrapes: int, gpu_samples: int, taken: int) -> None:
        if scrapes or gpu_samples or not taken:
            said = [f"{scrapes} failed metrics scrapes"] if scrapes else []
            said += [f"{gpu_samples} failed GPU samples"] if gpu_samples else []
            said += ["no metrics sample fell within the load point"] if not taken else []
            warnings.warn(ScrapeFailed(f"{self.model}: {', '.join(said)} (see server_metrics in the report)"), stacklevel=2)


def monitor_load(served, interval_ms: int, run: dict) -> LoadPointMonitor:
    """The monitor of one load point of deployment `served` (a ServedDeployment), on the GPU of the report's run
    block `run` (none for a remote server: this host's GPU is not the one that serves)."""
    gpu, why = served_gpu(run)
    endpoints = served.client.endpoints
    timeout_s = max(1.0, 4 * interval_ms / 1000.0)  # a hung scrape counts as failed rather than stall the samples

    def fetch() -> str:
        with endpoints.open(endpoints.metrics_url(), timeout=timeout_s) as reply:
            return reply.read().decode()

    return LoadPointMonitor(fetch, served.client.core_model, interval_ms, gpu, why)
