"""TensorRT-LLM's metric families as a server publishes them on :metrics (nv_trt_llm_*: gauges labelled model,
version and one category, see tensorrtllm_backend's custom_metrics_reporter), read once or watched while requests
run: the evidence of batching that holds for a real engine and for the stand-in alike."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Callable

# Prometheus text exposition: `name{label="value",...} value [timestamp]`, and `# TYPE name counter|gauge|...`
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})? (\S+)(?: -?\d+)?$", re.M)
_TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_NOT_CATEGORY = ("model", "version")

Gauges = dict  # (family, category value) -> value, e.g. ("nv_trt_llm_request_metrics", "scheduled") -> 8.0


def samples(text: str, prefixes: tuple[str, ...] = ("nv_",)) -> Iterator[tuple[str, dict[str, str], float]]:
    """(family, labels, value) of every sample in a Prometheus text page whose name starts with one of `prefixes`."""
    for name, labels, value in _SAMPLE.findall(text):
        if name.startswith(prefixes):
            yield name, dict(_LABEL.findall(labels)), float(value)


def family_types(text: str) -> dict[str, str]:
    """{family: counter | gauge | summary | histogram | untyped} from a page's `# TYPE` lines."""
    return dict(_TYPE.findall(text))


def trtllm_gauges(text: str, model: str = "tensorrt_llm") -> Gauges:
    """The nv_trt_llm_* gauges of `model` in a Prometheus text page."""
    gauges = {}
    for family, pairs, value in samples(text, ("nv_trt_llm_",)):
        if not pairs or pairs.get("model", model) != model:
            continue
        category = next((v for k, v in pairs.items() if k not in _NOT_CATEGORY), "")
        gauges[(family, category)] = value
    return gauges


class GaugeWatch:
    """Samples the gauges every `interval_s` while its block runs (TensorRT-LLM updates them every
    stats_check_period_ms, 100 ms by default); keeps the highest value of each."""

    def __init__(self, fetch: Callable[[], Gauges], interval_s: float = 0.05):
        self.fetch, self.interval_s = fetch, interval_s
        self.highest: Gauges = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gauge-watch", daemon=True)

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                return

    def _sample(self) -> None:
        for key, value in self.fetch().items():
            self.highest[key] = max(value, self.highest.get(key, value))
        self.samples += 1

    def __enter__(self) -> GaugeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def most(self, family: str, category: str) -> float | None:
        return self.highest.get((family, category))
