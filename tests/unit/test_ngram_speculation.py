"""Prompt-lookup (NGram) speculative decoding in the in-flight scheduler: the drafter proposes what TensorRT-LLM's
NGramPoolManager proposes, and verifying its drafts in one forward per step changes no greedy token."""

import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
pytest.importorskip("transformers")

from generation import GenerationRequest, Sequence  # noqa: E402  (model dir on sys.path: conftest)
from ngram import NGramDrafter  # noqa: E402

from .test_inflight import Collector, run, tiny_engine  # noqa: E402


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


def test_the_draft_is_what_followed_the_longest_pattern_that_ends_the_sequence():
    drafter = NGramDrafter(max_draft_len=3, max_matching_ngram_size=2, is_public_pool=False)
    # "5 6" ended the sequence earlier, followed by 7 8 9: the 2-gram wins over the 1-gram "6" (also followed by 7 8 9)
    assert drafter.draft("a", [1, 5, 6, 7, 8, 9, 2, 5, 6], max_sequence_length=20) == [7, 8, 9]
    # no more room than 2 tokens: the draft is cut to what the request may still generate less its own next token
    assert drafter.draft("b", [1, 5, 6, 7, 8, 9, 2, 5, 6], max_sequence_length=12) == [7, 8]
    assert drafter.draft("c", [1, 2, 3], max_sequence_length=20) == []  # nothing seen before ends it


def test_oldest_or_newest_match_and_private_or_public_pools():
    prefix = [4, 1, 2, 4, 3, 3, 4]  # 4 was followed by "1 2 4" and later by "3 3 4"
    assert NGramDrafter(3, 1).draft("x", prefix, 30) == [1, 2, 4]
    assert NGramDrafter(3, 1, is_use_oldest=False).draft("x", prefix, 30) == [3, 3, 4]
    public = NGramDrafter(3, 1)
    public.draft("x", prefix, 30)
    assert public.draft("y", [9, 4], 30) == [1, 2, 4]  # another request's pattern, from the one pool
    private = NGramDrafter(3, 1, is_public_pool=False)
    private.draft("x", prefix, 30)
    assert private.draft("y", [9, 4], 30) == []
    private.forget("x")
    assert private.pools == {"y": {(9,): [(4,)]}}


def _answers(engine, drafter, prompts, streaming=False):
    collector = Collector(len(prompts))
    jobs = [
        {"sequence": Sequence(GenerationRequest(p, max_new_tokens=24, end_id=-1)), "request_id": str(i), "streaming": streaming}
        for i, p in enumerate(prompts)
    ]
    run(engine, jobs, collector, drafter=drafter)
    return collector, [collector.final[str(i)] for i in range(len(prompts))]


PROMPTS = [[3, 5, 7, 3, 5, 7, 3, 5], [11, 2, 11, 2, 11], [4, 4, 4, 4, 9, 1], [8, 13, 21, 8, 13]]


@pytest.mark.parametrize("streaming", [False, True])
def test_greedy_tokens_with_ngram_drafts_equal_those_without(engine, streaming):
    plain = [s.tokens for s in _answers(engine, None, PROMPTS)[1]]
    drafter = NGramDrafter(max_draft_len=4, max_matching_ngram_size=2, is_public_pool=False)
    collector, drafted = _answers(engine, drafter, PROMPTS, streaming)
    assert [s.tokens for s in drafted] == plain
    assert sum(s.accepted for s in drafted) > 0  # the repeated prompts were copied: drafts were taken
    for s in drafted:
        assert 0 <= s.accepted <= s.drafted
    if streaming:  # a step that kept draft tokens delivers them together, and the pieces add up to the answer
        for i, s in enumerate(drafted):
            pieces = [tokens for tokens, _ in collector.deliveries[str(i)]]
            assert [t for piece in pieces for t in piece] == s.tokens
        assert max(len(tokens) for d in collector.deliveries.values() for tokens, _ in d) > 1


def test_a_speculative_config_the_stand_ins_cannot_draft_for_is_one_line_naming_the_one_they_can():
    from ngram import drafter_for

    assert drafter_for(None) is None
    assert drafter_for({"decoding_type": "NGram", "max_draft_len": 3}).max_draft_len == 3
    with pytest.raises(ValueError, match="'Eagle3': the reference stand-in drafts by prompt lookup only"):
        drafter_for({"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model_dir": "/m"})


def test_extra_llm_api_options_must_be_a_yaml_mapping(tmp_path):
    from pytest_triton_llm.cli.serve import _llm_api_options

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("speculative_config:\n  decoding_type: NGram\n")
    bad.write_text("- NGram\n")
    assert _llm_api_options(str(good)) == {"speculative_config": {"decoding_type": "NGram"}}
    with pytest.raises(SystemExit, match="expected a YAML mapping of LLM API arguments"):
        _llm_api_options(str(bad))
