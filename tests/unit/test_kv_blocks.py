"""KV-cache block reuse in the reference stand-ins: blocks keyed by their prefix and, for prompt-table ids, by their
prompt_table_extra_ids (two images with the same fake ids share no block unless they share an extra id); the counts the
tensorrt_llm model sends with return_perf_metrics or (before v0.19.0) return_kv_cache_reuse_stats; the harness's
reading of the block size and of whether a deployment reuses blocks; the prompt the property check sends."""

import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from generation import GenerationRequest, Sequence  # noqa: E402  (model dirs on sys.path: conftest)
from outputs import perf_metrics  # noqa: E402
from prefix_cache import KvStats, PrefixCache, keyed  # noqa: E402

from pytest_triton_llm.properties.kv_blocks import NAMES, fresh_prompt  # noqa: E402
from pytest_triton_llm.stack.kv_reuse import _find  # noqa: E402

VOCAB, BLOCK = 100, 4


class FakeLayer:
    def __init__(self, tokens: int):
        self.keys = torch.arange(tokens, dtype=torch.float32).reshape(1, 1, tokens, 1)
        self.values = -self.keys


class FakeCache:
    def __init__(self, tokens: int):
        self.layers = [FakeLayer(tokens)]


def cache_with(prompt: list, salt: str = "") -> PrefixCache:
    cache = PrefixCache(BLOCK, max_blocks=64, enabled=True)
    cache.keep(prompt, salt, FakeCache(len(prompt)), 0)
    return cache


def test_a_repeated_prompt_finds_its_whole_blocks_but_the_one_holding_its_last_token():
    prompt = list(range(2 * BLOCK + 1))
    blocks, stats = cache_with(prompt).lookup(prompt, "")
    assert (len(blocks), stats.reused, stats.missed, stats.total) == (2, 2, 1, 3)
    _, stats = cache_with(prompt).lookup(list(range(2 * BLOCK)), "")  # the last token always computed: 1 block
    assert stats.reused == 1


def test_a_block_matches_only_under_the_same_prefix_and_adapter():
    prompt = list(range(3 * BLOCK + 1))
    cache = cache_with(prompt)
    assert cache.lookup([99, *prompt[1:]], "")[1].reused == 0  # the first block differs: no later one matches
    assert cache.lookup(prompt, "lora 7")[1].reused == 0


def test_prompt_table_ids_are_keyed_by_their_extra_id():
    table_ids = [VOCAB + k for k in range(2 * BLOCK)]
    first = GenerationRequest([*table_ids, 5], 4, 0, prompt_table_extra_ids=[1] * (2 * BLOCK) + [0])
    cache = cache_with(keyed(first, VOCAB))
    same_image = GenerationRequest([*table_ids, 5], 4, 0, prompt_table_extra_ids=[1] * (2 * BLOCK) + [0])
    other_image = GenerationRequest([*table_ids, 5], 4, 0, prompt_table_extra_ids=[2] * (2 * BLOCK) + [0])
    assert cache.lookup(keyed(same_image, VOCAB), "")[1].reused == 2
    assert cache.lookup(keyed(other_image, VOCAB), "")[1].reused == 0
    assert keyed(GenerationRequest([1, 2], 4, 0), VOCAB) == [1, 2]  # no extra ids: the tokens alone


@pytest.mark.parametrize("perf, reuse_stats, names", [(True, False, 10), (False, True, 3), (False, False, 0)])
def test_the_block_counts_come_with_perf_metrics_or_alone_with_reuse_stats(perf, reuse_stats, names):
    request = GenerationRequest(list(range(129)), 4, 0, return_perf_metrics=perf, return_kv_cache_reuse_stats=reuse_stats)
    seq = Sequence(request, tokens=[1, 2, 3, 4], kv=KvStats(reused=2))
    outputs = perf_metrics(seq)
    assert len(outputs) == names
    if names:
        counts = [int(outputs[n][0, 0]) for n in NAMES]
        assert counts == [1, 2, 3]  # 133 tokens in blocks of 64: 3, of which 2 reused


def test_an_engines_block_size_is_found_under_its_plugin_config():
    assert _find({"build_config": {"plugin_config": {"tokens_per_block": 32}}}, "tokens_per_block") == 32
    assert _find({"build_config": {"max_batch_size": 8}}, "tokens_per_block") is None


class CharTokenizer:
    """A token per character after a BOS token, as tokenizers that add one encode."""

    def encode(self, text: str) -> list[int]:
        return [0, *(ord(c) for c in text)]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids if i or not skip_special_tokens)


def test_the_fresh_prompt_has_the_asked_length_with_its_bos_and_is_new_each_time():
    first, second = (fresh_prompt(CharTokenizer(), 2 * 64 + 1) for _ in range(2))
    assert len(CharTokenizer().encode(first)) == 129 and first != second
    assert first[:8] != second[:8]  # the first block differs, so no block of one is cached for the other
