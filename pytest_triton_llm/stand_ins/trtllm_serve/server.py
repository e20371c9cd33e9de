"""The project's stand-in of trtllm-serve: the reference model behind trtllm-serve's OpenAI protocol, so that the /v1
suites can check what only trtllm-serve has (its extra fields, its 400 for an unknown field, streamed usage,
/perf_metrics) on a CPU. Every answer carries the header STAND_IN_HEADER: the suites tell it from a real trtllm-serve by it.

Written from TensorRT-LLM's tensorrt_llm/serve (openai_server.py, openai_protocol.py, postprocess_handlers.py) and
executor/base_worker.py (_deduce_max_tokens), the sources cited in openai_families.toml [families.trtllm-serve]:
- the PyTorch backend (trtllm-serve's default): logprobs=K gives the K likeliest tokens of each step;
- max_tokens beyond what max_seq_len leaves is cut to it; a prompt that leaves nothing is refused;
- ignore_eos sends end_id -1 and no stop words; min_tokens holds the end token back;
- stop strings end the text before them (include_stop_str_in_output keeps them), the stop string is the stop_reason.
The generation itself is the reference engine's (generation.py, inflight.py, prefix_cache.py), run with its in-flight
scheduler and KV-block reuse as the llmapi stand-in runs them.

Guided decoding (response_format) runs where --extra_llm_api_options sets guided_decoding_backend: xgrammar, with
the reference engine's guide (guided.py); without it a guided request is refused as the C++ executor refuses it.
What the stand-in does not implement (beam search, best_of, several prompts in one request,
tools, LoRA, echo on chat, detokenize false, ...) it refuses when a request asks for it, with HTTP 400 in upstream's error
shape and a message that says so; /metrics (iteration statistics) and /prometheus/metrics are not served: their
fields were not read. Copied with its shared modules into a run directory and started as `python server.py MODEL ...`
(pytest_triton_llm/openai/trtllm_serve.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections import deque
from functools import partial

import numpy as np
import uvicorn
import yaml
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from generation import GenerationRequest, ReferenceEngine, Sampling, Sequence
from guided import GuidedDecoder
from hf_tokenizer import load_tokenizer
from ngram import drafter_for
from prefix_cache import PrefixCache, PrefixCachingScheduler, TimedJob
from protocol import (
    ChatCompletionLogProb,
    ChatCompletionLogProbs,
    ChatCompletionLogProbsContent,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
    CompletionLogProbs,
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    DeltaMessage,
    ErrorResponse,
    ModelCard,
    ModelList,
    PromptTokensDetails,
    UsageInfo,
    guide_of,
)

STAND_IN_HEADER = "x-triton-llm-stand-in"  # the harness reads it by this name (openai/client.py STAND_IN_HEADER)
VERSION = "1.2.1"  # what /version answers: the TensorRT-LLM of the engine line's last image (26.07)
TOKENS_PER_BLOCK = 32  # the PyTorch backend's KV-cache block
LOGPROB_FLOOR = -9999.0  # upstream clamps every log probability to it
FINISH = {"length": "length", "end_id": "stop", "stop_words": "stop", "cancelled": "cancelled"}
# request fields the stand-in does not implement, with the value that means "not asked for" (upstream's default)
NOT_IMPLEMENTED = {
    "best_of": None,
    "use_beam_search": False,
    "top_p_min": 0.0,
    "length_penalty": None,
    "early_stopping": None,
    "stop_token_ids": [],
    "skip_special_tokens": True,
    "truncate_prompt_tokens": None,
    "return_context_logits": False,
    "detokenize": True,
    "thinking_token_budget": None,
    "disaggregated_params": None,
    "lora_request": None,
    "prompt_ignore_length": 0,
    "conversation_params": None,
    "tools": None,
    "documents": None,
    "chat_template": None,
    "prompt_token_ids": None,
    "prompt_token_ids_b64": None,
}


# a chat content part's type -> the modality upstream's chat_utils asks the placeholder registry for
MEDIA_PARTS = {"image_url": "image", "video_url": "video", "input_audio": "audio", "audio_url": "audio"}


def _refuse_media(messages: list[dict]) -> None:
    """A media part to a text model: chat_utils hands it to MultimodalDataTracker.add_data, whose
    retrieve_multimodal_placeholder (inputs/utils.py) finds no placeholder for the model type and raises
    TypeError("Unknown modality: <modality>"), which openai_chat answers with HTTP 400."""
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
                raise TypeError(f"Unknown modality: {MEDIA_PARTS[part['type']]}")


class StandInRefusal(ValueError):
    """A request that asks for what the stand-in does not implement (upstream would serve it)."""

    def __init__(self, what: str, advice: str = "check it against trtllm-serve itself"):
        super().__init__(f"pytest-triton-llm's trtllm-serve stand-in does not implement {what} (trtllm-serve does): {advice}")


def _speculative_decoding(seq) -> dict:
    """get_perf_metrics: the entry's speculative_decoding, only where the request drafted (total_draft_tokens > 0)."""
    if not seq.drafted:
        return {}
    counts = {"total_accepted_draft_tokens": seq.accepted, "total_draft_tokens": seq.drafted}
    return {"speculative_decoding": {"acceptance_rate": seq.accepted / seq.drafted, **counts}}


def _error(message: str, kind: str = "BadRequestError", status: int = 400) -> JSONResponse:
    """openai_server.create_error_response: ErrorResponse with HTTP 400 BadRequestError unless told otherwise."""
    return JSONResponse(ErrorResponse(message=message, type=kind, code=status).model_dump(), status_code=status)


def _usage_options(options) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) of a request's stream_options: usage is continuous only when included."""
    include_usage = bool(options and options.include_usage)
    return include_usage, include_usage and bool(options.continuous_usage_stats)


def _refuse_unimplemented(request) -> None:
    for name, default in NOT_IMPLEMENTED.items():
        if name in type(request).model_fields and getattr(request, name) not in (default, None if default == [] else default):
            raise StandInRefusal(f"{name}={getattr(request, name)!r}")


class StandIn:
    """The served model: tokenizer, engine, scheduler, and the perf metrics kept for /perf_metrics."""

    def __init__(self, model_dir: str, tokenizer: str, options: dict):
        self.model = options["served_name"]
        self.tokenizer = load_tokenizer(tokenizer)
        self.max_seq_len = int(options["max_seq_len"])
        self.max_num_tokens = int(options["max_num_tokens"])
        build_config = {
            "max_batch_size": int(options["max_batch_size"]),
            "max_seq_len": self.max_seq_len,
            "max_input_len": self.max_seq_len,
            "max_output_len": self.max_seq_len,
        }
        kv = options.get("kv_cache_config") or {}
        self.prefix = PrefixCache(
            int(kv.get("tokens_per_block", TOKENS_PER_BLOCK)), max_blocks=4096, enabled=bool(kv.get("enable_block_reuse", True))
        )
        load = partial(ReferenceEngine, model_dir, None, {"dtype": "float32", "build_config": build_config})
        try:
            drafter = drafter_for(options.get("speculative_config"))
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        self.scheduler = PrefixCachingScheduler(load, self.prefix, drafter=drafter)
        self.engine = self.scheduler.engine
        backend = options.get("guided_decoding_backend")
        if backend not in (None, "xgrammar"):  # the stand-in's one backend (TensorRT-LLM also has llguidance)
            raise SystemExit(f"guided_decoding_backend {backend!r}: the stand-in implements xgrammar only")
        if backend == "xgrammar":
            guided = GuidedDecoder.for_tokenizer(self.tokenizer, self.engine.vocab_size, self.tokenizer.eos_token_id)
            self.engine.guided_decoder = lambda: guided
        self.iteration = 0
        self.scheduler.on_stats = self._count_iteration
        keep = int(options.get("perf_metrics_max_requests", 0))
        self.perf_metrics: deque | None = deque(maxlen=keep) if options.get("return_perf_metrics") and keep > 0 else None
        self._ids = itertools.count(1)

    def _count_iteration(self, stats: dict) -> None:
        self.iteration += 1

    # -- one request ---------------------------------------------------------------------
    def prompt_ids(self, prompt, add_special_tokens: bool) -> list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise StandInRefusal("several prompts in one request", "send one")
            return self.prompt_ids(prompt[0], add_special_tokens)
        return self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)

    def max_tokens(self, ids: list[int], asked: int | None) -> int:
        """executor/base_worker.py _deduce_max_tokens."""
        default = self.max_seq_len - len(ids)
        if default <= 0:
            raise ValueError(
                f"`default_max_tokens` ({default}) must be greater than 0, `default_max_tokens` ({default}) = "
                f"max_seq_len ({self.max_seq_len}) - `splited_prompt_len` ({len(ids)})"
            )
        if asked is None or asked > default:
            return default
        if asked <= 0:
            raise ValueError(f"`max_tokens` ({asked}) must be greater than 0")
        return asked

    def embedding_bias(self, logit_bias: dict[str, float] | None) -> np.ndarray | None:
        """logit_bias as upstream's to_sampling_params passes it: the request's embedding_bias, one float32 per token of
        the vocabulary, zero but at the token ids its string keys name."""
        if not logit_bias:
            return None
        vocab = self.engine.vocab_size
        bias = np.zeros(vocab, dtype=np.float32)
        for key, value in logit_bias.items():
            try:
                token = int(key)
            except ValueError:
                raise ValueError(f"Invalid logit_bias key '{key}': must be a valid integer token ID") from None
            if not 0 <= token < vocab:
                raise ValueError(f"Token ID {token} out of vocabulary range [0, {vocab})")
            bias[token] = value
        return bias

    def job(
        self, ids: list[int], request, max_tokens: int | None, top_logprobs: int, streaming: bool, loop, queue, choice: int = 0
    ) -> TimedJob:
        """One engine request: choice `choice` of the request's n (each choice samples with its own seed, the
        request's plus its index: the stand-in's choice; how upstream seeds its child requests was not read)."""
        if len(ids) > self.max_num_tokens:  # llmapi/llm.py _check_arguments, as the llmapi stand-in words it
            raise ValueError(
                f"The sum of prompt length ({len(ids)}), query length (0) should not exceed max_num_tokens "
                f"({self.max_num_tokens})"
            )
        stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
        sampling = Sampling(
            top_k=request.top_k,
            top_p=1.0 if request.top_p is None else request.top_p,
            temperature=1.0 if request.temperature is None else request.temperature,
            repetition_penalty=request.repetition_penalty,
            presence_penalty=request.presence_penalty or 0.0,
            frequency_penalty=request.frequency_penalty or 0.0,
            min_length=request.min_tokens,
            seed=(request.seed or 0) + choice,
            min_p=request.min_p,
        )
        generation = GenerationRequest(
            input_ids=ids,
            max_new_tokens=self.max_tokens(ids, max_tokens),
            end_id=-1 if request.ignore_eos else self.tokenizer.eos_token_id,  # base_worker: end_id -1 under ignore_eos
            sampling=sampling,
            # matched on tokens, the word alone or after a space; none under ignore_eos (base_worker sends none then)
            stop_words=[]
            if request.ignore_eos
            else [self.tokenizer.encode(v, add_special_tokens=False) for s in stops for v in (s, f" {s}")],
            top_logprobs=top_logprobs,
            embedding_bias=self.embedding_bias(request.logit_bias),
            guide=guide_of(request.response_format),
        )
        self.engine.validate(generation)

        def emit(job, tokens, log_probs, final, error=None):  # the scheduler's thread: hand it to the event loop
            job.first_iter = job.first_iter or self.iteration
            if final:
                job.last_token_ns, job.last_iter = time.monotonic_ns(), self.iteration
            loop.call_soon_threadsafe(queue.put_nowait, (list(tokens), final, error, job.sequence.finish_reason))

        job = TimedJob(Sequence(generation), str(next(self._ids)), emit, streaming=streaming, arrival_ns=time.monotonic_ns())
        job.stops, job.first_iter, job.last_iter = stops, 0, 0
        return job

    def record_perf(self, job: TimedJob, server_arrival_s: float, server_first_token_s: float | None) -> None:
        """openai_server._extract_metrics and get_perf_metrics: one entry per finished request."""
        if self.perf_metrics is None:
            return
        kv = job.kv
        total = -(-(len(job.sequence.request.input_ids) + len(job.sequence.tokens)) // self.prefix.block)
        self.perf_metrics.append(
            {
                "request_id": int(job.request_id),
                "perf_metrics": {
                    "first_iter": job.first_iter,
                    "last_iter": job.last_iter,
                    "timing_metrics": {
                        "server_arrival_time": server_arrival_s,
                        "arrival_time": job.arrival_ns / 1e9,
                        "first_scheduled_time": job.first_scheduled_ns / 1e9,
                        "first_token_time": job.first_token_ns / 1e9,
                        "server_first_token_time": server_first_token_s,
                        "last_token_time": job.last_token_ns / 1e9,
                    },
                    "kv_cache_metrics": {
                        "num_total_allocated_blocks": total,
                        "num_new_allocated_blocks": total - (kv.reused if kv else 0),
                        "num_reused_blocks": kv.reused if kv else 0,
                        "num_missed_blocks": kv.missed if kv else 0,
                    },
                    **_speculative_decoding(job.sequence),
                },
            }
        )

    def drain_perf_metrics(self) -> list:
        if self.perf_metrics is None:
            return []
        drained, self.perf_metrics = list(self.perf_metrics), deque(maxlen=self.perf_metrics.maxlen)
        return drained

    # -- text --------------------------------------------------------------------------------
    def text(self, tokens: list[int], final: bool) -> str:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return text if final else text.rstrip("\ufffd")  # a character still missing bytes is held back

    def completion_logprobs(self, tokens, tops, initial_offset: int) -> CompletionLogProbs:
        """postprocess_handlers.create_completion_logprobs."""
        result = CompletionLogProbs()
        for token, top in zip(tokens, tops, strict=True):
            result.token_logprobs.append(max(top[token], LOGPROB_FLOOR))
            result.top_logprobs.append({self.tokenizer.decode(t): max(lp, LOGPROB_FLOOR) for t, lp in top.items()})
            piece = self.tokenizer.decode(token)
            result.text_offset.append(initial_offset if not result.text_offset else result.text_offset[-1] + len(piece))
            result.tokens.append(piece)
        return result

    def chat_logprobs(self, tokens, tops, with_top: bool) -> ChatCompletionLogProbs:
        """postprocess_handlers.create_logprobs."""
        content = []
        for token, top in zip(tokens, tops, strict=True):
            piece = self.tokenizer.decode(token)
            entry = ChatCompletionLogProbsContent(token=piece, bytes=list(piece.encode("utf-8", errors="replace")))
            entry.logprob = max(top[token], LOGPROB_FLOOR)
            if with_top:
                entry.top_logprobs = [
                    ChatCompletionLogProb(
                        token=(t := self.tokenizer.decode(tid)),
                        logprob=max(lp, LOGPROB_FLOOR),
                        bytes=list(t.encode("utf-8", errors="replace")),
                    )
                    for tid, lp in top.items()
                ]
            content.append(entry)
        return ChatCompletionLogProbs(content=content)


class Output:
    """What one request has produced so far, as the LLM API's detokenized result holds it: tokens, text, the finish."""

    def __init__(self, stand_in: StandIn, job: TimedJob):
        self.stand_in, self.job = stand_in, job
        self.tokens: list[int] = []
        self.text = ""
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None
        self.done = False

    def take(self, tokens: list[int], final: bool, reason: str | None) -> tuple[str, list[int]]:
        """Add a delivery; returns (new text, new tokens). A stop string in the text ends it there."""
        before_text, before_tokens = self.text, len(self.tokens)
        self.tokens.extend(tokens)
        text = self.stand_in.text(self.tokens, final)
        for stop in self.job.stops:
            if stop and stop in text:
                keep = text.index(stop) + (len(stop) if self.job.include_stop else 0)
                text, final, reason, self.stop_reason = text[:keep], True, "stop_words", stop
                self.job.stop_requested = True  # the request is aborted once its text holds the stop string
                break
        self.text = text
        if final:
            self.done = True
            self.finish_reason = FINISH.get(reason or "length")
        return text[len(before_text) :], self.tokens[before_tokens:]

    def tops(self, start: int, count: int) -> list[dict[int, float]]:
        return self.job.sequence.top_log_probs[start : start + count]


class Routes:
    """trtllm-serve's OpenAI routes on the stand-in: completions and chat, unary and streamed, as its openai_server
    answers them (the sources cited in openai_families.toml)."""

    def __init__(self, stand_in: StandIn):
        self.stand_in = stand_in

    async def models(self):
        return JSONResponse(content=ModelList(data=[ModelCard(id=self.stand_in.model)]).model_dump())

    async def perf_metrics(self):
        return JSONResponse(content=self.stand_in.drain_perf_metrics())

    def _submit(self, request, ids: list[int], max_tokens, top_logprobs: int) -> list[tuple[Output, asyncio.Queue]]:
        """Queue an engine request per choice (n); what the engine refuses raises here, before any is queued or any
        answer started (HTTP 400)."""
        loop, submitted = asyncio.get_running_loop(), []
        for choice in range(request.n or 1):
            queue: asyncio.Queue = asyncio.Queue()
            job = self.stand_in.job(ids, request, max_tokens, top_logprobs, bool(request.stream), loop, queue, choice)
            job.include_stop = request.include_stop_str_in_output
            submitted.append((Output(self.stand_in, job), queue))
        for output, _ in submitted:
            self.stand_in.scheduler.submit(output.job)
        return submitted

    async def _deliveries(self, raw: Request, output: Output, queue: asyncio.Queue):
        """(new text, new tokens) of each delivery until the request is done; ends the request if the client goes
        away (openai_server.await_disconnected aborts it)."""
        first_token_s = None
        try:
            while not output.done:
                try:
                    tokens, final, error, reason = await asyncio.wait_for(queue.get(), timeout=0.5)
                except asyncio.TimeoutError:
                    if await raw.is_disconnected():
                        return
                    continue
                if error is not None:
                    raise RuntimeError(error)
                first_token_s = first_token_s or time.monotonic()
                yield output.take(tokens, final, reason)
        finally:
            output.job.stop_requested = output.job.stop_requested or not output.done
        self.stand_in.record_perf(output.job, raw.state.server_arrival_time, first_token_s)

    async def _merged(self, raw: Request, submitted: list[tuple[Output, asyncio.Queue]]):
        """(choice, new text, new tokens) of every choice's deliveries, as they come (the LLM API's one result of n
        outputs, each with its own text_diff)."""
        merged: asyncio.Queue = asyncio.Queue()

        async def pump(choice: int, output: Output, queue: asyncio.Queue) -> None:
            try:
                async for delivery in self._deliveries(raw, output, queue):
                    await merged.put((choice, delivery))
                await merged.put((choice, None))
            except Exception as exc:  # noqa: BLE001 - raised again where the stream is read
                await merged.put((choice, exc))

        pumps = [asyncio.create_task(pump(i, output, queue)) for i, (output, queue) in enumerate(submitted)]
        try:
            for _ in range(len(pumps)):
                while True:
                    choice, delivery = await merged.get()
                    if delivery is None:
                        break
                    if isinstance(delivery, Exception):
                        raise delivery
                    yield (choice, *delivery)
        finally:
            for task in pumps:
                task.cancel()

    async def _unary(self, raw: Request, submitted: list[tuple[Output, asyncio.Queue]]) -> list[Output]:
        async for _ in self._merged(raw, submitted):
            pass
        return [output for output, _ in submitted]

    def _usage(self, outputs: list[Output], prompt: int) -> UsageInfo:
        """The prompt once, the tokens of every choice (openai_server: completion_tokens sums the outputs)."""
        generated, kv = sum(len(output.tokens) for output in outputs), outputs[0].job.kv
        return UsageInfo(
            prompt_tokens=prompt,
            completion_tokens=generated,
            total_tokens=prompt + generated,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=(kv.reused * self.stand_in.prefix.block) if kv else 0),
        )

    async def completions(self, request: CompletionRequest, raw: Request):
        try:
            _refuse_unimplemented(request)
            if request.echo and request.logprobs:
                raise StandInRefusal("echo with logprobs")
            ids = self.stand_in.prompt_ids(request.prompt, request.add_special_tokens)
            echoed = self._echoed(request, ids)
            submitted = self._submit(request, ids, request.max_tokens, request.logprobs or 0)
            if request.stream:
                stream = self._completion_stream(raw, request, len(ids), echoed, submitted)
                return StreamingResponse(stream, media_type="text/event-stream")
            outputs = await self._unary(raw, submitted)
            choices = []
            for index, output in enumerate(outputs):
                choice = CompletionResponseChoice(
                    index=index, text=echoed + output.text, finish_reason=output.finish_reason, stop_reason=output.stop_reason
                )
                if request.logprobs:
                    choice.logprobs = self.stand_in.completion_logprobs(output.tokens, output.tops(0, len(output.tokens)), 0)
                choices.append(choice)
            body = CompletionResponse(model=request.model, choices=choices, usage=self._usage(outputs, len(ids)))
            return JSONResponse(content=body.model_dump())
        except Exception as exc:  # noqa: BLE001 - openai_completion answers every failure the same way
            return _error(str(exc))

    def _echoed(self, request: CompletionRequest, ids: list[int]) -> str:
        """What echo puts before the completion (completion_response_post_processor, completion_stream_post_processor's
        first chunk): the prompt as sent, its text where it was text."""
        if not request.echo:
            return ""
        prompt = request.prompt[0] if isinstance(request.prompt, list) and len(request.prompt) == 1 else request.prompt
        return prompt if isinstance(prompt, str) else self.stand_in.tokenizer.decode(ids)

    async def _completion_stream(self, raw: Request, request: CompletionRequest, prompt: int, echoed: str, submitted):
        """completion_stream_post_processor: a chunk per delivery of each choice (its first after the echoed prompt),
        indexed by the choice, nulls written; the usage chunk; [DONE]."""
        outputs = [output for output, _ in submitted]
        stream_id, created = f"cmpl-{outputs[0].job.request_id}", int(time.time())  # the engine request's id
        include_usage, continuous = _usage_options(request.stream_options)
        started: set[int] = set()
        async for index, new_text, new_tokens in self._merged(raw, submitted):
            output = outputs[index]
            choice = CompletionResponseStreamChoice(
                index=index,
                text=("" if index in started else echoed) + new_text,
                finish_reason=output.finish_reason if output.done else None,
                stop_reason=output.stop_reason,
            )
            started.add(index)
            if request.logprobs:
                start = len(output.tokens) - len(new_tokens)
                offset = len(output.text) - len(new_text)
                choice.logprobs = self.stand_in.completion_logprobs(new_tokens, output.tops(start, len(new_tokens)), offset)
            chunk = CompletionStreamResponse(model=request.model, choices=[choice], id=stream_id, created=created)
            if continuous:
                chunk.usage = self._usage(outputs, prompt)
            yield f"data: {chunk.model_dump_json(exclude_unset=False)}\n\n"
        if include_usage and all(output.done for output in outputs):  # a last chunk with no choices, then [DONE]
            final = CompletionStreamResponse(
                choices=[], model=request.model, usage=self._usage(outputs, prompt), id=stream_id, created=created
            )
            yield f"data: {final.model_dump_json()}\n\n"
        yield "data: [DONE]\n\n"

    async def chat(self, request: ChatCompletionRequest, raw: Request):
        try:
            _refuse_unimplemented(request)
            _refuse_media(request.messages)
            if request.echo:  # chat's echo (the last message of the assistant's role first) is not the completions' one
                raise StandInRefusal("echo on chat")
            rendered = self.stand_in.tokenizer.apply_chat_template(
                request.messages,
                tokenize=False,
                add_generation_prompt=request.add_generation_prompt,
                **(request.chat_template_kwargs or {}),
            )
            ids = self.stand_in.tokenizer.encode(rendered, add_special_tokens=request.add_special_tokens)
            top = (request.top_logprobs or 1) if request.logprobs else 0
            submitted = self._submit(request, ids, request.max_completion_tokens, top)
            if request.stream:
                return StreamingResponse(self._chat_stream(raw, request, len(ids), submitted), media_type="text/event-stream")
            outputs = await self._unary(raw, submitted)
            choices = [self._chat_choice(request, index, output) for index, output in enumerate(outputs)]
            body = ChatCompletionResponse(model=request.model, choices=choices, usage=self._usage(outputs, len(ids)))
            return JSONResponse(content=body.model_dump())
        except Exception as exc:  # noqa: BLE001 - openai_chat answers every failure the same way
            return _error(str(exc))

    def _chat_choice(self, request: ChatCompletionRequest, index: int, output: Output) -> ChatCompletionResponseChoice:
        choice = ChatCompletionResponseChoice(
            index=index,
            message=ChatMessage(role="assistant", content=output.text, reasoning_content=""),
            stop_reason=output.stop_reason,
            finish_reason=output.finish_reason,
        )
        if request.logprobs:
            choice.logprobs = self.stand_in.chat_logprobs(
                output.tokens, output.tops(0, len(output.tokens)), bool(request.top_logprobs)
            )
        return choice

    async def _chat_stream(self, raw: Request, request: ChatCompletionRequest, prompt: int, submitted):
        """chat_stream_post_processor: a role chunk per choice, a chunk per delivery of each choice (nulls left out),
        the usage chunk; [DONE]."""
        outputs = [output for output, _ in submitted]
        stream_id, created = f"chatcmpl-{outputs[0].job.request_id}", int(time.time())
        include_usage, continuous = _usage_options(request.stream_options)
        for index in range(len(outputs)):
            first = ChatCompletionStreamResponse(
                choices=[ChatCompletionResponseStreamChoice(index=index, delta=DeltaMessage(role="assistant"))],
                model=request.model,
                id=stream_id,
                created=created,
            )
            if continuous:
                first.usage = UsageInfo(
                    prompt_tokens=prompt, total_tokens=prompt, completion_tokens=0, prompt_tokens_details=PromptTokensDetails()
                )
            yield f"data: {first.model_dump_json(exclude_none=True)} \n\n"
        async for index, new_text, new_tokens in self._merged(raw, submitted):
            output = outputs[index]
            if not (new_text or new_tokens or output.done):
                continue
            choice = ChatCompletionResponseStreamChoice(
                index=index, delta=DeltaMessage(content=new_text, reasoning_content=""), stop_reason=output.stop_reason
            )
            if request.logprobs:
                start = len(output.tokens) - len(new_tokens)
                choice.logprobs = self.stand_in.chat_logprobs(
                    new_tokens, output.tops(start, len(new_tokens)), bool(request.top_logprobs)
                )
            if output.done:
                choice.finish_reason = output.finish_reason
            chunk = ChatCompletionStreamResponse(choices=[choice], model=request.model, id=stream_id, created=created)
            if continuous:
                chunk.usage = self._usage(outputs, prompt)
            yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"
        if include_usage and all(output.done for output in outputs):  # a last chunk with no choices, then [DONE]
            final = ChatCompletionStreamResponse(
                choices=[], model=request.model, usage=self._usage(outputs, prompt), id=stream_id, created=created
            )
            yield f"data: {final.model_dump_json()}\n\n"
        yield "data: [DONE]\n\n"


def build_app(stand_in: StandIn, mark: str) -> FastAPI:
    app = FastAPI()
    routes = Routes(stand_in)

    @app.exception_handler(RequestValidationError)
    async def validation_exception_handler(_, exc):
        return JSONResponse(status_code=400, content={"error": str(exc)})

    @app.middleware("http")
    async def stamp(request: Request, call_next):
        request.state.server_arrival_time = time.monotonic()  # ServerArrivalTimeMiddleware, steady clock seconds
        response = await call_next(request)
        response.headers[STAND_IN_HEADER] = mark
        return response

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/version")
    async def version():
        return JSONResponse(content={"version": VERSION})

    app.get("/v1/models")(routes.models)
    app.get("/perf_metrics")(routes.perf_metrics)
    app.post("/v1/completions")(routes.completions)
    app.post("/v1/chat/completions")(routes.chat)
    return app


def _options(args) -> dict:
    """trtllm-serve's command line, then --extra_llm_api_options (a YAML of LLM API arguments) over it."""
    options = {
        "served_name": args.served_name,
        "max_batch_size": args.max_batch_size,
        "max_seq_len": args.max_seq_len,
        "max_num_tokens": args.max_num_tokens,
    }
    if args.extra_llm_api_options:
        with open(args.extra_llm_api_options) as fh:
            options.update(yaml.safe_load(fh) or {})
    return options


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="pytest-triton-llm's stand-in of trtllm-serve (reference model, CPU)")
    parser.add_argument("model", help="a Hugging Face checkpoint directory")
    parser.add_argument("--served-name", required=True, help="the id /v1/models lists (trtllm-serve: the directory's name)")
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max_batch_size", type=int, default=8)
    parser.add_argument("--max_seq_len", type=int, default=2048)
    parser.add_argument("--max_num_tokens", type=int, default=8192)
    parser.add_argument("--extra_llm_api_options", default=None)
    parser.add_argument("--stand-in-mark", required=True, help="the value of the stand-in header (the project's version)")
    args = parser.parse_args(argv)
    stand_in = StandIn(args.model, args.tokenizer or args.model, _options(args))
    print(f"reference trtllm-serve stand-in: {args.served_name} on {stand_in.engine.describe()}", flush=True)
    uvicorn.run(build_app(stand_in, args.stand_in_mark), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
