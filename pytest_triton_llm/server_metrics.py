"""TensorRT-LLM's metric families as a server publishes them on :metrics (nv_trt_llm_*: gauges labelled model,
version and one category, see tensorrtllm_backend's custom_metrics_reporter), read once or watched while requests
run: the evidence of batching that holds for a real engine and for the stand-in alike."""

from __future__ import annotations

import re
import threading
from typing import Callable

_GAUGE = re.compile(r"^(nv_trt_llm_\w+)\{([^}]*)\} (\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_NOT_CATEGORY = ("model", "version")

Gauges = dict  # (family, category value) -> value, e.g. ("nv_trt_llm_request_metrics", "scheduled") -> 8.0


def trtllm_gauges(text: str, model: str = "tensorrt_llm") -> Gauges:
    """The nv_trt_llm_* gauges of `model` in a Prometheus text page."""
    gauges = {}
    for family, labels, value in _GAUGE.findall(text):
        pairs = dict(_LABEL.findall(labels))
        if pairs.get("model", model) != model:
            continue
        category = next((v for k, v in pairs.items() if k not in _NOT_CATEGORY), "")
        gauges[(family, category)] = float(value)
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
