"""What a Triton deployment says and answers after its engine died: its readiness, polled, and one request on each
path (entry models and tensorrt_llm; unary, and streamed where the deployment streams), all at once, each given
DEADLINE_S to answer. Judged by verdicts/health.py, which says what a probe is."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from ..host.endpoints import Endpoints
from .client import GenerationError, LLMClient
from .tensor_contract import NO_END
from ..verdicts.health import ANSWER, DEADLINE_S, ERROR, HANG, Probe, readiness_matters

TOKENS = 8


@dataclass(frozen=True)
class ProbePath:
    """One way in: an entry model with text, or tensorrt_llm with token ids; unary or streamed."""

    model: str
    streamed: bool
    ids: bool = False  # tensorrt_llm: token ids in and out

    @property
    def name(self) -> str:
        return f"{self.model} {'streamed' if self.streamed else 'unary'}"


def ask(endpoints: Endpoints, path: ProbePath, prompt: str, ids: list[int], timeout_s: float) -> str:
    """The greedy answer on `path` (text, or the ids as text), raising GenerationError on an error response."""
    client = LLMClient(endpoints, ensemble=path.model, core_model=path.model, timeout_s=timeout_s)
    try:
        if path.ids:
            tokens = (
                client.stream_ids(ids, TOKENS, end_id=NO_END).token_ids
                if path.streamed
                else client.generate_ids(ids, TOKENS, end_id=NO_END).token_ids
            )
            return " ".join(map(str, tokens or []))
        if path.streamed:
            return client.stream(prompt, TOKENS).text
        return client.generate(prompt, TOKENS).text or ""
    finally:
        client.close()


def probe(endpoints: Endpoints, path: ProbePath, prompt: str, ids: list[int]) -> Probe:
    start = time.monotonic()
    try:
        text = ask(endpoints, path, prompt, ids, DEADLINE_S)
    except (GenerationError, OSError) as exc:  # OSError: a connection refused or reset, a read timed out
        seconds = time.monotonic() - start
        outcome = HANG if seconds >= DEADLINE_S * 0.95 else ERROR
        return Probe(path.name, outcome, round(seconds, 2), str(exc).strip()[:300] or type(exc).__name__)
    return Probe(path.name, ANSWER, round(time.monotonic() - start, 2), text)


def not_ready_after(endpoints: Endpoints, models: list[str], window_s: float, decided: threading.Event) -> float | None:
    """Seconds until the server or one of `models` said it was not ready (or stopped answering), polled over
    `window_s` or until `decided` is set; None where all said ready while polled."""
    start = time.monotonic()
    urls = [endpoints.http_url("/v2/health/ready")] + [endpoints.http_url(f"/v2/models/{m}/ready") for m in models]
    while (elapsed := time.monotonic() - start) < window_s and not decided.is_set():
        for url in urls:
            try:
                status, _ = endpoints.get(url, timeout=1.0)
            except OSError:
                status = 0
            if status != 200:
                return round(elapsed, 2)
        time.sleep(0.2)
    return None


def after_engine_death(
    endpoints: Endpoints, paths: list[ProbePath], prompt: str, ids: list[int], kill: Callable[[], None]
) -> tuple[float | None, list[Probe]]:
    """Kill the engine, then poll readiness and probe every path at once: (not ready after s or None, probes). The
    polling ends with the probes where none hung: readiness cannot change that verdict (it took DEADLINE_S a test)."""
    kill()
    models = sorted({p.model for p in paths})
    decided = threading.Event()
    with ThreadPoolExecutor(len(paths) + 1) as pool:
        readiness = pool.submit(not_ready_after, endpoints, models, DEADLINE_S, decided)
        probes = list(pool.map(lambda p: probe(endpoints, p, prompt, ids), paths))
        if not readiness_matters(probes):
            decided.set()
        return readiness.result(), probes
