"""Reference `tensorrt_llm` model: TensorRT-LLM's tensor contract served by a transformers model, answering as
tensorrtllm_backend's C++ model of the served version does (outputs, shapes, errors, metrics).

Parameters read from config.pbtxt, as the tensorrtllm backend reads them:
  gpt_model_path           the engine directory (engine.json, weights, tokenizer)
  gpt_model_type           V1 / v1: static batches through Triton's dynamic batcher (not decoupled);
                           inflight_batching / inflight_fused_batching: continuous batching, decoupled (streaming,
                           stop signal, cancellation) or not (one response per request, stop answered at once)
  exclude_input_in_output  default for requests that do not send the input of that name
  lora_cache_host_memory_bytes  LoRA adapters kept by task id before the oldest is evicted
  enable_kv_cache_reuse    in-flight batching keeps the prompt's full KV-cache blocks for later requests (prefix_cache.py);
                           unset, tensorrtllm_backend's default for the served family (true from v0.19.0)
  guided_decoding_backend  "xgrammar": guided decoding (guided.py) with the tokenizer of tokenizer_dir (else the
                           engine's); unset: a guided request is refused as TensorRT-LLM refuses it
  stand_in_fault           a known upstream bug to reproduce (stand_in_faults.py), here or in its engine

Every input of the served family is honoured or refused by name (inputs.py); it publishes TensorRT-LLM's metric
families (metrics.py).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from dataclasses import replace
from functools import cache, partial

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from errors import ExecutorError
from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence
from guided import TRITON_GUIDE_TYPES, GuidedDecoder
from hf_tokenizer import load_tokenizer
from inflight import InflightScheduler, Job
from inputs import check
from metrics import TrtllmMetrics
from outputs import TOKENS_PER_BLOCK, complete_outputs, streamed_outputs
from prefix_cache import PrefixCache, PrefixCachingScheduler
from retention import read as read_retention
from stand_in_faults import Faults
from served_contract import RequestError, unpack_word_list
from tensor_contract import RENAMED
from triton_io import flag, model_parameters

V1, INFLIGHT = "V1", "inflight_fused_batching"
# tensorrtllm_backend's default for an unset enable_kv_cache_reuse: false, true from v0.19.0 (model_instance_state.cc)
REUSE_BY_DEFAULT_FROM = (0, 19)
REUSE_STATS_DEPRECATED_FROM = (0, 19)  # return_kv_cache_reuse_stats: a warning from then on, return_perf_metrics instead
# a block of 64 tokens of SmolLM2-135M in float32 is 3 MB (30 layers' keys and values, 3 heads of 64): 400 MB at most
MAX_CACHED_BLOCKS = 128
MODEL_TYPES = {"V1": V1, "v1": V1, "inflight_batching": INFLIGHT, "inflight_fused_batching": INFLIGHT}
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# the faults that live in this model but show in its engine (generation.py, inflight.py, lora.py: shared with the
# llmapi stand-in, which hands it its own) or its outputs (output_faults.py)
ENGINE_FAULTS = (
    "end_id_ignored",
    "min_length_ignored",
    "end_id_pads_output",
    "max_tokens_off_by_one",
    "stop_words_one_token_late",
    "greedy_not_deterministic",
    "seed_follows_batch_slot",
    "logits_perturbed",
    "lora_task_id_alone_not_found",
    "lora_unknown_id_serves_another_adapter",
    "lora_one_adapter_for_whole_batch",
    "outputs_swapped_under_concurrency",
    "inflight_serializes_requests",
    "stop_signal_ignored",
    "cancelled_request_keeps_its_slot",
    "first_streamed_token_twice",
    "end_token_streamed_twice",
    "ttft_plus_30_percent",
    "throughput_minus_20_percent",
    "output_log_probs_all_zero",
    "cum_log_probs_zero",
    "log_probs_all_zero",
    "output_log_probs_dtype_differs",
    "sequence_length_ignores_end_id",
    "stream_held_until_the_end",
    "repetition_penalty_ignored",
    "lora_unbuilt_module_silently_dropped",
    "prompt_table_ids_inside_the_vocabulary",
    "kv_reuse_ignores_prompt_table_extra_ids",
    "kv_reuse_ignores_the_lora_task",
    "kv_retention_ignored",
    "draft_tokens_accepted_unverified",
    "draft_acceptance_not_reported",
    "draft_logits_ignored",
    "generation_logits_step_dropped_at_the_end_token",
    "top_p_decay_dropped",
    # the tracker catalog's (fixtures/tracker_faults.toml)
    "generates_one_token_repeated",
    "long_prompt_garbage",
    "log_probs_slow_generation",
    "lora_greedy_not_deterministic",
    "penalized_requests_fail_on_a_long_engine",
    "engine_stalls_after_a_few_requests",
    "sampling_setup_crashes_under_load",
)
LEAK_BYTES = 1 << 20  # rss_grows_with_stop_words: what each request with stop words leaves behind
END_AT_ONCE_BIAS = 1e4  # extra_sequences_end_at_once: the end token's bias, far above any logit gap


def _scalar(tensors: dict, name: str, row: int, default, cast):
    value = tensors.get(name)
    if value is None or value.size == 0:
        return default
    flat = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(-1, 1)
    return cast(flat[min(row, flat.shape[0] - 1)][0])


def _renamed(tensors: dict, name: str, row: int, default, cast):
    """An input by its pre-0.20 name or its new one, whichever the served family declares."""
    value = _scalar(tensors, RENAMED[name], row, None, cast)
    return _scalar(tensors, name, row, default, cast) if value is None else value


def _kv_blocks(max_tokens) -> int | None:
    """The KV cache's blocks where max_tokens_in_paged_kv_cache caps it (unset: None)."""
    if not max_tokens or str(max_tokens).startswith("${"):
        return None
    return int(max_tokens) // TOKENS_PER_BLOCK


def _row(value, row: int):
    return None if value is None else value[min(row, len(value) - 1)]


def _prompt_table(tensors: dict, row: int):
    """The row's prompt_embedding_table [rows, hidden] (its batch dimension off, as upstream squeezes it), or None.
    prompt_vocab_size is not read: TensorRT-LLM's executor takes the table's own row count."""
    table = _row(tensors.get("prompt_embedding_table"), row)
    return None if table is None else torch.from_numpy(np.ascontiguousarray(table))


def at_least(family: str | None, version: tuple[int, int]) -> bool:
    """Whether the served template family (trtllm-X.Y) is `version` or later; False where none is named."""
    if not family or not family.startswith("trtllm-"):
        return False
    return tuple(int(p) for p in family.removeprefix("trtllm-").split(".")) >= version


def _extra_ids(tensors: dict, row: int) -> list[int]:
    """The row's prompt_table_extra_ids (one per prompt token, PromptTuningConfig's inputTokenExtraIds): what keys a
    prompt-table token's KV-cache block besides its id."""
    extra = _row(tensors.get("prompt_table_extra_ids"), row)
    return [] if extra is None else [int(e) for e in np.asarray(extra).reshape(-1)]


def _draft_tokens(tensors: dict, row: int) -> list[int] | None:
    draft = _row(tensors.get("draft_input_ids"), row)
    return None if draft is None or np.asarray(draft).size == 0 else [int(t) for t in np.asarray(draft).reshape(-1)]


def _sampling(tensors: dict, row: int) -> Sampling:
    """The row's sampling config, TensorRT-LLM's defaults where an input is absent."""
    return Sampling(
        top_k=_scalar(tensors, "runtime_top_k", row, 0, int),
        top_p=_scalar(tensors, "runtime_top_p", row, 0.0, float),
        temperature=_scalar(tensors, "temperature", row, 1.0, float),
        repetition_penalty=_scalar(tensors, "repetition_penalty", row, 1.0, float),
        presence_penalty=_scalar(tensors, "presence_penalty", row, 0.0, float),
        frequency_penalty=_scalar(tensors, "frequency_penalty", row, 0.0, float),
        min_length=_renamed(tensors, "min_length", row, 0, int),
        seed=_renamed(tensors, "random_seed", row, 0, int),
        top_p_decay=_scalar(tensors, "runtime_top_p_decay", row, 1.0, float),
        top_p_min=_scalar(tensors, "runtime_top_p_min", row, 1e-6, float),
        top_p_reset_id=_scalar(tensors, "runtime_top_p_reset_ids", row, None, int),
    )


def _draft_logits(tensors: dict, row: int, draft: list[int] | None, vocab: int) -> np.ndarray | None:
    """The row's draft_logits [draft tokens, vocab]: the draft model's logits for its tokens, which make the target
    accept by probability (acceptDraftTokensByLogits) instead of by comparison."""
    logits = _row(tensors.get("draft_logits"), row)
    if logits is None or np.asarray(logits).size == 0:
        return None
    logits = np.asarray(logits, dtype=np.float32).reshape(-1, np.asarray(logits).shape[-1])
    if draft is None or logits.shape != (len(draft), vocab):
        raise RequestError(
            f"draft_logits of shape {list(logits.shape)}: expected [{len(draft or [])}, {vocab}] (a row of the vocabulary "
            "per draft token)"
        )
    return logits


def _guide(tensors: dict, row: int) -> tuple[str, str] | None:
    """(type, guide) of a row, as utils.cc getGuidedDecodingParamsFromTensors reads them: a type it does not know
    (json, json_schema, regex, ebnf_grammar) is no guide at all, and the request runs unguided."""
    kind = _scalar(tensors, "guided_decoding_guide_type", row, None, _text)
    if kind not in TRITON_GUIDE_TYPES:
        return None
    return kind, _scalar(tensors, "guided_decoding_guide", row, "", _text)


def _text(item) -> str:
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


class _Rows:
    """The rows of one request of batch > 1 (decoupled only): only the last to finish sends the final flag."""

    def __init__(self, count: int):
        self.left, self._lock = count, threading.Lock()

    def finish(self) -> bool:
        with self._lock:
            self.left -= 1
            return self.left == 0


# the template families of tensorrtllm_backend before its executor API (v0.10.0), whose answers differ
BEFORE_EXECUTOR_API = {"trtllm-0.7", "trtllm-0.8", "trtllm-0.9"}


def _response(arrays: dict):
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in arrays.items()])


def _error(message: str):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        model_type = MODEL_TYPES.get(params.get("gpt_model_type") or "V1")
        if model_type is None:
            raise pb_utils.TritonModelException("Invalid gpt_model_type. Must be v1/inflight_batching/inflight_fused_batching.")
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        if model_type == V1 and self.decoupled:
            raise pb_utils.TritonModelException(
                "the reference backend serves gpt_model_type V1 with decoupled_mode false only; use "
                f"{INFLIGHT} for a decoupled deployment"
            )
        self.inflight = model_type == INFLIGHT
        self.exclude_input_default = flag(params.get("exclude_input_in_output"), False)
        self.fault = Faults(params, "tensorrt_llm")
        self.family = params.get("stand_in_family")  # the template family served (the harness's stand_in.py)
        self.leaked: list[bytes] = []  # rss_grows_with_stop_words
        cache_bytes = params.get("lora_cache_host_memory_bytes")
        self.engine_fault = self.fault.among(ENGINE_FAULTS)
        load = partial(
            ReferenceEngine, params["gpt_model_path"], int(cache_bytes) if cache_bytes else None, fault=self.engine_fault
        )
        self.reuse = self.inflight and flag(params.get("enable_kv_cache_reuse"), at_least(self.family, REUSE_BY_DEFAULT_FROM))
        self.kv_blocks = _kv_blocks(params.get("max_tokens_in_paged_kv_cache"))
        self.scheduler = self._scheduler(load) if self.inflight else None
        self.engine = self.scheduler.engine if self.inflight else load()
        self._guided_decoder(params)
        pb_utils.Logger.log_info(f"reference tensorrt_llm stand-in: {params['gpt_model_path']} on {self.engine.describe()}")
        config = self.engine.build_config
        self.metrics = TrtllmMetrics(
            args["model_name"],
            args["model_version"],
            not self.inflight,
            config["max_batch_size"],
            config["max_seq_len"],
            self.engine.gpu_bytes,
            self.fault,
            self.kv_blocks,
        )
        self._request_ids = itertools.count(1)  # the executor's ids, named in its error messages

    def _scheduler(self, load) -> InflightScheduler:
        """In-flight batching, its context phases through a prefix cache where KV-cache reuse is on, of at most
        MAX_CACHED_BLOCKS blocks (or the blocks of max_tokens_in_paged_kv_cache), evicted by priority and age."""
        if not self.reuse:
            return InflightScheduler(load, self._iteration)
        blocks = min(MAX_CACHED_BLOCKS, self.kv_blocks or MAX_CACHED_BLOCKS)
        prefix = PrefixCache(TOKENS_PER_BLOCK, max_blocks=blocks, enabled=True, fault=self.engine_fault)
        return PrefixCachingScheduler(load, prefix, self._iteration)

    def _guided_decoder(self, params: dict) -> None:
        """GuidedDecodingConfig from the model's parameters: only xgrammar, as the C++ backend's model_instance_state
        accepts; its decoder is made at the first guided request (the tokenizer and xgrammar load then)."""
        backend = params.get("guided_decoding_backend") or ""
        if not backend or backend.startswith("${"):
            return
        if backend != "xgrammar":
            raise pb_utils.TritonModelException(f"Invalid guided_decoding_backend {backend!r}: only xgrammar is supported")
        tokenizer_dir = params.get("tokenizer_dir") or ""
        tokenizer_dir = params["gpt_model_path"] if not tokenizer_dir or tokenizer_dir.startswith("${") else tokenizer_dir
        engine = self.engine

        @cache  # the first guided request is validated on the execute thread, before the scheduler's sees the decoder
        def decoder() -> GuidedDecoder:
            tokenizer = load_tokenizer(tokenizer_dir)
            return GuidedDecoder.for_tokenizer(tokenizer, engine.vocab_size, tokenizer.eos_token_id)

        engine.guided_decoder = decoder

    def _iteration(self, stats: dict) -> None:
        metrics = getattr(self, "metrics", None)  # the scheduler may report before initialize() made them
        if metrics is not None:
            metrics.iteration(**stats)

    # -- request parsing ----------------------------------------------------------------
    def _message(self, exc: RequestError) -> str:
        if isinstance(exc, ExecutorError):
            return f"Executor failed process requestId {next(self._request_ids)} due to the following error: {exc}"
        return str(exc)

    @staticmethod
    def _tensors(request) -> dict[str, np.ndarray]:
        return {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}

    def _parse(self, tensors: dict) -> tuple[list[GenerationRequest], bool, bool]:
        """-> (one request per batch row, exclude_input_in_output, streaming)"""
        check(tensors)
        if "input_ids" not in tensors:
            raise RequestError("input_ids is not present in the request.")
        input_ids = tensors["input_ids"]
        input_ids = input_ids.reshape(1, -1) if input_ids.ndim == 1 else input_ids
        lengths = tensors["input_lengths"].reshape(-1)
        batch = input_ids.shape[0]
        if lengths.shape[0] != batch:
            raise RequestError(f"input_lengths has {lengths.shape[0]} rows, input_ids has {batch}")
        if "streaming" not in tensors and self.fault("missing_streaming_input_crashes"):
            raise RequestError("streaming is None: a request without the optional streaming input is not executed")
        streaming = _scalar(tensors, "streaming", 0, False, bool)
        if batch > 1 and not self.decoupled:
            raise RequestError("Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy")
        if streaming and not self.decoupled:
            raise RequestError("Streaming is only supported if model is deployed using decoupled mode.")
        beam_width = _scalar(tensors, "beam_width", 0, 1, int)
        if beam_width != 1:
            raise RequestError(f"Requested beam width {beam_width} is larger than configured max beam width 1")
        if _scalar(tensors, "num_return_sequences", 0, 1, int) > 1 and not self.decoupled:  # the stand-in's words
            raise RequestError("num_return_sequences > 1 answers a response per sequence: it needs decoupled mode")
        exclude = _scalar(tensors, "exclude_input_in_output", 0, self.exclude_input_default, bool)
        if self.fault("prompt_echoed_despite_exclude"):
            exclude = False
        parsed = [self._row_request(tensors, input_ids, lengths, row) for row in range(batch)]
        return parsed, exclude, streaming

    def _row_request(self, tensors: dict, input_ids, lengths, row: int) -> GenerationRequest:
        """The request of one batch row."""
        batch = input_ids.shape[0]
        # TensorRT-LLM takes the ids of a request of one row as they are (input_lengths is not read for it)
        n = input_ids.shape[1] if batch == 1 else int(lengths[row])
        if not 0 <= n <= input_ids.shape[1]:
            raise RequestError(f"input_lengths[{row}] = {n} is outside [0, {input_ids.shape[1]}]")
        end_id = _scalar(tensors, "end_id", row, -1, int)
        if end_id >= self.engine.vocab_size and self.fault("hostile_request_kills_model"):
            os._exit(1)  # the model's process dies on an end_id past the vocabulary
        sampling = _sampling(tensors, row)
        draft = _draft_tokens(tensors, row)
        if self.fault("top_k_top_p_ignored"):  # neither reaches the sampler: greedy
            sampling.top_k, sampling.top_p = 0, 0.0
        bias = tensors.get("embedding_bias")
        gen = GenerationRequest(
            input_ids=[int(t) for t in input_ids[row, :n]],
            max_new_tokens=_scalar(tensors, "request_output_len", row, 0, int),
            end_id=end_id,
            pad_id=_scalar(tensors, "pad_id", row, max(end_id, 0), int),
            sampling=sampling,
            stop_words=unpack_word_list(_row(tensors.get("stop_words_list"), row)),
            bad_words=unpack_word_list(_row(tensors.get("bad_words_list"), row)),
            embedding_bias=None if bias is None or bias.size == 0 else _row(bias, row),
            prompt_table=_prompt_table(tensors, row),
            prompt_table_extra_ids=_extra_ids(tensors, row),
            guide=_guide(tensors, row),
            retention=read_retention(tensors, row),
            draft_tokens=draft,
            draft_logits=_draft_logits(tensors, row, draft, self.engine.vocab_size),
            draft_acceptance_threshold=_scalar(tensors, "draft_acceptance_threshold", row, None, float),
            return_log_probs=_scalar(tensors, "return_log_probs", row, False, bool),
            return_perf_metrics=_scalar(tensors, "return_perf_metrics", row, False, bool),
            # from v0.19.0 only a deprecation warning (model_instance_state.cc): no outputs of its own
            return_kv_cache_reuse_stats=_scalar(tensors, "return_kv_cache_reuse_stats", row, False, bool)
            and not at_least(self.family, REUSE_STATS_DEPRECATED_FROM),
            return_context_logits=_scalar(tensors, "return_context_logits", row, False, bool),
            return_generation_logits=_scalar(tensors, "return_generation_logits", row, False, bool),
            return_num_input_tokens=_scalar(tensors, "return_num_input_tokens", row, False, bool),
            return_num_output_tokens=_scalar(tensors, "return_num_output_tokens", row, False, bool),
            num_return_sequences=_scalar(tensors, "num_return_sequences", row, 1, int),
            lora=self._adapter(
                _scalar(tensors, "lora_task_id", row, None, int),
                _row(tensors.get("lora_weights"), row),
                _row(tensors.get("lora_config"), row),
            ),
        )
        self.engine.validate(gen)
        if gen.stop_words and self.fault("rss_grows_with_stop_words"):
            self.leaked.append(b"\x01" * LEAK_BYTES)  # written, so resident
        return gen

    def _adapter(self, task_id, weights, config):
        if self.engine.lora is None:
            if task_id is not None or weights is not None or config is not None:
                raise RequestError(
                    "this engine was built without LoRA support: give it a [engines.<name>.lora] section in engines.lock"
                )
            return None
        return self.engine.lora.resolve(task_id, weights, config)

    def execute(self, requests):
        if not self.inflight:
            return self._execute_static(requests)
        if not self.decoupled:
            return self._execute_inflight_unary(requests)
        for request in requests:
            self._submit(request)
        return None  # decoupled: responses go through each request's response sender

    def finalize(self):
        if self.scheduler is not None:
            self.scheduler.close()

    def _stop_refused(self, request_id: str, found: bool):
        """The error a stop signal for a request not in flight gets, or None (an empty final response). Before the
        executor API (tensorrtllm_backend v0.7.0-v0.9.0) WorkItemsQueue::stopWorkItem threw this and enqueue answered
        with it; from v0.10.0 (model_instance_state.cc) such a request "may already be completed": an empty response."""
        if found or not (self.family in BEFORE_EXECUTOR_API or self.fault("stop_for_an_ended_request_is_an_error")):
            return None
        return _error(f"Received stop request for requestId {request_id} but it's not active (might be completed already).")

    # -- in-flight, decoupled: the scheduler answers through each request's response sender -----
    def _submit(self, request) -> None:
        sender = request.get_response_sender()
        tensors = self._tensors(request)
        if _scalar(tensors, "stop", 0, False, bool):  # upstream's stop signal: same request id, stop=true
            refused = self._stop_refused(request.request_id(), self.scheduler.request_stop(request.request_id()))
            if refused is not None:
                sender.send(refused, flags=FINAL)
            else:
                sender.send(flags=FINAL)
            return
        try:
            rows, exclude, streaming = self._parse(tensors)
        except RequestError as exc:
            sender.send(_error(self._message(exc)), flags=FINAL)
            return
        # a job per row and sequence; the final flag comes with the last of them to end (isFinal: all sequences final)
        jobs = [(index, k, self._child(child, k)) for index, row in enumerate(rows) for k, child in enumerate(row.children())]
        group = _Rows(len(jobs))
        for index, k, child in jobs:
            emit = partial(self._emit, sender, exclude, group, (index if len(rows) > 1 else None, k))
            self.scheduler.submit(
                Job(Sequence(child), request.request_id(), emit, streaming=streaming, is_cancelled=request.is_cancelled)
            )

    def _child(self, request: GenerationRequest, k: int) -> GenerationRequest:
        """Sequence k of a request; under extra_sequences_end_at_once (NVIDIA/TensorRT-LLM#3311: 'one normal sequence
        and the rest are filled with eos token') every sequence but the first draws its end token at once."""
        if k == 0 or request.end_id < 0 or not self.fault("extra_sequences_end_at_once"):
            return request
        bias = np.zeros(self.engine.vocab_size, dtype=np.float32)
        bias[request.end_id] = END_AT_ONCE_BIAS
        return replace(request, embedding_bias=bias)

    def _emit(
        self, sender, exclude: bool, group: _Rows, where, job: Job, tokens, log_probs, final: bool, error: str | None = None
    ) -> None:
        """One delivery of a job; `where` is (its batch_index, or None for a request of one row; its sequence_index)."""
        flags = FINAL if final and group.finish() else 0
        batch_index, sequence_index = where
        try:
            if error is not None:
                sender.send(_error(error), flags=flags)
            elif not job.streaming:
                if final:
                    outputs = complete_outputs(job.sequence, exclude, batch_index, self.engine_fault, sequence_index)
                    sender.send(_response(outputs), flags=flags)
            elif tokens:
                outputs = streamed_outputs(job.sequence, tokens, log_probs, batch_index, self.engine_fault, sequence_index)
                sender.send(_response(outputs), flags=flags)
            elif flags:
                sender.send(flags=flags)
        except Exception:  # noqa: S110 - the client closed its stream; the slot is freed all the same
            pass

    # -- in-flight, not decoupled: one response per request, returned by execute() ------------
    def _execute_inflight_unary(self, requests):
        responses = [None] * len(requests)
        done = threading.Condition()

        def collect(index: int, exclude: bool, job: Job, tokens, log_probs, final: bool, error: str | None = None):
            if not final:
                return
            with done:
                outputs = None if error else complete_outputs(job.sequence, exclude, fault=self.engine_fault)
                responses[index] = _error(error) if error else _response(outputs)
                done.notify()

        for index, request in enumerate(requests):
            tensors = self._tensors(request)
            if _scalar(tensors, "stop", 0, False, bool):  # answered at once, with no outputs
                refused = self._stop_refused(request.request_id(), self.scheduler.request_stop(request.request_id()))
                responses[index] = refused or pb_utils.InferenceResponse(output_tensors=[])
                continue
            try:
                rows, exclude, _ = self._parse(tensors)
            except RequestError as exc:
                responses[index] = _error(self._message(exc))
                continue
            self.scheduler.submit(
                Job(Sequence(rows[0]), request.request_id(), partial(collect, index, exclude), is_cancelled=request.is_cancelled)
            )
        with done:
            done.wait_for(lambda: all(r is not None for r in responses))
        return responses

    # -- V1: one static batch per execute() -----------------------------------------------
    def _execute_static(self, requests):
        responses = [None] * len(requests)
        batch, owners = [], []
        for i, request in enumerate(requests):
            tensors = self._tensors(request)
            if _scalar(tensors, "stop", 0, False, bool):  # nothing of it runs: answered at once, with no outputs
                responses[i] = self._stop_refused(request.request_id(), False) or pb_utils.InferenceResponse(output_tensors=[])
                continue
            try:
                parsed, exclude, _ = self._parse(tensors)
            except RequestError as exc:
                responses[i] = _error(self._message(exc))
                continue
            owners.append((i, exclude))
            batch.extend(parsed)
        try:
            sequences = self.engine.generate_static(batch, self._static_step(len(batch)))
        except Exception as exc:  # keep serving: fail this batch, not the server
            for i, _ in owners:
                responses[i] = _error(f"generation failed: {exc}")
            return responses
        finally:
            self.metrics.iteration(active=0, scheduled=0, context=0, context_tokens=0, generation=0, sequence_lengths=[])
        for (i, exclude), seq in zip(owners, sequences, strict=True):
            responses[i] = _response(complete_outputs(seq, exclude, fault=self.engine_fault))
        return responses

    def _static_step(self, size: int):
        """V1 statistics per step: the whole batch is scheduled until its last row ends."""
        unfinished = [size]

        def step(sequences: list[Sequence], context: bool) -> None:
            now = sum(not s.finished for s in sequences)
            self.metrics.iteration(
                active=size,
                scheduled=size,
                context=size if context else 0,
                context_tokens=sum(len(s.request.input_ids) for s in sequences) if context else 0,
                generation=unfinished[0],
                empty_slots=size - now,
                sequence_lengths=[len(s.request.input_ids) + len(s.tokens) for s in sequences],
            )
            unfinished[0] = now

        return step
