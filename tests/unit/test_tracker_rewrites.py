"""The tracker catalog's /v1 rows (fixtures/tracker_openai_faults.toml): each has a rewrite in the fault proxy, and each
rewrite does to a request or answer what its row says, at the row's size."""

import math

from pytest_triton_llm.common.schema import load_toml
from pytest_triton_llm.openai import tracker_rewrites as tracker
from pytest_triton_llm.openai.fault_proxy import FAULTS_FILE, TRACKER_FILE

ROWS = load_toml(TRACKER_FILE)["faults"]


def _chunk(text=None, finish=None, index=0, usage=None):
    choice = {"index": index, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
    return {"choices": [choice], **({"usage": usage} if usage else {})}


def test_every_row_has_one_rewrite_and_no_name_of_the_written_catalog():
    rewrites = [
        tracker.REQUEST_FAULTS,
        tracker.UNARY_FAULTS,
        tracker.STREAM_FAULTS,
        tracker.NEVER_ANSWERS,
        tracker.ANSWERED_HERE,
        tracker.STREAM_ABORTED,
    ]
    assert {name: sum(name in r for r in rewrites) for name in ROWS if sum(name in r for r in rewrites) != 1} == {}
    assert set().union(*rewrites) == set(ROWS)
    assert set(ROWS).isdisjoint(load_toml(FAULTS_FILE)["faults"])


def test_an_omitted_limit_becomes_32_and_a_given_one_stays():
    cap = tracker.REQUEST_FAULTS["omitted_max_tokens_capped_at_32"]
    assert cap({"prompt": "x"})["max_tokens"] == 32
    assert cap({"prompt": "x", "max_tokens": 100})["max_tokens"] == 100
    assert "max_tokens" not in cap({"messages": [], "max_completion_tokens": 7})


def test_penalties_go_only_when_none_is_positive_and_one_is_negative():
    drop = tracker.REQUEST_FAULTS["negative_penalties_dropped"]
    assert drop({"presence_penalty": -0.5, "frequency_penalty": 0}) == {}
    assert drop({"presence_penalty": -0.5, "frequency_penalty": 0.1}) == {"presence_penalty": -0.5, "frequency_penalty": 0.1}


def test_image_parts_go_and_text_parts_stay():
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:"}}]
    request = tracker.REQUEST_FAULTS["chat_image_parts_silently_dropped"]({"messages": [{"role": "user", "content": parts}]})
    assert request["messages"][0]["content"] == [{"type": "text", "text": "what is this"}]


def test_logprobs_zero_goes_on_completions_only():
    drop = tracker.REQUEST_FAULTS["completion_logprobs_zero_ignored"]
    assert drop({"prompt": "x", "logprobs": 0}) == {"prompt": "x"}
    assert drop({"prompt": "x", "logprobs": 2}) == {"prompt": "x", "logprobs": 2}


def test_token_logprobs_fall_below_every_listed_alternative():
    answer = {"choices": [{"logprobs": {"token_logprobs": [-0.1], "top_logprobs": [{"a": -0.1, "b": -3.0}]}}]}
    rewritten = tracker.UNARY_FAULTS["token_logprobs_from_the_wrong_rank"]({}, answer)
    assert rewritten["choices"][0]["logprobs"]["token_logprobs"] == [-13.0]


def test_top_p_keeps_the_nucleus_renormalised():
    tops = [{"token": "Deep", "logprob": math.log(0.7)}, {"token": "A", "logprob": math.log(0.2)}]
    answer = {"choices": [{"logprobs": {"content": [{"token": "Deep", "logprob": math.log(0.7), "top_logprobs": tops}]}}]}
    position = tracker.UNARY_FAULTS["logprobs_renormalised_after_top_p"]({"top_p": 0.5}, answer)["choices"][0]["logprobs"][
        "content"
    ][0]
    assert [t["token"] for t in position["top_logprobs"]] == ["Deep"]
    assert abs(position["logprob"]) < 1e-9


def test_every_position_gets_the_first_positions_alternatives():
    content = [{"top_logprobs": [{"token": "a"}]}, {"top_logprobs": [{"token": "b"}]}]
    answer = tracker.UNARY_FAULTS["chat_top_logprobs_stuck_at_first_position"](
        {}, {"choices": [{"logprobs": {"content": content}}]}
    )
    assert [p["top_logprobs"][0]["token"] for p in answer["choices"][0]["logprobs"]["content"]] == ["a", "a"]


def test_n_choices_repeat_their_previous_delta_and_one_choice_is_left_alone():
    events = [_chunk("A", index=0), _chunk("x", index=1), _chunk("B", index=0), _chunk("C", index=0)]
    redecoded = tracker.STREAM_FAULTS["stream_n_choices_redecoded"]({"n": 2}, [dict(e) for e in events])
    assert [e["choices"][0]["delta"]["content"] for e in redecoded] == ["A", "x", "AB", "BC"]
    alone = tracker.STREAM_FAULTS["stream_n_choices_redecoded"]({}, [_chunk("A"), _chunk("B")])
    assert [e["choices"][0]["delta"]["content"] for e in alone] == ["A", "B"]


def test_usage_moves_onto_the_finish_chunk():
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    events = [_chunk("a"), _chunk("b", finish="stop"), {"choices": [], "usage": usage}]
    moved = tracker.STREAM_FAULTS["stream_usage_on_the_finish_chunk"]({}, events)
    assert len(moved) == 2 and moved[1]["usage"] == usage


def test_no_chunk_keeps_a_finish_reason_and_an_empty_finish_chunk_goes():
    events = [_chunk("a"), _chunk("", finish="length")]
    kept = tracker.STREAM_FAULTS["stream_finish_reason_never_sent"]({}, events)
    assert [c["finish_reason"] for e in kept for c in e["choices"]] == [None]


def test_null_finish_reasons_are_left_out_after_the_first_chunk():
    events = [_chunk(""), _chunk("a"), _chunk("", finish="stop")]
    out = tracker.STREAM_FAULTS["stream_chunks_omit_finish_reason"]({}, events)
    assert ["finish_reason" in e["choices"][0] for e in out] == [True, False, True]


def test_every_chunk_carries_the_usage_so_far():
    final = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    events = [_chunk("a"), _chunk("b", finish="stop"), {"choices": [], "usage": final}]
    out = tracker.STREAM_FAULTS["stream_usage_on_every_chunk"]({"stream_options": {"include_usage": True}}, events)
    assert [e["usage"]["completion_tokens"] for e in out] == [1, 2, 2]


def test_the_proxys_own_errors_answer_only_the_requests_their_rows_name():
    chat = tracker.ANSWERED_HERE["chat_answered_500_by_the_reasoning_parser"]
    assert chat("/v1/chat/completions", {})[0] == 500 and chat("/v1/completions", {}) is None
    logprobs = tracker.ANSWERED_HERE["completion_logprobs_answered_500"]
    assert logprobs("/v1/completions", {"logprobs": 1})[0] == 500
    assert logprobs("/v1/completions", {}) is None and logprobs("/v1/chat/completions", {"logprobs": True}) is None


def test_streams_are_cut_only_where_their_rows_say():
    long = tracker.STREAM_ABORTED["long_prompt_stream_aborted"]
    assert long("/v1/completions", {"stream": True}, 513) and not long("/v1/completions", {"stream": True}, 512)
    assert not long("/v1/completions", {}, 4000)
    assert tracker.prompt_tokens({"prompt": "x" * 2052}) == 513  # no tokenizer: about 4 characters a token
    plain = tracker.STREAM_ABORTED["completion_stream_without_logprobs_aborted"]
    assert plain("/v1/completions", {"stream": True}, 5)
    assert not plain("/v1/completions", {"stream": True, "logprobs": 1}, 5)
    assert not plain("/v1/chat/completions", {"stream": True}, 5)


def test_streamed_pieces_after_the_first_lose_their_first_half():
    events = [_chunk("The"), _chunk(" quick"), _chunk(" fox")]
    out = tracker.STREAM_FAULTS["chat_stream_pieces_lose_their_starts"]({}, events)
    assert [e["choices"][0]["delta"]["content"] for e in out] == ["The", "ick", "ox"]


def test_a_greedy_request_is_sampled_and_others_are_left_alone():
    sampled = tracker.REQUEST_FAULTS["greedy_answer_degrades_under_concurrency"]
    assert sampled({"temperature": 0})["temperature"] == 1.0
    assert sampled({"temperature": 0.7}) == {"temperature": 0.7}
