"""Every input of the tensorrt_llm model sets (template families trtllm-0.9 .. trtllm-1.1), and what the reference
model does with it: honoured (model.py reads it), accepted because TensorRT-LLM itself ignores it where the stand-in
serves (beam-search settings at beam width 1, decoder inputs of a decoder-only model), or refused with an error that
names it unless it carries its neutral value; lookahead decoding's are refused as TensorRT-LLM refuses them where
the model instance sets no lookahead parameters. An input in none of these lists is refused too: nothing is ignored
silently. docs/architecture.md, "Fidelity to upstream", lists the refused ones.
"""

from __future__ import annotations

from errors import assertion
from served_contract import RequestError
from tensor_contract import RENAMED

HONOURED = frozenset(
    {
        "draft_logits",
        "draft_acceptance_threshold",
        "input_ids",
        "input_lengths",
        "request_output_len",
        "end_id",
        "pad_id",
        "stop_words_list",
        "bad_words_list",
        "embedding_bias",
        "temperature",
        "runtime_top_k",
        "runtime_top_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "min_length",
        "random_seed",
        *RENAMED.values(),
        "return_log_probs",
        "return_perf_metrics",
        "exclude_input_in_output",
        "streaming",
        "stop",
        "lora_task_id",
        "lora_weights",
        "lora_config",
        "beam_width",
        "num_return_sequences",
        "return_context_logits",
        "return_generation_logits",
        "runtime_top_p_decay",  # top-p decay, as TensorRT-LLM's top-p layer (generation.py _sample)
        "runtime_top_p_min",
        "runtime_top_p_reset_ids",
        "prompt_embedding_table",  # rows for prompt ids >= vocab_size (generation.py context_inputs)
        "prompt_table_extra_ids",  # keys of a prompt-table token's KV-cache block (prefix_cache.keyed)
        "return_kv_cache_reuse_stats",  # the KV-cache block counts (outputs.perf_metrics); deprecated from v0.19.0
        "guided_decoding_guide_type",  # guided decoding with xgrammar (guided.py), where guided_decoding_backend is set
        "guided_decoding_guide",
        "draft_input_ids",  # external draft tokens, verified against the target's own tokens (generation.py)
        "return_num_input_tokens",  # token counts with each response (outputs.token_counts)
        "return_num_output_tokens",
        # KV-cache retention: the priority of the prompt's blocks (retention.py, prefix_cache.py); the decode phase's
        # blocks are not kept, so its priority and duration apply to nothing here
        "retention_token_range_starts",
        "retention_token_range_ends",
        "retention_token_range_priorities",
        "retention_token_range_durations_ms",
        "retention_decode_priority",
        "retention_decode_duration_ms",
    }
)
# TensorRT-LLM ignores these here: beam-search settings at beam width 1; decoder inputs of a decoder-only model
# (the ensemble always sends preprocessing's DECODER_INPUT_ID); prompt_vocab_size, which its executor does not read
# (the table's rows count)
IGNORED_AS_TENSORRT_LLM = frozenset(
    {
        "len_penalty",
        "early_stopping",
        "beam_search_diversity_rate",
        "decoder_input_ids",
        "decoder_input_lengths",
        "prompt_vocab_size",
    }
)
# input -> the neutral value a client may send (None: any value is refused)
REFUSED = {
    "encoder_input_features": None,
    "encoder_output_lengths": None,
    "cross_attention_mask": None,
    "skip_cross_attn_blocks": None,
    "mrope_rotary_cos_sin": None,
    "mrope_position_deltas": None,
    "context_phase_params": None,
}
WHY_REFUSED = "the reference backend serves decoder-only models: it has no encoders, mrope or disaggregated serving"
# a request's lookahead decoding config, read as the C++ backend's utils.cc getLookaheadDecodingFromTensors reads it:
# only where the window size is sent, all three then; no deployment the harness renders sets the model instance's
# lookahead parameters (decoding_mode lookahead), so a request's is refused in TLLM_CHECK's words
LOOKAHEAD = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
NO_EXECUTOR_LOOKAHEAD = (
    "Cannot set the request lookahead decoding configuration when model instance lookahead parameters are not set."
)


def check(tensors: dict) -> None:
    """RequestError naming the first input the stand-in does not honour; `tensors` maps name -> numpy array."""
    if LOOKAHEAD[0] in tensors:
        for name in LOOKAHEAD:
            if name not in tensors or not tensors[name].size:
                raise RequestError(f"Failed to extract {name}")
        raise assertion(NO_EXECUTOR_LOOKAHEAD)
    for name, value in tensors.items():
        if name in HONOURED or name in IGNORED_AS_TENSORRT_LLM or name in LOOKAHEAD:
            continue
        if name in REFUSED:
            neutral = REFUSED[name]
            if neutral is not None and value.size and all(v == neutral for v in value.reshape(-1).tolist()):
                continue
            raise RequestError(f"input {name!r} is not supported by the reference backend ({WHY_REFUSED})")
        raise RequestError(f"input {name!r} is not supported by the reference backend")
