"""The Triton paths of the property matrix: an entry model (ensemble, tensorrt_llm_bls, the llmapi model: text in,
text out) and the tensorrt_llm model (token ids in and out), each asked unary, streamed or in a batch of four.

Canonical options become the served model's inputs by the names fixtures/properties.toml gives each surface; an
option the served model declares no input for is Unanswerable (a skip naming the model and the input)."""

from __future__ import annotations

import numpy as np

from ..triton.client import GenerationError, Sampling, log_probs_of
from ..triton.llmapi_contract import PERF_OUTPUTS, output_number, output_text
from ..triton.load import Target, run_load
from ..triton.tensor_contract import NUMPY, PERF_METRICS, Unbatched, returned_ids
from .matrix import LLMAPI, TENSORRT_LLM, TRITON
from .prompt_tables import input_embeddings, single_tokens, with_table_ids
from .requests import Answer, Ask, Unanswerable

SAMPLING = {  # canonical option -> the client's Sampling field
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "seed": "random_seed",
    "min_tokens": "min_length",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
BEAM_SETTINGS: dict[str, dict[str, float]] = {  # beam-search settings at beam width 1 (none of them the default), per surface
    TRITON: {"beam_width": 1, "length_penalty": 2.0},
    TENSORRT_LLM: {"beam_width": 1, "len_penalty": 2.0, "early_stopping": 0, "beam_search_diversity_rate": 0.5},
    LLMAPI: {"sampling_param_beam_width": 1},
}
DATATYPES = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}  # an engine's dtype as Triton names it
LOOKAHEAD_INPUTS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
LLMAPI_NAMES = {"kv_cache_reused_block": "kv_cache_reused_blocks"}  # the llmapi model's name -> the executor's
FILLERS = ("The capital of France is", "Water boils at", "The largest planet is")  # the batch's other requests


class TritonPath:
    """One model of a served deployment. `surface`: TRITON, TENSORRT_LLM or LLMAPI (matrix.py)."""

    def __init__(self, served, model: str, surface: str):
        self.served, self.client, self.model, self.surface = served, served.client, model, surface
        self.name = "llmapi" if surface == LLMAPI else model
        self.key = f"{served.id}/{model}"  # unique in a session of several deployments
        self.tokenizer = served.tokenizer
        self.max_input_len: int | None = served.ref.engine.max_input_len
        self._dtypes = {t["name"]: t["datatype"] for t in self.client.model_metadata(model)["inputs"]}
        # a prompt table in another datatype than the engine's (FP16 over float32): the stand-in rounds it on its way
        self.table_rounds = self._dtypes.get("prompt_embedding_table", "FP16") != DATATYPES[served.ref.engine.dtype]
        # an entry model of a family without the exclude_input_in_output input returns the prompt as deployed
        self._echoes = (
            surface == TRITON and not self.declared("exclude_input_in_output") and not served.ref.options.exclude_input_in_output
        )

    def declared(self, name: str) -> bool:
        return name in self._dtypes

    def lacks(self, names: list[str]) -> str | None:
        """Why none of `names` can be sent: the served model declares none of them."""
        if any(self.declared(n) for n in names):
            return None
        return f"{self.served.id}: {self.model} declares no input {' or '.join(names)} (its contract's inputs)"

    def question(self, question: str) -> str:
        return self.served.chat_prompt(question)

    def answer(self, ask: Ask, mode: str) -> Answer:
        if mode == "streamed" and not self.client.decoupled:
            raise Unanswerable(f"{self.served.id} is not decoupled: {self.model} answers unary requests only")
        if mode not in ("unary", "streamed"):  # a batched request goes beside its fillers: effects.Context.batched
            raise ValueError(f"answer sends unary or streamed requests, not {mode}")
        inputs = self.inputs(ask, streamed=mode == "streamed")
        try:
            if mode == "unary":
                return self.read([self.client.request(self.model, inputs)], ask)
            result = self.client.stream_inputs(self.model, inputs)
            return self.read([e.outputs for e in result.content_events], ask, cumulative=self.surface == LLMAPI)
        except GenerationError as exc:
            raise AssertionError(f"{self.name} ({mode}) refused {dict(ask.options)}: {exc}") from None

    def batch(self, asks: list[Ask]) -> list[Answer]:
        """`asks` sent at once, each unary; their answers in order."""
        return [self.read(responses, ask) for responses, ask in zip(self._batched_responses(asks), asks, strict=True)]

    def _batched_responses(self, asks: list[Ask]) -> list[list[dict]]:
        """`asks` sent at once, each unary: each one's responses, in order."""
        target = Target(self.client.endpoints, self.model, request_timeout_s=self.client.timeout_s)
        records, _ = run_load(target, [self.inputs(a, streamed=False) for a in asks], concurrency=len(asks), keep_outputs=True)
        by_index = {r.index: r for r in records}
        for index, ask in enumerate(asks):
            if by_index[index].error:
                raise AssertionError(f"{self.name} (batched) refused {dict(ask.options)}: {by_index[index].error}")
        return [list(by_index[i].responses) for i in range(len(asks))]

    def sequences(self, ask: Ask, mode: str) -> dict[int, Answer]:
        """num_return_sequences (Ask option `sequences`): each sequence's answer by its sequence_index, read from all
        the responses of the one request (TensorRT-LLM's backend answers each sequence on its own, the final flag with
        the last to end: a decoupled model's way); in a batch, the request is the last of four."""
        if not self.client.decoupled:
            raise Unanswerable(
                f"{self.served.id} is not decoupled: num_return_sequences > 1 answers one response per sequence, "
                "which only a decoupled model can send"
            )
        if mode in ("unary", "streamed"):
            inputs = self.inputs(ask, streamed=mode == "streamed")
            try:
                responses = [e.outputs for e in self.client.stream_inputs(self.model, inputs).content_events]
            except GenerationError as exc:
                raise AssertionError(f"{self.name} ({mode}) refused {dict(ask.options)}: {exc}") from None
        else:
            responses = self._batched_responses([*(Ask.of(p, ask.max_tokens) for p in FILLERS), ask])[-1]
        by_index: dict[int, list[dict]] = {}
        for response in responses:
            if "sequence_index" not in response:
                raise AssertionError(f"{self.name} ({mode}): a response to num_return_sequences without sequence_index")
            by_index.setdefault(int(response["sequence_index"].reshape(-1)[0]), []).append(response)
        return {index: self.read(got, ask) for index, got in sorted(by_index.items())}

    def extra(self, inputs: dict, name: str, value) -> None:
        """Add input `name` with the datatype the served model declares (no batch dimension where it takes none)."""
        if not self.declared(name):
            raise Unanswerable(f"{self.served.id}: {self.model} declares no input {name}")
        dtype = self._dtypes[name]
        if self.surface == LLMAPI and not self.client.batches(self.model):
            value = Unbatched.of(value, dtype)
        inputs[name] = (value, dtype)

    # -- building the request ---------------------------------------------------------------------------------------
    def inputs(self, ask: Ask, streamed: bool) -> dict:
        options = ask.asked
        sampling = (
            Sampling(**{SAMPLING[k]: options[k] for k in SAMPLING if k in options}) if options.keys() & SAMPLING.keys() else None
        )
        if self.surface == TENSORRT_LLM:
            return self._core_inputs(ask, options, sampling, streamed)
        kwargs: dict = {"sampling": sampling, "return_log_probs": bool(options.get("log_probs"))}
        kwargs.update({k: options[k] for k in ("end_id", "pad_id") if k in options})
        kwargs.update({w: options[k] for k, w in (("stop", "stop_words"), ("bad_words", "bad_words")) if k in options})
        exclude = options.get("exclude_input", True)
        if self.surface == LLMAPI:
            kwargs["exclude_input_in_output"] = exclude
        try:
            inputs = self.client.ensemble_inputs(ask.prompt, ask.max_tokens, stream=True if streamed else None, **kwargs)
        except GenerationError as exc:
            raise Unanswerable(str(exc)) from None
        if self.surface == TRITON and (self.declared("exclude_input_in_output") or "exclude_input" in options):
            self.extra(inputs, "exclude_input_in_output", exclude)
        if "bias" in options:
            words = [self.tokenizer.decode([token]).encode("utf-8") for token in options["bias"]]
            self.extra(inputs, "embedding_bias_words", words)
            self.extra(inputs, "embedding_bias_weights", [float(w) for w in options["bias"].values()])
        for name, value in BEAM_SETTINGS[self.surface].items() if options.get("beam") else ():
            self.extra(inputs, name, value)
        if "table" in options:  # a text prompt has no prompt-table ids: the table is sent, no id refers to it
            self._prompt_table(inputs, options["table"], options.get("extra_id", 1))
        if "guide" in options:
            self._guide(inputs, options["guide"])
        self._returned(inputs, options)
        self._logits(inputs, options)
        if "num_draft_tokens" in options:  # the BLS's speculative decoding through its draft model
            self.extra(inputs, "num_draft_tokens", options["num_draft_tokens"])
        if options.get("use_draft_logits"):  # and the draft model's logits sent with its tokens
            self.extra(inputs, "use_draft_logits", True)
        return inputs

    @property
    def drafts(self) -> bool:
        """Whether its BLS has a draft model for speculative decoding (the lock's draft_model)."""
        return self.model == "tensorrt_llm_bls" and self.served.ref.options.draft_model is not None

    def _guide(self, inputs: dict, guide: tuple[str, str]) -> None:
        """Guided decoding: the guide's type (the executor's name) and text, as the ensemble, BLS and tensorrt_llm take
        them alike."""
        kind, text = guide
        self.extra(inputs, "guided_decoding_guide_type", kind.encode())
        self.extra(inputs, "guided_decoding_guide", text.encode())

    def _prompt_table(self, inputs: dict, words: tuple[str, ...], extra_id: int) -> list[int]:
        """Send the model's own input embeddings of `words` (one token each) as the prompt table, row k for word k,
        keyed for KV-cache reuse by `extra_id` (an image's id); -> the words' token ids."""
        tokens = single_tokens(self.tokenizer, words)
        engine = self.served.ref.engine
        if engine.max_prompt_embedding_table_size < len(tokens) * engine.max_batch_size:
            raise Unanswerable(
                f"{self.served.id}: its engine holds no prompt table of {len(tokens)} rows a request "
                f"(engines.lock max_prompt_embedding_table_size {engine.max_prompt_embedding_table_size}, max_batch_size "
                f"{engine.max_batch_size}): TensorRT-LLM refuses one ('Prompt vocab size ... is larger than max prompt "
                "vocab size')"
            )
        if self.table_rounds and engine.backend != "reference":  # only the stand-in takes another datatype
            raise Unanswerable(
                f"{self.served.id}: {self.model} declares its prompt_embedding_table "
                f"{self._dtypes.get('prompt_embedding_table')} over a {engine.dtype} engine: "
                "TensorRT-LLM refuses it ('Request embedding table data type doesn't match model weight data type.')"
            )
        dtype = NUMPY.get(self._dtypes.get("prompt_embedding_table", ""))
        if dtype is None:
            raise Unanswerable(f"{self.served.id}: {self.model} takes no prompt_embedding_table of a numpy datatype")
        rows = input_embeddings(self.served.engine.path)[tokens]
        self.extra(inputs, "prompt_embedding_table", rows[np.newaxis].astype(dtype))
        if self.declared("prompt_vocab_size"):  # read by the families before the executor, ignored since
            self.extra(inputs, "prompt_vocab_size", len(tokens))
        if self.declared("prompt_table_extra_id"):  # an entry model's one KV-cache reuse key for the table (>= 1)
            self.extra(inputs, "prompt_table_extra_id", extra_id)
        return tokens

    def _core_inputs(self, ask: Ask, options: dict, sampling, streamed: bool) -> dict:
        encode = self.served.encode
        words = {
            k: [encode(w) if isinstance(w, str) else list(w) for w in options[k]] for k in ("stop", "bad_words") if k in options
        }
        ids = encode(ask.prompt) + list(options.get("after", ()))  # "after": token ids that follow the prompt's
        inputs = self.client.core_inputs(
            ids,
            ask.max_tokens,
            end_id=options.get("end_id", self.served.end_id),
            pad_id=options.get("pad_id"),
            stop_words_ids=words.get("stop"),
            bad_words_ids=words.get("bad_words"),
            exclude_input_in_output=options.get("exclude_input", True),
            sampling=sampling,
            return_log_probs=bool(options.get("log_probs")),
            streaming=True if streamed else None,
        )
        if "bias" in options:
            bias = np.zeros(len(self.tokenizer), dtype=np.float32)
            for token, weight in options["bias"].items():
                bias[token] = weight
            self.extra(inputs, "embedding_bias", bias.reshape(1, -1))
        for name, value in BEAM_SETTINGS[TENSORRT_LLM].items() if options.get("beam") else ():
            self.extra(inputs, name, value)
        if "table" in options:  # each word's token in the prompt becomes the id of its row: vocab_size + k
            extra_id = options.get("extra_id", 1)
            tokens = self._prompt_table(inputs, options["table"], extra_id)
            vocab_size = input_embeddings(self.served.engine.path).shape[0]
            tabled = with_table_ids(ids, tokens, vocab_size)
            inputs["input_ids"] = (np.array([tabled], dtype=np.int32), inputs["input_ids"][1])
            if self.declared("prompt_table_extra_ids"):  # KV-cache reuse keys: the table's id for its ids, 0 for text
                self.extra(inputs, "prompt_table_extra_ids", [extra_id if t >= vocab_size else 0 for t in tabled])
        if "guide" in options:
            self._guide(inputs, options["guide"])
        if "decay" in options:  # top-p decay: (runtime_top_p_decay, runtime_top_p_min)
            decay, floor = options["decay"]
            self.extra(inputs, "runtime_top_p_decay", decay)
            self.extra(inputs, "runtime_top_p_min", floor)
        if "lookahead" in options:  # a request's lookahead decoding config: (window, ngram, verification set) sizes
            for name, value in zip(LOOKAHEAD_INPUTS, options["lookahead"], strict=True):
                self.extra(inputs, name, value)
        if "draft" in options:  # speculative decoding's external draft tokens, for the engine to verify
            self.extra(inputs, "draft_input_ids", list(options["draft"]))
        if "draft_logits" in options:  # with them, the draft's logits [tokens, vocab]: acceptance by probability
            self.extra(inputs, "draft_logits", np.asarray(options["draft_logits"], dtype=np.float32)[None])
        if "threshold" in options:
            self.extra(inputs, "draft_acceptance_threshold", options["threshold"])
        if "retention" in options:
            self._retention(inputs, options["retention"], options.get("decode_retention"))
        self._returned(inputs, options)
        self._logits(inputs, options)
        return inputs

    def _retention(self, inputs: dict, ranges: tuple, decode: tuple | None) -> None:
        """KV-cache retention: (start, end or -1, priority, duration ms or None) per token range; the durations are
        sent only where one is given (-1: none, upstream's kRetentionNoExpirationTime); `decode`: the decode phase's
        (priority, duration ms or None), read by the backend only beside the ranges."""
        starts, ends, priorities, durations = zip(*ranges, strict=True)
        self.extra(inputs, "retention_token_range_starts", list(starts))
        self.extra(inputs, "retention_token_range_ends", list(ends))
        self.extra(inputs, "retention_token_range_priorities", list(priorities))
        if any(d is not None for d in durations):
            self.extra(inputs, "retention_token_range_durations_ms", [-1 if d is None else d for d in durations])
        if decode is not None:
            priority, duration = decode
            self.extra(inputs, "retention_decode_priority", priority)
            if duration is not None:
                self.extra(inputs, "retention_decode_duration_ms", duration)

    def _returned(self, inputs: dict, options: dict) -> None:
        """What the request asks back besides the text: perf metrics, KV-cache reuse stats, several sequences."""
        perf_input = "sampling_param_return_perf_metrics" if self.surface == LLMAPI else "return_perf_metrics"
        for option, name in (("perf_metrics", perf_input), ("kv_reuse_stats", "return_kv_cache_reuse_stats")):
            if options.get(option):
                self.extra(inputs, name, True)
        for name in ("return_num_input_tokens", "return_num_output_tokens") if options.get("token_counts") else ():
            self.extra(inputs, name, True)
        if "sequences" in options:
            self.extra(inputs, "num_return_sequences", options["sequences"])
        if "best_of" in options:  # the llmapi model's: sequences drawn, of which it returns n (1)
            self.extra(inputs, "sampling_param_best_of", options["best_of"])

    def _logits(self, inputs: dict, options: dict) -> None:
        for name in ("return_context_logits", "return_generation_logits") if options.get("logits") else ():
            self.extra(inputs, name, True)

    # -- reading the answer -----------------------------------------------------------------------------------------
    def _metrics(self, last: dict) -> dict[str, float] | None:
        """return_perf_metrics' figures by the executor's names (tensor_contract.PERF_METRICS); the llmapi model sends
        them as strings, its reused blocks as kv_cache_reused_block."""
        if self.surface != LLMAPI:
            return {name: float(last[name].reshape(-1)[0]) for name in PERF_METRICS if name in last} or None
        figures = {LLMAPI_NAMES.get(name, name): output_number(last, name) for name in PERF_OUTPUTS if name in last}
        return {name: value for name, value in figures.items() if value is not None} or None

    @staticmethod
    def _counts(responses: list[dict]) -> list[tuple[int | None, int | None]] | None:
        """num_input_tokens and num_output_tokens of each response that carried either."""

        def count(response: dict, name: str) -> int | None:
            return int(response[name].reshape(-1)[0]) if name in response else None

        pairs = [(count(r, "num_input_tokens"), count(r, "num_output_tokens")) for r in responses]
        return [p for p in pairs if p != (None, None)] or None

    def read(self, responses: list[dict], ask: Ask, cumulative: bool = False) -> Answer:
        if not responses:
            raise AssertionError(f"{self.name}: no response carried output")
        last = responses[-1]
        cum, per_token = log_probs_of(last)
        metrics = self._metrics(last)
        counts = self._counts(responses)
        logits = {
            "context_logits": last["context_logits"][0] if "context_logits" in last else None,
            "generation_logits": last["generation_logits"][0, 0] if "generation_logits" in last else None,
        }
        if self.surface == TENSORRT_LLM:
            ids = [t for r in responses for t in returned_ids(r)]
            per_token = [p for r in responses for p in log_probs_of(r)[1] or []] if per_token is not None else None
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            kept = per_token[: len(ids)] if per_token else per_token
            return Answer(text, ids, len(ids), kept, cum, metrics=metrics, counts=counts, **logits)
        if self.surface == LLMAPI:  # one text per sequence returned (RequestOutput.outputs), and a request returns n = 1
            sizes = sorted({np.asarray(r["text_output"]).size for r in responses if "text_output" in r})
            assert sizes in ([], [1]), f"{self.name}: a request for one sequence answered text_output of {sizes[-1]} texts"
        texts = [output_text(r, "text_output") or "" for r in responses]
        text = texts[-1] if cumulative else "".join(texts)
        if self._echoes and ask.asked.get("exclude_input", True):
            text = text.removeprefix(ask.prompt)
        if len(responses) > 1 and per_token is not None:
            per_token = [p for r in responses for p in log_probs_of(r)[1] or []]
        return Answer(text, None, None, per_token, cum, metrics=metrics, counts=counts, **logits)


def entry_surface(served) -> str:
    """The surface of a deployment's entry model: the llmapi model's inputs, or the ensemble's and BLS's."""
    return LLMAPI if served.ref.serving_layout.one_model and served.client.speaks_llmapi else TRITON
