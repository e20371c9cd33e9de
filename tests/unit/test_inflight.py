"""The in-flight scheduler on a tiny random Llama: same greedy tokens as static batching while
requests join and leave, per-token streaming, the stop signal and client cancellation."""

import threading
import time

import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
transformers = pytest.importorskip("transformers")

from generation import GenerationRequest, ReferenceEngine, Sequence  # noqa: E402  (model dir on sys.path: conftest)
from inflight import InflightScheduler, Job, _Batch  # noqa: E402

VOCAB, SLOTS = 97, 3


def tiny_engine() -> ReferenceEngine:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,  # peaked logits: no greedy ties
    )
    torch.manual_seed(0)
    engine = ReferenceEngine.__new__(ReferenceEngine)
    engine.model = transformers.LlamaForCausalLM(config).eval()
    engine.vocab_size = VOCAB
    engine.build_config = {"max_batch_size": SLOTS, "max_input_len": 64, "max_output_len": 64, "max_seq_len": 128}
    return engine


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


@pytest.fixture
def slow_engine(engine, monkeypatch):
    """10 ms per step, so a test can act while a request is still being generated."""
    model = engine.model

    def slow(**kwargs):
        time.sleep(0.01)
        return model(**kwargs)

    slowed = ReferenceEngine.__new__(ReferenceEngine)
    slowed.__dict__.update(engine.__dict__, model=slow)
    return slowed


def requests():
    prompts = [[3, 5, 7], [11, 2], [4, 4, 4, 4, 9, 1], [8], [13, 21, 34, 55], [6, 6], [1, 2, 3, 4, 5, 6, 7]]
    return [GenerationRequest(p, max_new_tokens=n, end_id=-1) for p, n in zip(prompts, [5, 17, 3, 11, 8, 2, 13], strict=True)]


class Collector:
    def __init__(self, expected: int):
        self.expected, self.done = expected, threading.Event()
        self.deliveries: dict[str, list] = {}
        self.final: dict[str, Sequence] = {}

    def emit(self, job, tokens, log_probs, final, error=None):
        assert error is None, error
        self.deliveries.setdefault(job.request_id, []).append((list(tokens), final))
        if final:
            self.final[job.request_id] = job.sequence
            if len(self.final) == self.expected:
                self.done.set()


def run(engine, jobs_kwargs, collector, stats=None, drafter=None):
    scheduler = InflightScheduler(lambda: engine, None if stats is None else stats.append, drafter)
    try:
        for kwargs in jobs_kwargs:
            scheduler.submit(Job(emit=collector.emit, **kwargs))
        assert collector.done.wait(60), "the scheduler did not finish every request"
    finally:
        scheduler.close()
    return scheduler


def test_joining_and_leaving_keeps_greedy_tokens_identical_to_static_batching(engine):
    static = engine.generate_static(requests())
    collector = Collector(len(static))
    stats = []
    run(engine, [{"sequence": Sequence(r), "request_id": str(i)} for i, r in enumerate(requests())], collector, stats)
    assert [collector.final[str(i)].tokens for i in range(len(static))] == [s.tokens for s in static]
    assert max(s["active"] for s in stats) == SLOTS  # more requests than slots: they had to join later
    assert stats[-1]["active"] == 0


def test_streaming_delivers_one_token_at_a_time_and_flags_the_last(engine):
    collector = Collector(1)
    run(engine, [{"sequence": Sequence(GenerationRequest([3, 5], 6, -1)), "request_id": "s", "streaming": True}], collector)
    deliveries = collector.deliveries["s"]
    assert [len(tokens) for tokens, _ in deliveries] == [1] * 6
    assert [final for _, final in deliveries] == [False] * 5 + [True]


def test_non_streaming_delivers_everything_once(engine):
    collector = Collector(1)
    run(engine, [{"sequence": Sequence(GenerationRequest([3, 5], 6, -1)), "request_id": "n"}], collector)
    assert [(len(tokens), final) for tokens, final in collector.deliveries["n"]] == [(6, True)]


def test_stop_signal_ends_only_its_request(slow_engine, engine):
    collector = Collector(2)
    scheduler = InflightScheduler(lambda: slow_engine)
    try:
        scheduler.submit(Job(Sequence(GenerationRequest([3, 5], 60, -1)), "victim", collector.emit, streaming=True))
        scheduler.submit(Job(Sequence(GenerationRequest([11, 2], 17, -1)), "other", collector.emit))
        while len(collector.deliveries.get("victim", [])) < 3:
            time.sleep(0.01)
        assert scheduler.request_stop("victim") and not scheduler.request_stop("nobody")
        assert collector.done.wait(60)
    finally:
        scheduler.close()
    assert collector.final["victim"].finish_reason == "cancelled" and len(collector.final["victim"].tokens) < 60
    assert collector.final["other"].tokens == engine.generate_static([requests()[1]])[0].tokens


def test_a_stop_that_arrives_during_the_context_phase_is_not_lost(engine):
    """The request has left the queue but has not joined the batch yet (a slow prefill on a busy CPU)."""
    in_prefill, release = threading.Event(), threading.Event()
    model = engine.model

    def gated(**kwargs):
        if kwargs["input_ids"].shape[1] > 1:  # the context phase: hold it until the stop was sent
            in_prefill.set()
            assert release.wait(30)
        return model(**kwargs)

    gated_engine = ReferenceEngine.__new__(ReferenceEngine)
    gated_engine.__dict__.update(engine.__dict__, model=gated)
    collector = Collector(1)
    scheduler = InflightScheduler(lambda: gated_engine)
    try:
        scheduler.submit(Job(Sequence(GenerationRequest([3, 5], 60, -1)), "victim", collector.emit, streaming=True))
        assert in_prefill.wait(30)
        assert scheduler.request_stop("victim"), "the stop did not find a request in its context phase"
        release.set()
        assert collector.done.wait(60)
    finally:
        release.set()
        scheduler.close()
    assert collector.final["victim"].finish_reason == "cancelled" and len(collector.final["victim"].tokens) < 60


def test_a_cancelled_client_frees_its_slot(slow_engine):
    gone = threading.Event()
    collector, stats = Collector(2), []
    scheduler = InflightScheduler(lambda: slow_engine, stats.append)
    try:
        job = Job(Sequence(GenerationRequest([1], 60, -1)), "gone", collector.emit, streaming=True, is_cancelled=gone.is_set)
        scheduler.submit(job)
        scheduler.submit(Job(Sequence(GenerationRequest([2], 40, -1)), "stays", collector.emit))
        while len(collector.deliveries.get("gone", [])) < 3:
            time.sleep(0.005)
        gone.set()
        assert collector.done.wait(60)
    finally:
        scheduler.close()
    assert collector.final["gone"].finish_reason == "cancelled"
    assert len(collector.final["stays"].tokens) == 40 and stats[-1]["active"] == 0


def test_leaving_rows_trims_columns_that_are_padding_everywhere():
    class Layer:
        def __init__(self, keys):
            self.keys, self.values = keys, keys.clone()

    batch = _Batch()
    keys = torch.arange(2 * 1 * 5 * 1, dtype=torch.float32).reshape(2, 1, 5, 1)
    batch.jobs = ["old", "young"]
    batch.cache = type("Cache", (), {"layers": [Layer(keys)]})()
    batch.mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    batch.positions = torch.tensor([5, 2])
    batch.keep([1])
    assert batch.jobs == ["young"] and batch.mask.tolist() == [[1, 1]] and batch.positions.tolist() == [2]
    assert batch.cache.layers[0].keys.flatten().tolist() == keys[1, 0, 3:, 0].tolist()
