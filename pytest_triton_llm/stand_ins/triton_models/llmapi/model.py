"""Reference `llmapi` model: the python model of TensorRT-LLM's PyTorch path (triton_backend/all_models/llmapi/
tensorrt_llm), answering as upstream's model.py does (inputs, outputs, error texts: llmapi_contract.py), served by the
project's in-flight scheduler on transformers, with block-based KV-cache reuse (prefix_cache.py).

model.yaml is read as upstream reads it: `triton_config` (max_batch_size, decoupled) completes config.pbtxt; every
other key is an LLM API argument. Honoured here: model, dtype, max_batch_size, max_seq_len, max_input_len,
kv_cache_config.enable_block_reuse and tokens_per_block, lora_config.max_lora_rank and lora_target_modules; the rest
only matter to TensorRT-LLM. LoRA as upstream's helpers.get_lora_request_from_request takes it: lora_id, lora_name and
lora_path together; the peft adapter at lora_path is read on first use and cached under lora_id. The config parameter
stand_in_fault names a known upstream bug to reproduce (stand_in_faults.py), here, in its engine or its prefix cache.
"""

from __future__ import annotations

import itertools
import os
import time
import traceback
from functools import partial

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml
from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence
from hf_tokenizer import load_tokenizer
from llmapi_contract import GREEDY_BEST_OF, KV_CACHE_OUTPUTS, TIMESTAMP_OUTPUTS
from lora_convert import peft_to_trtllm
from ngram import drafter_for
from prefix_cache import PrefixCache, PrefixCachingScheduler, TimedJob
from stand_in_faults import Faults
from triton_io import model_parameters

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
DEFAULT_MAX_TOKENS = 32  # tensorrt_llm SamplingParams.max_tokens
TOKENS_PER_BLOCK = 32  # the PyTorch backend's KV-cache block, unless kv_cache_config.tokens_per_block says otherwise
DTYPES = {"auto": "float32", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
# LLM API finish reasons of the scheduler's endings; the stop string (or None) is the stop reason
FINISH = {"length": "length", "end_id": "stop", "stop_words": "stop", "cancelled": "cancelled"}
LORA_CKPT_SOURCES = ("hf", "nemo")  # upstream helpers._LORA_CKPT_SOURCES
# tensorrt_llm LoraConfig.lora_target_modules when model.yaml names none: every projection of a llama block
LORA_MODULES = ["attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate"]
# the faults of the shared engine (generation.py) and of prefix_cache.py that live in this model
ENGINE_FAULTS = (
    "temperature_zero_not_greedy",
    "penalties_ignored",
    "kv_reuse_changes_outputs",
    "kv_reuse_without_speedup",
    "llmapi_adapter_leaks_onto_the_batch",
    "rejected_draft_kv_kept",
    "drafts_kept_past_the_stop",
)


def _model_yaml() -> dict:
    path = os.environ.get("LLM_CONFIG_PATH", "model.yaml")
    path = path if os.path.isabs(path) else os.path.join(os.path.dirname(os.path.abspath(__file__)), path)
    try:
        with open(path) as fh:
            return yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise pb_utils.TritonModelException(f"Failed to parse YAML engine config: {exc}") from None


def _scalar(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy()
    if value.size != 1:
        raise pb_utils.TritonModelException(f"Expected a scalar tensor for tensor {name}")
    item = value.item(0)
    return item.decode("utf-8") if isinstance(item, bytes) else item


def _strings(values) -> np.ndarray:
    return np.asarray([str(v).encode("utf-8") for v in values], dtype=np.object_)


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        triton_config = _model_yaml()["triton_config"]
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=bool(triton_config["decoupled"])))
        auto_complete_model_config.set_max_batch_size(int(triton_config["max_batch_size"]))
        return auto_complete_model_config

    def initialize(self, args):
        self.fault = Faults(model_parameters(args), "llmapi")
        if self.fault("llmapi_missing_openai_module"):  # the image's model imports a package the image lacks
            raise ModuleNotFoundError("No module named 'openai'", name="openai")
        config = _model_yaml()
        args_yaml = {k: v for k, v in config.items() if k != "triton_config"}
        self.decoupled = bool(config["triton_config"]["decoupled"])
        checkpoint = args_yaml["model"]
        self.tokenizer = load_tokenizer(args_yaml.get("tokenizer") or checkpoint)
        max_seq_len = int(args_yaml.get("max_seq_len") or 2048)
        # the PyTorch path checks a prompt against max_num_tokens and what max_seq_len leaves, not max_input_len
        build_config = {
            "max_batch_size": int(args_yaml.get("max_batch_size") or 8),
            "max_seq_len": max_seq_len,
            "max_input_len": max_seq_len,
            "max_output_len": max_seq_len,
        }
        self.max_num_tokens = int(args_yaml.get("max_num_tokens") or 8192)  # the LLM API's default
        lora = args_yaml.get("lora_config")
        if lora:
            modules = list(lora.get("lora_target_modules") or LORA_MODULES)
            build_config["lora_config"] = {"max_lora_rank": int(lora.get("max_lora_rank") or 64), "lora_target_modules": modules}
        dtype = DTYPES.get(str(args_yaml.get("dtype", "auto")), "float32")
        kv = args_yaml.get("kv_cache_config") or {}
        engine_fault = self.fault.among(ENGINE_FAULTS)
        self.prefix = PrefixCache(
            int(kv.get("tokens_per_block", TOKENS_PER_BLOCK)),
            max_blocks=4096,
            enabled=bool(kv.get("enable_block_reuse", True)),
            fault=engine_fault,
        )
        load = partial(ReferenceEngine, checkpoint, None, {"dtype": dtype, "build_config": build_config}, fault=engine_fault)
        self.scheduler = PrefixCachingScheduler(load, self.prefix, drafter=drafter_for(args_yaml.get("speculative_config")))
        self.engine = self.scheduler.engine
        pb_utils.Logger.log_info(f"reference llmapi stand-in: {checkpoint} on {self.engine.describe()}")
        self._ids = itertools.count(1)

    # -- requests ------------------------------------------------------------------------
    def execute(self, requests):
        for request in requests:
            self._submit(request)
        return None  # every response goes through the request's response sender, decoupled or not

    def _submit(self, request) -> None:
        sender = request.get_response_sender()
        arrival = time.monotonic_ns()
        try:
            if _scalar(request, "stop"):
                self._stop(request, sender)
                return
            job = self._job(request, sender, arrival)
        except Exception as exc:  # noqa: BLE001 - upstream answers every failure the same way
            error = pb_utils.TritonError(f"Error generating request: {exc}")
            text = pb_utils.Tensor("text_output", np.asarray([b"N/A"], dtype=np.object_))
            sender.send(pb_utils.InferenceResponse(output_tensors=[text], error=error), flags=FINAL)
            return
        self.scheduler.submit(job)

    def _stop(self, request, sender) -> None:
        if not request.request_id():
            raise ValueError("A request id must be provided for request cancellation")
        self.scheduler.request_stop(request.request_id())
        sender.send(_cancelled(), flags=FINAL)

    def _job(self, request, sender, arrival: int) -> TimedJob:
        prompt = _prompt(request)
        streaming = bool(_scalar(request, "streaming") or False)
        if self.fault("llmapi_streaming_flag_in_lora_slot"):  # the flag lands in generate_async's lora_request slot
            streaming = False
        if streaming and not self.decoupled:
            raise pb_utils.TritonModelException("Streaming is only supported in decoupled mode.")
        stops = pb_utils.get_input_tensor_by_name(request, "sampling_param_stop")
        stops = [s.decode("utf-8") for s in stops.as_numpy().reshape(-1)] if stops is not None else []
        if self.fault("llmapi_stop_strings_ignored"):  # the stop strings never reach the sampler
            stops = []
        # TensorRT-LLM matches stop strings on the text; here on tokens, as the word alone or after a space
        stop_ids = [(s, ids) for s in stops for v in (s, f" {s}") if (ids := self.tokenizer.encode(v, add_special_tokens=False))]
        ids = self._prompt_ids(prompt)
        _check_best_of(request)
        max_tokens = _scalar(request, "sampling_param_max_tokens")
        if self.fault("llmapi_reads_optional_inputs_unconditionally"):  # an absent input read as if it were there
            max_tokens = int(max_tokens)
        sampling = Sampling(
            top_k=int(_scalar(request, "sampling_param_top_k") or 0),
            top_p=float(_scalar(request, "sampling_param_top_p") or 0.0),
            temperature=float(_valued(_scalar(request, "sampling_param_temperature"), 1.0)),
            presence_penalty=float(_scalar(request, "sampling_param_presence_penalty") or 0.0),
            frequency_penalty=float(_scalar(request, "sampling_param_frequency_penalty") or 0.0),
            # llmapi_seed_ignored: every request samples with the default seed, whatever it asked for
            seed=0 if self.fault("llmapi_seed_ignored") else int(_scalar(request, "sampling_param_seed") or 0),
        )
        if self.fault("llmapi_hostile_request_kills_model") and (sampling.temperature < 0 or sampling.top_p > 1):
            os._exit(1)  # an out-of-range sampling parameter takes the worker down instead of failing the request
        generation = GenerationRequest(
            input_ids=ids,
            max_new_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens),
            end_id=self.tokenizer.eos_token_id,
            sampling=sampling,
            stop_words=[word for _, word in stop_ids],
            return_log_probs=bool(_scalar(request, "return_cumulative_logprob")),
            lora=self._lora(request),
        )
        if generation.max_new_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {generation.max_new_tokens}")
        self.engine.validate(generation)
        exclude = bool(_scalar(request, "sampling_param_exclude_input_from_output") or False)
        if self.fault("llmapi_exclude_input_ignored"):  # the prompt comes back whatever the request asked
            exclude = False
        wanted = self._wanted(request)
        perf = bool(_scalar(request, "sampling_param_return_perf_metrics"))
        respond = partial(self._respond, sender, ids, stop_ids, exclude, wanted, perf)
        return TimedJob(
            Sequence(generation),
            request.request_id() or f"llmapi-{next(self._ids)}",
            respond,
            streaming=streaming,
            is_cancelled=request.is_cancelled,
            arrival_ns=arrival,
        )

    def _prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's token ids, refused as TensorRT-LLM refuses a prompt that leaves no room."""
        ids = self.tokenizer.encode(prompt)
        if len(ids) > self.max_num_tokens:  # tensorrt_llm/llmapi/llm.py _check_arguments (PyTorch, no chunked prefill)
            raise ValueError(
                f"The sum of prompt length ({len(ids)}), query length (0) should not exceed max_num_tokens "
                f"({self.max_num_tokens})"
            )
        room = self.engine.build_config["max_seq_len"] - len(ids)
        if room <= 0 and self.fault("llmapi_over_long_prompt_kills_the_engine"):  # the ValueError escapes the worker
            os._exit(1)
        if room <= 0:  # the executor worker's deduced default_max_tokens (TensorRT-LLM 1.x)
            raise ValueError(
                f"`default_max_tokens` ({room}) must be greater than 0: the prompt's {len(ids)} tokens leave "
                f"nothing of max_seq_len ({self.engine.build_config['max_seq_len']})"
            )
        return ids

    def _wanted(self, request) -> dict[str, bool]:
        """The optional outputs the request asked for."""
        wanted = {
            name: bool(_scalar(request, name))
            for name in ("return_finish_reason", "return_stop_reason", "return_cumulative_logprob")
        }
        if self.fault("llmapi_optional_outputs_always_sent"):  # every output in every response, asked for or not
            wanted = dict.fromkeys(wanted, True)
        return wanted

    def _lora(self, request):
        """The request's adapter: None without LoRA inputs, else the one cached under lora_id (read from lora_path
        on first use), as upstream's get_lora_request_from_request and the executor's LoRA cache take them."""
        given = {name: _scalar(request, name) for name in ("lora_id", "lora_name", "lora_path")}
        if all(v is None for v in given.values()):
            return None
        if any(v is None for v in given.values()):
            raise ValueError("lora_id, lora_name, and lora_path must all be provided together")
        source = _scalar(request, "lora_ckpt_source") or "hf"
        if source not in LORA_CKPT_SOURCES:
            raise ValueError(f"lora_ckpt_source must be one of {LORA_CKPT_SOURCES}, got {source!r}")
        path = given["lora_path"]
        if not os.path.exists(path):
            if self.fault("llmapi_lora_path_not_checked"):  # a path that is not there: the base model answers
                return None
            raise ValueError(f"lora_path does not exist on the Triton server's filesystem: {path}")
        lora = self.engine.lora
        if lora is None:  # stand-in wording: TensorRT-LLM's own text for this case was not read
            raise ValueError("LoRA request on a model loaded without lora_config in model.yaml")
        if source != "hf":
            raise ValueError("the reference stand-in reads Hugging Face (peft) adapters only, not NeMo checkpoints")
        if self.fault("llmapi_lora_inputs_ignored"):  # before LoRA support: the inputs are taken, the base model serves
            return None
        task_id = int(given["lora_id"])
        if task_id in lora.cached_task_ids():
            return lora.resolve(task_id, None, None)
        weights, config = peft_to_trtllm(path)
        return lora.resolve(task_id, weights, config)

    # -- responses -------------------------------------------------------------------------
    def _respond(
        self,
        sender,
        prompt_ids,
        stop_ids,
        exclude,
        wanted,
        perf,
        job: TimedJob,
        tokens,
        log_probs,
        final: bool,
        error: str | None = None,
    ) -> None:
        try:
            if error is not None:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"Error generating request: {error}")), flags=FINAL
                )
            elif job.sequence.finish_reason == "cancelled" and final:
                sender.send(_cancelled(), flags=FINAL)
            elif job.streaming or final:
                if final:
                    job.last_token_ns = time.monotonic_ns()
                outputs = self._outputs(job, prompt_ids, stop_ids, exclude, wanted, perf and final, final)
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=FINAL if final else 0)
        except Exception:  # the client closed its stream (the scheduler frees the slot all the same), or a bug
            traceback.print_exc()

    @staticmethod
    def _cut_stop(tokens: list[int], stop_ids: list[tuple[str, list[int]]]) -> tuple[list[int], str | None]:
        """As the LLM API's result handler (executor/result.py _handle_sequence): a stop word whose ids end the
        answer's is its stop reason, and its ids are cut off (include_stop_str_in_output false); where none ends it,
        the tokens stay as they are. `stop_ids`: (stop string, the ids the request's stop words were matched by)."""
        for stop, ids in stop_ids:
            if tokens[-len(ids) :] == ids:
                return tokens[: -len(ids)], stop
        return tokens, None

    def _outputs(self, job: TimedJob, prompt_ids, stop_ids, exclude, wanted, perf: bool, final: bool) -> list:
        seq = job.sequence
        tokens, stop_reason = seq.tokens, None
        if seq.finish_reason == "stop_words":  # the stop word that ends the tokens is cut off and named
            tokens, stop_reason = self._cut_stop(tokens, stop_ids)
        text = self.tokenizer.decode(tokens if exclude else [*prompt_ids, *tokens], skip_special_tokens=True)
        # as the LLM API's incremental detokenizer: a character still missing bytes is held back
        if not final and not self.fault("llmapi_stream_splits_multibyte_characters"):
            text = text.rstrip("\ufffd")
        if seq.finish_reason == "end_id" and self.fault("llmapi_end_token_text_returned"):
            text += self.tokenizer.eos_token
        if seq.finish_reason == "end_id" and self.fault("llmapi_stop_reason_is_the_end_token"):
            stop_reason = self.tokenizer.eos_token_id  # the end token's id, as if it were a stop token
        if job.streaming and self.fault("llmapi_stream_sends_deltas"):  # the new text only, not the text so far
            text, job.sent_text = text[len(job.sent_text) :], text
        tensors = [pb_utils.Tensor("text_output", _strings([text]))]
        finish = FINISH.get(seq.finish_reason) if seq.finished else None
        if finish == "length" and self.fault("llmapi_finish_reason_never_length"):
            finish = "stop"
        cum_log_prob = f"[{seq.cum_log_prob}]" if self.fault("llmapi_numeric_outputs_not_numbers") else seq.cum_log_prob
        values = {
            "return_finish_reason": ("finish_reason", finish),
            "return_stop_reason": ("stop_reason", stop_reason),
            "return_cumulative_logprob": ("cumulative_logprob", cum_log_prob),
        }
        for key, (name, value) in values.items():
            if wanted[key]:
                tensors.append(pb_utils.Tensor(name, _strings([value])))
        if perf and job.kv is not None:
            kv = job.kv
            kv.total = -(-(len(prompt_ids) + len(seq.tokens)) // self.prefix.block)
            kv.new = kv.total - kv.reused
            figures = dict(zip(KV_CACHE_OUTPUTS, (kv.reused, kv.missed, kv.new, kv.total, kv.hit_rate), strict=True))
            arrival = job.first_token_ns if self.fault("llmapi_arrival_time_not_passed") else job.arrival_ns
            times = (arrival, job.first_scheduled_ns, job.first_token_ns, job.last_token_ns)
            figures.update(zip(TIMESTAMP_OUTPUTS, times, strict=True))
            drafted, accepted = (0, 0) if self.fault("llmapi_draft_counts_zeroed") else (seq.drafted, seq.accepted)
            rate = accepted / drafted if drafted else 0.0
            figures.update(acceptance_rate=rate, total_accepted_draft_tokens=accepted, total_draft_tokens=drafted)
            tensors.extend(pb_utils.Tensor(name, _strings([value])) for name, value in figures.items())
        return tensors

    def finalize(self):
        self.scheduler.close()


def _cancelled():
    return pb_utils.InferenceResponse(error=pb_utils.TritonError("Request cancelled by client", pb_utils.TritonError.CANCELLED))


def _prompt(request) -> str:
    text = pb_utils.get_input_tensor_by_name(request, "text_input")
    if text is None:
        raise pb_utils.TritonModelException("text_input is missing from the request")
    text = text.as_numpy().reshape(-1)
    if text.size != 1:
        raise ValueError("The current implementation only supports text_input being a 1D tensor.")
    return text[0].decode("utf-8") if isinstance(text[0], bytes) else str(text[0])


def _check_best_of(request) -> None:
    """SamplingParams' rules for best_of (helpers.py sends 1 where the request has none; 0 falls back to n, 1): below
    n it is refused, and above 1 where the request decodes greedily. A sampled best_of above 1 is answered with one
    sequence (n = 1): upstream keeps the best of its best_of draws by cumulative log prob where the executor returns
    them, else the first; the stand-in's is the draw n = 1 gives with the same seed."""
    best_of = int(_scalar(request, "sampling_param_best_of") or 1)
    if best_of < 1:
        raise ValueError(f"best_of ({best_of}) cannot be less than n (1)")
    top_k, top_p = _scalar(request, "sampling_param_top_k"), _scalar(request, "sampling_param_top_p")
    if best_of > 1 and top_k in (None, 1) and top_p in (None, 0.0):
        raise ValueError(GREEDY_BEST_OF.format(best_of=best_of))


def _valued(value, default):
    return default if value is None else value
