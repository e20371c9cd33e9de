"""`tensorrt_llm_bls`: the text pipeline in one python model, with the contract of upstream's tensorrt_llm_bls
(the entry model Triton's OpenAI frontend serves through): preprocessing -> tensorrt_llm -> postprocessing for
each request, called through Triton's BLS API. Written for this project; it runs on the stand-in and on real
TensorRT-LLM alike.

A decoupled BLS model sends each tensorrt_llm response as soon as it is detokenized (the request's `stream` is
passed on as tensorrt_llm's `streaming`), then an empty final response; with accumulate_tokens every response
holds the text so far. A BLS model that is not decoupled answers once per request.

Parameters: tensorrt_llm_model_name (default tensorrt_llm), accumulate_tokens (default false); stand_in_fault
(stand_in_faults.py).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils
from speculative import agreeing, speculate
from served_contract import PERF_METRICS, unpack_word_list
from stand_in_faults import Faults
from triton_io import flag, model_parameters

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# BLS input -> preprocessing input
TO_PREPROCESSING = {
    "text_input": "QUERY",
    "decoder_text_input": "DECODER_QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
    "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID",
}
# preprocessing output -> tensorrt_llm input
PREPROCESSED = {
    "INPUT_ID": "input_ids",
    "DECODER_INPUT_ID": "decoder_input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "BAD_WORDS_IDS": "bad_words_list",
    "STOP_WORDS_IDS": "stop_words_list",
    "EMBEDDING_BIAS": "embedding_bias",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids",
}
# multimodal_encoders output -> tensorrt_llm input
ENCODED = {"OUT_PROMPT_EMBEDDING_TABLE": "prompt_embedding_table", "OUT_PROMPT_VOCAB_SIZE": "prompt_vocab_size"}
GUIDE_INPUTS = ("guided_decoding_guide_type", "guided_decoding_guide")
RESEND_FOR_S = 600  # engine_death_kept_ready: how long a request whose tensorrt_llm call fails is sent again
# BLS input -> tensorrt_llm input, passed on as sent (sampling names of both eras, LoRA, output switches)
TO_TENSORRT_LLM = {
    "beam_width": "beam_width",
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "temperature": "temperature",
    "length_penalty": "len_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_length": "min_length",
    "min_tokens": "min_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "random_seed": "random_seed",
    "seed": "seed",
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "num_return_sequences": "num_return_sequences",
    "stream": "streaming",
    "exclude_input_in_output": "exclude_input_in_output",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "return_perf_metrics": "return_perf_metrics",
    "return_kv_cache_reuse_stats": "return_kv_cache_reuse_stats",
    "return_num_input_tokens": "return_num_input_tokens",
    "return_num_output_tokens": "return_num_output_tokens",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}
# inputs of models this BLS does not run (a draft model, a multimodal encoder): refused unless neutral
NOT_RUN = {"num_draft_tokens": 0, "use_draft_logits": False, "image_input": None}
# image inputs, passed to preprocessing (which processes bytes and URLs where its model type has a vision preprocessor)
IMAGES_TO_PREPROCESSING = {"image_bytes_input": "IMAGE_BYTES", "image_url_input": "IMAGE_URL", "video_bytes_input": "VIDEO_BYTES"}
# tensorrt_llm outputs answered as they come, next to text_output
PASSED_ON = ("cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index", "sequence_index")
# tensorrt_llm's token counts, asked for where the request asks (TensorRT-LLM 1.1's BLS, lib/triton_decoder.py)
TOKEN_COUNTS = {"return_num_input_tokens": "num_input_tokens", "return_num_output_tokens": "num_output_tokens"}


def _asked(core: dict, flag: str) -> bool:
    return flag in core and bool(core[flag].any())


class BlsError(ValueError):
    pass


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.llm = params.get("tensorrt_llm_model_name", "tensorrt_llm")
        self.draft_llm = params.get("tensorrt_llm_draft_model_name") or None  # speculative decoding's draft model
        self.encoders = params.get("multimodal_encoders_name") or None  # a multimodal deployment's image -> prompt table
        self.accumulate = flag(params.get("accumulate_tokens"), False)
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        # decoupled: each request streams from a thread of its own, so that one instance serves as many requests at
        # once as the engine has slots (upstream's synchronous BLS needs max_batch_size instances, one stub each)
        self.streams = ThreadPoolExecutor(max(1, int(config.get("max_batch_size", 1))), thread_name_prefix="bls")
        self.fault = fault = Faults(params, "tensorrt_llm_bls")
        # BLS inputs a known upstream bug leaves out of the tensorrt_llm request
        self.not_forwarded = (
            ("top_k", "top_p", "temperature")
            if fault("bls_ignores_sampling")
            else ("temperature",)
            if fault("bls_drops_temperature")
            else ()
        )

    def execute(self, requests):
        if not self.decoupled:
            return [self._answer_once(request) for request in requests]
        for request in requests:
            self.streams.submit(self._stream, request)
        return None

    def finalize(self):
        self.streams.shutdown(wait=False, cancel_futures=True)

    # -- one request -----------------------------------------------------------------------
    def _inputs(self, request) -> tuple[list, dict[str, np.ndarray]]:
        """(preprocessing's inputs, tensorrt_llm's own inputs from the request)."""
        tensors = {t.name(): t.as_numpy() for t in request.inputs()}
        batch = tensors["text_input"].shape[0]
        # an input the BLS config reshapes to [] arrives as [batch]; the models it calls declare [batch, 1]
        tensors = {name: value.reshape(batch, 1) if value.ndim == 1 else value for name, value in tensors.items()}
        max_tokens = tensors.get("max_tokens")
        if max_tokens is None or max_tokens.size != 1 or int(max_tokens.reshape(-1)[0]) <= 0:
            raise BlsError("max_tokens must be a single value > 0")
        for name, neutral in NOT_RUN.items():
            if (name in ("num_draft_tokens", "use_draft_logits") and self.draft_llm) or (name == "image_input" and self.encoders):
                continue  # run by _speculative, by _encoded
            value = tensors.get(name)
            if value is not None and (neutral is None or any(v != neutral for v in value.reshape(-1).tolist())):
                raise BlsError(f"input {name!r} needs a model this BLS does not run (draft model, multimodal encoder)")
        to_preprocessing = TO_PREPROCESSING | (IMAGES_TO_PREPROCESSING if self.encoders else {})
        pre = [pb_utils.Tensor(target, tensors[name]) for name, target in to_preprocessing.items() if name in tensors]
        dropped = GUIDE_INPUTS if self.fault("guide_dropped_on_the_bls") else ()  # read per request: switchable
        core = {
            target: tensors[name]
            for name, target in TO_TENSORRT_LLM.items()
            if name in tensors and name not in self.not_forwarded and name not in dropped
        }
        for name in ("return_context_logits", "return_generation_logits"):  # always sent, as upstream's BLS does
            core.setdefault(name, np.zeros((batch, 1), dtype=bool))
        return pre, core

    def _llm_request(self, request):
        pre, core = self._inputs(request)
        preprocessed = self._call("preprocessing", pre, list(PREPROCESSED))
        core |= self._encoded(request)
        inputs = [pb_utils.Tensor(PREPROCESSED[name], value) for name, value in preprocessed.items()]
        inputs += [pb_utils.Tensor(name, value) for name, value in core.items()]
        # asked for only where the request wants them: a family before TensorRT-LLM 0.19 declares none of them but the
        # KV-cache block counts, which return_kv_cache_reuse_stats asks for there (upstream's BLS passes them on)
        perf = PERF_METRICS if _asked(core, "return_perf_metrics") else ()
        perf = perf or (PERF_METRICS[:3] if _asked(core, "return_kv_cache_reuse_stats") else ())
        counts = [output for flag, output in TOKEN_COUNTS.items() if _asked(core, flag)]
        return pb_utils.InferenceRequest(
            model_name=self.llm,
            inputs=inputs,
            requested_output_names=["output_ids", "sequence_length", *PASSED_ON, *perf, *counts],
        )

    def _encoded(self, request) -> dict[str, np.ndarray]:
        """A multimodal deployment's image_input through its encoders: tensorrt_llm's prompt table and its size (upstream's
        BLS passes image_input alone to them; bytes and URLs went to preprocessing)."""
        image = pb_utils.get_input_tensor_by_name(request, "image_input")
        if self.encoders is None or image is None:
            return {}
        encoded = self._call(self.encoders, [pb_utils.Tensor("IMAGE", image.as_numpy())], list(ENCODED))
        return {ENCODED[name]: value for name, value in encoded.items()}

    @staticmethod
    def _call(model: str, inputs: list, outputs: list[str]) -> dict[str, np.ndarray]:
        response = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs).exec()
        if response.has_error():
            raise BlsError(response.error().message())
        found = {name: pb_utils.get_output_tensor_by_name(response, name) for name in outputs}
        return {name: tensor.as_numpy() for name, tensor in found.items() if tensor is not None}

    def _text(self, llm_outputs: dict, tokens: np.ndarray | None = None) -> pb_utils.InferenceResponse:
        """A BLS response: the detokenized output_ids (or `tokens`, accumulated) and the outputs passed on."""
        ids = llm_outputs["output_ids"] if tokens is None else tokens
        lengths = llm_outputs["sequence_length"] if tokens is None else np.full(ids.shape[:2], ids.shape[2], np.int32)
        text = self._call(
            "postprocessing", [pb_utils.Tensor("TOKENS_BATCH", ids), pb_utils.Tensor("SEQUENCE_LENGTH", lengths)], ["OUTPUT"]
        )["OUTPUT"]
        tensors = [pb_utils.Tensor("text_output", text)]
        # bls_token_counts_not_returned: asked for, the counts stay behind (NVIDIA/TensorRT-LLM#8150)
        counts = () if self.fault("bls_token_counts_not_returned") else tuple(TOKEN_COUNTS.values())
        passed = (*PASSED_ON, *PERF_METRICS, *counts)
        tensors += [pb_utils.Tensor(name, llm_outputs[name]) for name in passed if name in llm_outputs]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _drafts(self, request) -> bool:
        """Whether the request asks for speculative decoding (num_draft_tokens > 0), with upstream's words where it
        cannot have it."""
        tensor = pb_utils.get_input_tensor_by_name(request, "num_draft_tokens")
        if tensor is None or int(tensor.as_numpy().reshape(-1)[0]) <= 0:
            return False
        if not self.draft_llm:
            raise BlsError("cannot perform speculative decoding without draft model")
        if any(
            pb_utils.get_input_tensor_by_name(request, name) is not None for name in ("image_input", *IMAGES_TO_PREPROCESSING)
        ):
            raise BlsError("Multimodal and speculative decoding is not currently supported")
        stream = pb_utils.get_input_tensor_by_name(request, "stream")
        if stream is not None and stream.as_numpy().any():
            raise BlsError("streaming is not supported with speculative decoding")
        if tensor.as_numpy().size > 1:
            raise BlsError("speculative decoding is not supported with batch size > 1")
        return True

    def _speculative(self, request) -> pb_utils.InferenceResponse:
        """Draft model and target in turns (speculative.py), then the text of what the target answered."""
        pre, core = self._inputs(request)
        preprocessed = self._call("preprocessing", pre, list(PREPROCESSED))
        base = {PREPROCESSED[name]: value for name, value in preprocessed.items()} | core
        base.update(streaming=np.zeros((1, 1), dtype=bool), exclude_input_in_output=np.ones((1, 1), dtype=bool))
        prompt = [int(t) for t in base["input_ids"][0, : int(base["input_lengths"].reshape(-1)[0])]]

        flag = pb_utils.get_input_tensor_by_name(request, "use_draft_logits")
        by_logits = flag is not None and bool(flag.as_numpy().any())
        drafted_logits: list[np.ndarray] = []  # the last draft's generation logits, where use_draft_logits asks for them

        def generate(model: str, ids: list[int], tokens: int, draft: list[int] | None = None) -> list[int]:
            inputs = base | {
                "input_ids": np.array([ids], dtype=np.int32),
                "input_lengths": np.array([[len(ids)]], dtype=np.int32),
                "request_output_len": np.array([[tokens]], dtype=np.int32),
            }
            drafting = by_logits and model == self.draft_llm and not draft
            if draft:
                inputs["draft_input_ids"] = np.array([draft], dtype=np.int32)
                if by_logits:  # upstream's lib/decode.py: the draft's logits of its tokens, [1, n, vocab]
                    inputs["draft_logits"] = drafted_logits[-1][None, -len(draft) :]
            if drafting:
                inputs["return_generation_logits"] = np.ones((1, 1), dtype=bool)
            call = pb_utils.InferenceRequest(
                model_name=model,
                inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
                requested_output_names=["output_ids", "sequence_length", *(["generation_logits"] if drafting else [])],
            )
            return self._answered(call, drafted_logits if drafting else None)

        def verify(ids: list[int], proposal: list[int]) -> list[int]:
            answer = generate(self.llm, ids, len(proposal) + 1, proposal)
            if self.fault("speculative_text_repeated"):  # the kept draft tokens added again before the target's answer
                return proposal[: agreeing(proposal, answer)] + answer
            return answer

        words = preprocessed.get("STOP_WORDS_IDS")  # [1, 2, N]: the one row's word list
        stop_words = [w for w in unpack_word_list(None if words is None else words[0]) if w]
        done = speculate(
            lambda ids, k: generate(self.draft_llm, ids, k),
            verify,
            prompt,
            int(base["request_output_len"].reshape(-1)[0]),
            int(pb_utils.get_input_tensor_by_name(request, "num_draft_tokens").as_numpy().reshape(-1)[0]),
            lambda ids: any(ids[-len(w) :] == w for w in stop_words),
        )
        echoed = "exclude_input_in_output" in core and not core["exclude_input_in_output"].any()
        ids = np.array([[(prompt if echoed else []) + done.tokens]], dtype=np.int32)
        return self._text({"output_ids": ids, "sequence_length": np.array([[ids.shape[2]]], dtype=np.int32)})

    def _answered(self, call, logits: list | None) -> list[int]:
        """The tokens a call to tensorrt_llm answered; its generation logits [tokens, vocab] added to `logits`."""
        # a decoupled tensorrt_llm answers on a stream even when not streaming: its one response, then the final
        responses = list(call.exec(decoupled=True)) if self.decoupled else [call.exec()]
        tokens = []
        for response in responses:
            if response.has_error():
                raise BlsError(response.error().message())
            out = {t.name(): t.as_numpy() for t in response.output_tensors()}
            if "output_ids" in out:
                tokens += [int(t) for t in out["output_ids"][0, 0, : int(out["sequence_length"].reshape(-1)[0])]]
            if logits is not None and "generation_logits" in out:  # [1, beam, tokens, vocab] -> [tokens, vocab]
                logits.append(out["generation_logits"][0, 0])
        return tokens

    def _resent(self, send, failed):
        """send()'s result (each call a new request to tensorrt_llm); under the fault engine_death_kept_ready a failed
        call is sent again (for RESEND_FOR_S) instead of answered with its error, as Dynamo's TensorRT-LLM worker kept
        taking requests for an engine that had died (ai-dynamo/dynamo#10266): the request hangs while all say ready."""
        result, deadline = send(), time.monotonic() + RESEND_FOR_S
        while failed(result) and self.fault("engine_death_kept_ready") and time.monotonic() < deadline:
            time.sleep(1.0)
            result = send()
        return result

    def _answer_once(self, request):
        try:
            if self._drafts(request):
                return self._speculative(request)
            response = self._resent(lambda: self._llm_request(request).exec(), lambda r: r.has_error())
            if response.has_error():
                raise BlsError(response.error().message())
            return self._text({t.name(): t.as_numpy() for t in response.output_tensors()})
        except BlsError as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))

    def _stream(self, request) -> None:
        sender = request.get_response_sender()
        try:
            if self._drafts(request):
                sender.send(self._speculative(request), flags=FINAL)
                return
            accumulated = None
            if self.fault("engine_death_kept_ready"):  # each try read whole before any of it is sent on
                responses = self._resent(
                    lambda: list(self._llm_request(request).exec(decoupled=True)), lambda got: any(r.has_error() for r in got)
                )
            else:
                responses = self._llm_request(request).exec(decoupled=True)
            for response in responses:
                if response.has_error():
                    raise BlsError(response.error().message())
                outputs = {t.name(): t.as_numpy() for t in response.output_tensors()}
                if "output_ids" not in outputs:  # the empty final response that closes tensorrt_llm's stream
                    continue
                if self.accumulate:
                    new = outputs["output_ids"][..., : int(outputs["sequence_length"].reshape(-1)[0])]
                    accumulated = new if accumulated is None else np.concatenate([accumulated, new], axis=2)
                sender.send(self._text(outputs, accumulated))
            sender.send(flags=FINAL)
        except Exception as exc:  # BlsError, or a bug: on its own thread nothing else would answer the request
            message = str(exc) if isinstance(exc, BlsError) else f"tensorrt_llm_bls: {type(exc).__name__}: {exc}"
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)), flags=FINAL)
