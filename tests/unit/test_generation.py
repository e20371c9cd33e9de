"""TensorRT-LLM request semantics of the reference model, on hand-made logits (no model loaded)."""

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")

from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence  # noqa: E402
from served_contract import RequestError, unpack_word_list  # noqa: E402
from words import to_word_list_format  # noqa: E402  (model dirs on sys.path: conftest)

from pytest_triton_llm.triton.tensor_contract import pack_word_ids  # noqa: E402

VOCAB = 10


def engine() -> ReferenceEngine:
    e = ReferenceEngine.__new__(ReferenceEngine)  # the decoding rules need no weights
    e.vocab_size = VOCAB
    e.build_config = {"max_input_len": 8, "max_output_len": 4, "max_seq_len": 12}
    return e


def logits_favouring(*order: int) -> torch.Tensor:
    """Logits whose argmax is order[0], then order[1], ..."""
    row = torch.zeros(VOCAB)
    for rank, token in enumerate(order):
        row[token] = 10.0 - rank
    return row.unsqueeze(0)


def step(seq: Sequence, *order: int) -> None:
    engine().select([seq], logits_favouring(*order))


def test_word_lists_round_trip_through_the_offsets_format():
    packed = pack_word_ids([[[5, 6], [7]], [[1]]])
    assert packed.shape == (2, 2, 3)
    assert packed[0].tolist() == [[5, 6, 7], [2, 3, -1]]
    assert unpack_word_list(packed[0]) == [[5, 6], [7]]
    assert unpack_word_list(packed[1]) == [[1]]
    assert unpack_word_list(np.empty((2, 0), dtype=np.int32)) == []


def test_words_are_tokenized_per_row_and_empty_ones_dropped():
    encode = {b"ab": [1, 2], b"c": [3], b"": []}.__getitem__
    out = to_word_list_format(np.array([[b"ab", b""], [b"c", b"c"]], dtype=object), 2, encode)
    assert [unpack_word_list(row) for row in out] == [[[1, 2]], [[3], [3]]]
    assert to_word_list_format(None, 3, encode).shape == (3, 2, 0)


def test_malformed_word_list_is_a_request_error():
    with pytest.raises(RequestError, match="offsets"):
        unpack_word_list(np.array([[1, 2], [5, -1]]))


def test_greedy_end_id_is_not_returned():
    seq = Sequence(GenerationRequest([1], max_new_tokens=4, end_id=9))
    step(seq, 4)
    step(seq, 9)
    assert seq.tokens == [4] and seq.finish_reason == "end_id"


def test_stop_word_is_returned_and_ends_generation():
    seq = Sequence(GenerationRequest([1], max_new_tokens=8, end_id=9, stop_words=[[3, 4]]))
    for token in (3, 5, 3, 4):
        step(seq, token)
    assert seq.tokens == [3, 5, 3, 4] and seq.finish_reason == "stop_words"


def test_bad_word_is_never_completed():
    seq = Sequence(GenerationRequest([2], max_new_tokens=3, end_id=9, bad_words=[[2, 6], [7]]))
    step(seq, 6, 7, 5)  # 6 would complete [2, 6] after the prompt's 2; 7 is banned outright
    assert seq.tokens == [5]


def test_min_length_holds_off_end_id():
    seq = Sequence(GenerationRequest([1], max_new_tokens=5, end_id=9, sampling=Sampling(min_length=2)))
    while not seq.finished:
        step(seq, 9, 4)  # end_id is the favourite at every step
    assert seq.tokens == [4, 4] and seq.finish_reason == "end_id"


def test_max_new_tokens_ends_generation():
    seq = Sequence(GenerationRequest([1], max_new_tokens=3, end_id=9))
    while not seq.finished:
        step(seq, 4)
    assert seq.tokens == [4, 4, 4] and seq.finish_reason == "length"


def test_log_probs_are_those_of_the_chosen_tokens():
    seq = Sequence(GenerationRequest([1], max_new_tokens=2, end_id=-1))
    row = logits_favouring(3)
    engine().select([seq], row)
    assert seq.log_probs[0] == pytest.approx(float(torch.log_softmax(row[0], -1)[3]))


def test_seeded_sampling_repeats_per_seed():
    def draw(seed):
        seq = Sequence(GenerationRequest([1], max_new_tokens=20, end_id=-1, sampling=Sampling(top_k=0, top_p=1.0, seed=seed)))
        e = engine()
        while not seq.finished:
            e.select([seq], torch.zeros(1, VOCAB))  # uniform: only the seed decides
        return seq.tokens

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_top_k_one_is_greedy():
    seq = Sequence(GenerationRequest([1], max_new_tokens=1, end_id=-1, sampling=Sampling(top_k=1, temperature=5.0)))
    step(seq, 6)
    assert seq.tokens == [6]


@pytest.mark.parametrize(
    "request_, message",
    [
        (GenerationRequest([], 2, 9), r"Assertion failed: !mInputTokenIds\.empty\(\)"),
        (
            GenerationRequest([1] * 9, 2, 9),
            r"^Encountered an error when fetching new request: Prompt length \(9\) exceeds "
            r"maximum input length \(8\)\. Set log level to info",
        ),
        (GenerationRequest([1], 0, 9), r"^\[TensorRT-LLM\]\[ERROR\] Assertion failed: mMaxNewTokens > 0$"),
        (GenerationRequest([1, 99], 2, 9), "outside the vocabulary"),
        (GenerationRequest([1], 2, 9, sampling=Sampling(top_p=2.0)), r"Assertion failed: topP\.value\(\) <= 1\.f$"),
        (GenerationRequest([1], 2, 9, sampling=Sampling(temperature=-1.0)), r"Assertion failed: temperature\.value\(\) >= 0\.f$"),
    ],
)
def test_invalid_requests_are_refused_with_tensorrt_llm_s_words(request_, message):
    with pytest.raises(RequestError, match=message):
        engine().validate(request_)


def test_a_prompt_plus_output_over_max_seq_len_is_cut_to_fit_as_tensorrt_llm_does():
    request = GenerationRequest([1] * 8, 5, 9)  # max_seq_len 12
    engine().validate(request)
    assert request.max_new_tokens == 4


def test_top_p_at_or_below_zero_means_no_top_p_as_the_backend_drops_it():
    assert Sampling(top_p=0.0).greedy and Sampling(top_p=-0.5).greedy and not Sampling(top_p=0.9).greedy
    engine().validate(GenerationRequest([1], 2, 9, sampling=Sampling(top_p=-0.5)))


def tiny_engine(tmp_path) -> ReferenceEngine:
    """A two-layer Llama of random weights (vocabulary 97, hidden size 64), served by the reference engine."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    build = {"max_batch_size": 4, "max_input_len": 64, "max_output_len": 64, "max_seq_len": 128}
    build["max_prompt_embedding_table_size"] = 8  # 2 rows a request
    (tmp_path / "engine.json").write_text(json.dumps({"dtype": "float32", "build_config": build}))
    return ReferenceEngine(tmp_path)


def test_a_context_phase_run_request_by_request_gives_the_padded_batchs_tokens_on_a_cpu(tmp_path, monkeypatch):
    """On a GPU the stand-in prefills each request alone (engines.cuda.lock says why); the KV caches it pads and joins
    must decode exactly what the padded batch decodes where float32 is exact: on a CPU."""
    engine_ = tiny_engine(tmp_path)

    def requests():
        return [GenerationRequest(ids, 12, end_id=-1) for ids in ([5, 6, 7, 8], [9, 3], [1, 2, 3, 4, 5, 6, 7])]

    padded = [s.tokens for s in engine_.generate_static(requests())]
    monkeypatch.setattr(ReferenceEngine, "prefill_alone", property(lambda self: True))
    alone = [s.tokens for s in engine_.generate_static(requests())]
    assert alone == padded == [engine_.generate_static([r])[0].tokens for r in requests()]


def test_prompt_table_rows_stand_for_the_tokens_whose_embeddings_they_are_in_every_context_phase(tmp_path, monkeypatch):
    """Prompt id vocab_size + i is row i of the request's table (TensorRT-LLM's prompt tuning): rows that are the model's
    own embeddings of tokens answer as those tokens do, alone, in a padded batch and prefilled request by request."""
    engine_ = tiny_engine(tmp_path)
    embed = engine_.model.get_input_embeddings().weight.detach()
    virtual = [97, 98]  # rows 0 and 1

    def pairs():
        plain = [GenerationRequest(ids, 10, end_id=-1) for ids in ([5, 6, 7, 8], [9, 3, 7, 8], [1, 2])]
        tabled = [GenerationRequest([*virtual, 7, 8], 10, end_id=-1, prompt_table=embed[ids]) for ids in ([5, 6], [9, 3])]
        return plain, tabled

    plain, tabled = pairs()
    expected = [s.tokens for s in engine_.generate_static(plain)][:2]
    assert expected[0] != expected[1]  # the two tables must answer differently for the check to mean anything
    assert [s.tokens for s in engine_.generate_static([*tabled, plain[2]])][:2] == expected
    monkeypatch.setattr(ReferenceEngine, "prefill_alone", property(lambda self: True))
    assert [s.tokens for s in engine_.generate_static(pairs()[1])] == expected
    penalty = Sampling(repetition_penalty=1.5)  # penalties skip prompt-table ids: one indexed past the logits failed
    penalized = GenerationRequest([*virtual, 7], 4, end_id=-1, sampling=penalty, prompt_table=embed[[5, 6]])
    assert len(engine_.generate_static([penalized])[0].tokens) == 4


@pytest.mark.parametrize(
    "table, ids, message",
    [
        ((64,), [1], r"^\[TensorRT-LLM\]\[ERROR\] Assertion failed: Expected prompt embedding table to have shape "),
        ((2, 32), [97], "prompt_embedding_table rows have 32 values; the engine's hidden size is 64"),
        ((2, 64), [99], r"input_ids contain 99, outside the vocabulary \[0, 97\) and the prompt table's 2 rows"),
        (
            (3, 64),
            [97],
            r"^Encountered an error in forward function: Prompt vocab size3 is larger than max prompt vocab size of 2\. "
            r"Max prompt vocab size is computed from max_prompt_embedding_table_size / max_batch_size\. $",
        ),
    ],
)
def test_a_prompt_table_of_the_wrong_shape_or_an_id_past_it_is_refused(tmp_path, table, ids, message):
    with pytest.raises(RequestError, match=message):
        tiny_engine(tmp_path).validate(GenerationRequest(ids, 2, 9, prompt_table=torch.zeros(table)))


def test_top_p_decays_after_each_sampled_token_down_to_its_floor():
    # token 0 holds 0.6 of the mass, 1..9 share the rest: top_p 0.95 samples widely, 0.95 * 0.5 ** k < 0.6 keeps 0 only
    row = torch.full((1, VOCAB), 0.0)
    row[0, 0] = float(np.log(0.6 * (VOCAB - 1) / 0.4))

    def draw(decay: float, floor: float, top_k: int = 0) -> list[int]:
        sampling = Sampling(top_k=top_k, top_p=0.95, seed=11, top_p_decay=decay, top_p_min=floor)
        seq = Sequence(GenerationRequest([1], max_new_tokens=12, end_id=-1, sampling=sampling))
        while not seq.finished:
            engine().select([seq], row)
        return seq.tokens

    undecayed, decayed = draw(1.0, 1e-6), draw(0.5, 1e-6)
    assert decayed[0] == undecayed[0] and decayed[1:] == [0] * 11 != undecayed[1:]
    assert draw(0.5, 0.95) == undecayed  # the floor keeps top_p where it started
    assert draw(0.5, 1e-6, top_k=50) == draw(1.0, 1e-6, top_k=50)  # TensorRT-LLM decays in its top-p layer only


def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_likeliest():
    # token 0 holds 0.4 of the mass, token 1 0.3 (0.75 of 0's), 2..9 share the rest (0.0375 each)
    probs = torch.tensor([0.4, 0.3] + [0.3 / (VOCAB - 2)] * (VOCAB - 2))
    row = probs.log().unsqueeze(0)

    def draw(min_p: float) -> set[int]:
        drawn = set()
        for seed in range(40):
            seq = Sequence(GenerationRequest([1], 1, -1, sampling=Sampling(top_k=VOCAB, seed=seed, min_p=min_p)))
            engine().select([seq], row)
            drawn |= set(seq.tokens)
        return drawn

    assert draw(1.0) == {0} and draw(0.7) == {0, 1}
    assert len(draw(0.0)) > 2  # off: the tail is sampled too


@pytest.mark.parametrize(
    ("sampling", "check"),
    [
        (Sampling(top_p_decay=0.0), "topPDecay.value() > 0.f"),
        (Sampling(top_p_decay=1.5), "topPDecay.value() <= 1.f"),
        (Sampling(top_p_min=-0.1), "topPMin.value() >= 0.f"),
        (Sampling(top_p_reset_id=-1), "topPResetIds.value() >= 0"),
    ],
)
def test_top_p_decay_settings_out_of_range_fail_as_tensorrt_llms_checks_do(sampling, check):
    with pytest.raises(Exception, match=re.escape(check)):
        engine().validate(GenerationRequest([1], 2, 9, sampling=sampling))


def test_each_further_sequence_is_a_child_request_whose_seed_is_raised_by_its_index():
    request = GenerationRequest([1, 2], 4, 9, sampling=Sampling(top_k=0, top_p=0.9, seed=5), num_return_sequences=3)
    children = request.children()
    assert children[0] is request  # the parent keeps its seed (LlmRequest::createChildRequest)
    assert [c.sampling.seed for c in children] == [5, 6, 7]
    assert {(tuple(c.input_ids), c.max_new_tokens, c.sampling.top_p) for c in children} == {((1, 2), 4, 0.9)}
    alone = GenerationRequest([1], 2, 9)
    assert alone.children() == [alone]


def test_num_return_sequences_below_one_fails_as_tensorrt_llms_check_does():
    with pytest.raises(Exception, match=re.escape("numReturnSequences.value() > 0")):
        engine().validate(GenerationRequest([1], 2, 9, num_return_sequences=0))
