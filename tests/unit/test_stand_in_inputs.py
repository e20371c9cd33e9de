"""The reference tensorrt_llm model's input check (stand_ins/triton_models/tensorrt_llm/inputs.py): a request's
lookahead decoding config is read and refused as TensorRT-LLM's C++ backend does where the model instance sets no
lookahead parameters; inputs it does not honour are refused by name."""

import numpy as np
import pytest

from inputs import NO_EXECUTOR_LOOKAHEAD, check  # noqa: E402  (model dirs on sys.path: conftest)
from served_contract import RequestError  # noqa: E402

ONE = np.array([[4]], dtype=np.int32)


def test_a_lookahead_config_is_refused_in_tensorrt_llms_words_where_the_instance_sets_none():
    config = {"lookahead_window_size": ONE, "lookahead_ngram_size": ONE, "lookahead_verification_set_size": ONE}
    with pytest.raises(RequestError, match=rf"^\[TensorRT-LLM\]\[ERROR\] Assertion failed: {NO_EXECUTOR_LOOKAHEAD}$"):
        check(config)
    with pytest.raises(RequestError, match="^Failed to extract lookahead_ngram_size$"):
        check({"lookahead_window_size": ONE})  # utils.cc extracts all three before its check
    check({"lookahead_ngram_size": ONE})  # read only where the window size is sent: ignored alone


def test_an_input_the_stand_in_does_not_honour_is_refused_by_name():
    with pytest.raises(RequestError, match="input 'mrope_position_deltas' is not supported by the reference backend"):
        check({"mrope_position_deltas": np.zeros((1, 1), dtype=np.int32)})
    check({"draft_logits": np.zeros((1, 2, 3), dtype=np.float32)})  # honoured: acceptance by probability
    check({"return_num_input_tokens": np.array([[True]])})  # honoured: the token counts come with each response
