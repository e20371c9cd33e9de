"""KV-cache retention in the reference tensorrt_llm stand-in: the retention_token_range_* inputs read and checked as
tensorrtllm_backend's utils.cc and TensorRT-LLM's KvCacheRetentionConfig do (their error texts), a priority per block
as getPerBlockRetentionPriorityDuration gives it (upstream's own unit-test cases), and the prefix cache evicting the
least recently used block of the lowest priority, a block whose duration ended at the default priority again."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from generation import GenerationRequest, Sequence  # noqa: E402  (model dirs on sys.path: conftest)
from inflight import Job  # noqa: E402
from prefix_cache import PrefixCache, PrefixCachingScheduler  # noqa: E402
from retention import Retention, TokenRange, read  # noqa: E402
from served_contract import RequestError  # noqa: E402

from pytest_triton_llm.properties.kv_retention import probes  # noqa: E402
from tests.unit.test_inflight import Collector, tiny_engine  # noqa: E402

BLOCK = 4


def tensors(**values) -> dict:
    return {f"retention_{name}": np.array([value], dtype=np.int32) for name, value in values.items()}


def priorities(ranges, block: int, length: int) -> list:
    return [p for p, _ in Retention(tuple(TokenRange(*r) for r in ranges)).per_block(block, length)]


def test_a_block_takes_the_range_its_first_token_is_in():  # KvCacheRetentionConfigTest.BlockConfigTest's cases
    assert priorities([(0, 64, 80, None), (64, 128, 50, None)], 64, 256) == [80, 50, None, None]
    assert priorities([(0, 63, 80, None), (63, 127, 30, None)], 32, 127) == [80, 80, 30, 30]
    assert priorities([(0, 1, 80, None), (1, 2, 5, None)], 32, 128) == [80, None, None, None]
    assert priorities([(40, None, 80, None)], 32, 128) == [None, None, 80, 80]  # block 32 starts before 40


def test_blocks_past_the_context_phase_take_the_decode_retention():
    """A prompt of 6 tokens allocates 2 blocks of 4 in its context phase (the second holds its first answer tokens
    too); the blocks after them come from the decode phase (WindowBlockManager::allocateBlock)."""
    config = Retention((TokenRange(0, None, 90, None),), decode_priority=5, decode_duration_ms=7)
    assert config.per_block(4, 16, context=6) == [(90, None), (90, None), (5, 7), (5, 7)]
    assert config.per_block(4, 16) == [(90, None)] * 4  # a prompt's own blocks, looked up or kept at its context phase


def test_the_inputs_are_read_as_the_backend_reads_them():
    config = read(tensors(token_range_starts=[0, 8], token_range_ends=[8, -1], token_range_priorities=[90, 10]), 0)
    assert config.ranges == (TokenRange(0, 8, 90, None), TokenRange(8, None, 10, None))
    assert (config.decode_priority, config.decode_duration_ms) == (35, None)
    timed = read(
        tensors(
            token_range_starts=[0],
            token_range_ends=[-1],
            token_range_priorities=[90],
            token_range_durations_ms=[-1],
            decode_priority=[60],
            decode_duration_ms=[5],
        ),
        0,
    )
    assert timed.ranges == (TokenRange(0, None, 90, None),) and (timed.decode_priority, timed.decode_duration_ms) == (60, 5)
    assert read(tensors(decode_priority=[60]), 0) is None  # without range starts nothing is read


def ranges(starts, ends=None, priorities=None, durations=None) -> dict:
    named = {"token_range_starts": starts, "token_range_ends": ends}
    named |= {"token_range_priorities": priorities, "token_range_durations_ms": durations}
    return {name: value for name, value in named.items() if value is not None}


@pytest.mark.parametrize(
    "values, message",
    [
        (ranges([0, 8]), "retention_token_range_ends must be provided"),
        (ranges([0], [-1]), "retention_token_range_priorities must be provided"),
        (ranges([0], [-1], [1], [1, 2]), "retention_token_range_durations_ms must have the same length"),
        (ranges([0], [-1], [101]), "Invalid priority value"),
        (ranges([0, 8], [-1, 9], [1, 1]), "Invalid use of end indicator."),
        (ranges([0, 4], [8, 9], [1, 1]), "Token ranges must be non-overlapping."),
        (ranges([4], [4], [1]), "Range must have a positive, non-zero length."),
    ],
)
def test_a_bad_config_is_refused_in_upstreams_words(values, message):
    with pytest.raises(RequestError, match=message):
        read(tensors(**values), 0)


class FakeLayer:
    def __init__(self, tokens: int):
        self.keys = torch.zeros(1, 1, tokens, 1)
        self.values = torch.zeros(1, 1, tokens, 1)


class FakeCache:
    def __init__(self, tokens: int):
        self.layers = [FakeLayer(tokens)]


def keep(cache: PrefixCache, prompt: list, ranges=()) -> int:
    """The prompt asked: the whole blocks it found, then its blocks kept with `ranges`."""
    retention = Retention(tuple(TokenRange(*r) for r in ranges)) if ranges else None
    found = cache.lookup(prompt, "", retention)[1].reused
    cache.keep(prompt, "", FakeCache(len(prompt)), found, retention)
    return found


@pytest.mark.parametrize("fault", [None, "kv_retention_ignored"])
def test_a_flood_leaves_exactly_the_blocks_kept_above_the_default(fault):
    """The property check's probes (properties/kv_retention.py) on a cache of 12 blocks, flooded by 12 fresh ones."""
    cache = PrefixCache(BLOCK, max_blocks=12, enabled=True, fault=lambda name: name == fault)
    prompts = [[100 * n + t for t in range(2 * BLOCK + 1)] for n in range(1, 6)]
    for prompt, (_, ranges, _) in zip(prompts, probes(BLOCK), strict=True):
        assert keep(cache, prompt, tuple((s, None if e == -1 else e, p, None if d == -1 else d) for s, e, p, d in ranges)) == 0
        time.sleep(0.002)  # the 1 ms duration ends
    for n in range(3):
        keep(cache, [1000 * (n + 1) + t for t in range(4 * BLOCK + 1)])
    kept = [0, 2, 0, 1, 0] if fault is None else [0] * 5  # the 1 ms one, the whole prompt, none, the first block, past
    assert [keep(cache, prompt) for prompt in prompts] == kept


def test_a_finished_request_keeps_its_answers_blocks_for_the_next_turn():
    """A prompt of 5 tokens answered with 8: its cache holds 12 tokens (the last answer token was never fed), 3 blocks
    of 4, kept when it ends. The next turn, prompt and answer sent back with one more token, finds all 3 and answers
    as a scheduler that had kept nothing: the kept decode-phase keys and values are the right ones."""
    engine = tiny_engine()
    prompt = [3, 5, 7, 11, 13]
    first = _served(engine, PrefixCache(BLOCK, max_blocks=64, enabled=True), [prompt])[0]
    turn = prompt + first.tokens[:7] + [17]
    cache = PrefixCache(BLOCK, max_blocks=64, enabled=True)
    warm = _served(engine, cache, [prompt, turn])[1]
    cold = _served(engine, PrefixCache(BLOCK, max_blocks=64, enabled=True), [turn])[0]
    assert (warm.kv.reused, cold.kv.reused) == (3, 0)
    assert warm.tokens == cold.tokens


def _served(engine, cache: PrefixCache, prompts: list) -> list:
    """The finished sequences of `prompts`, sent one after another to a prefix-caching scheduler over `cache`."""
    scheduler = PrefixCachingScheduler(lambda: engine, cache)
    try:
        done = []
        for n, prompt in enumerate(prompts):
            collector = Collector(1)
            request = GenerationRequest(prompt, max_new_tokens=8, end_id=-1)
            scheduler.submit(Job(Sequence(request), str(n), collector.emit))
            assert collector.done.wait(60), "the scheduler did not finish the request"
            done.append(collector.final[str(n)])
        return done
    finally:
        scheduler.close()


def test_kept_blocks_asked_again_at_the_default_priority_can_be_evicted():
    """How the retention checks let their blocks go (properties/kv_retention._let_go): a reused block takes the priority
    its request's range gives it, so blocks kept at 100 with no expiry, asked for again at 35, go with a flood."""
    cache = PrefixCache(BLOCK, max_blocks=4, enabled=True)
    prompt = list(range(2 * BLOCK + 1))
    keep(cache, prompt, ((0, None, 100, None),))
    for n in range(2):
        keep(cache, [1000 * (n + 1) + t for t in range(2 * BLOCK + 1)])
    assert keep(cache, prompt, ((0, None, 35, None),)) == 2  # still kept over the flood, now let go
    for n in range(2):
        keep(cache, [5000 * (n + 1) + t for t in range(2 * BLOCK + 1)])
    assert keep(cache, prompt) == 0
