"""trtllm-serve's OpenAI request and response models as the stand-in needs them, written from TensorRT-LLM's
tensorrt_llm/serve/openai_protocol.py (main, 2026: 0076e939; the sources of openai_families.toml [families.trtllm-serve]).

The request models keep every field upstream's have, with its default, and upstream's extra="forbid": an unknown
field is refused, a field of the wrong type too, with pydantic's own words (the server answers both with HTTP 400
{"error": str(RequestValidationError)}). Nested types the stand-in never reads (tools, disaggregated parameters, ...)
are taken as plain JSON values; response_format is upstream's ResponseFormat, and guide_of is
_response_format_to_guided_decoding_params (without the reasoning parsers' structural tags). The response models
have upstream's fields in upstream's order, so that model_dump() and model_dump_json() write what upstream writes.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OpenAIBaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormat(OpenAIBaseModel):
    type: Literal["text", "json", "json_schema", "json_object", "regex", "ebnf", "structural_tag"]
    schema_: Optional[dict] = Field(default=None, alias="schema")  # `schema` shadows BaseModel's
    json_schema: Optional[dict] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    format: Optional[dict] = None  # xgrammar.structural_tag.Format upstream


def _required(response_format: ResponseFormat, field: str, value):
    if value is None:
        raise ValueError(
            f"response_format.{field} is required for response_format.type == {response_format.type!r}, but got None."
        )
    return value


def guide_of(response_format: Optional[ResponseFormat]) -> Optional[tuple[str, str]]:
    """The (guide type, guide) a response_format asks for (guided.GUIDE_TYPES), None for none."""
    if response_format is None or response_format.type == "text":
        return None
    kind = response_format.type
    if kind == "json":
        return "json_schema", json.dumps(_required(response_format, "schema", response_format.schema_))
    if kind == "json_schema":
        schema = _required(response_format, "json_schema", response_format.json_schema)
        return "json_schema", json.dumps(schema.get("schema", schema))  # OpenAI's wrapper, or the schema itself
    if kind == "json_object":
        return "json", ""
    if kind == "regex":
        return "regex", _required(response_format, "regex", response_format.regex)
    if kind == "ebnf":
        return "ebnf_grammar", _required(response_format, "ebnf", response_format.ebnf)
    return "structural_tag", response_format.model_dump_json(by_alias=True, exclude_none=True)


class StreamOptions(OpenAIBaseModel):
    include_usage: Optional[bool] = True
    continuous_usage_stats: Optional[bool] = False


class PromptTokensDetails(OpenAIBaseModel):
    cached_tokens: int = 0


class UsageInfo(OpenAIBaseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: Optional[int] = 0
    prompt_tokens_details: Optional[PromptTokensDetails] = None


class ModelCard(OpenAIBaseModel):
    id: str
    object: str = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "tensorrt_llm"


class ModelList(OpenAIBaseModel):
    object: str = "list"
    data: List[ModelCard] = Field(default_factory=list)


class ErrorResponse(OpenAIBaseModel):
    object: str = "error"
    message: str
    type: str
    param: Optional[str] = None
    code: int


# -- /v1/completions ------------------------------------------------------------------------
class CompletionLogProbs(OpenAIBaseModel):
    text_offset: List[int] = Field(default_factory=list)
    token_logprobs: List[Optional[float]] = Field(default_factory=list)
    tokens: List[str] = Field(default_factory=list)
    top_logprobs: List[Optional[Dict[str, float]]] = Field(default_factory=list)


class CompletionResponseChoice(OpenAIBaseModel):
    index: int
    text: str
    token_ids: Optional[List[int]] = None
    logprobs: Optional[CompletionLogProbs] = None
    context_logits: Optional[Union[List[float], List[List[float]]]] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None
    disaggregated_params: Optional[Dict[str, Any]] = None
    avg_decoded_tokens_per_iter: Optional[float] = None


class CompletionResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: List[CompletionResponseChoice]
    usage: UsageInfo
    prompt_token_ids: Optional[Union[List[List[int]], List[int]]] = None


class CompletionResponseStreamChoice(OpenAIBaseModel):
    index: int
    text: str
    token_ids: Optional[List[int]] = None
    logprobs: Optional[CompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None
    avg_decoded_tokens_per_iter: Optional[float] = None


class CompletionStreamResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: List[CompletionResponseStreamChoice]
    usage: Optional[UsageInfo] = None


def _check_logprobs_limit(name: str, value) -> None:
    # upstream's check_logprobs_limit bounds the count; its limit was not read, so only the sign is checked here
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")


class CompletionRequest(OpenAIBaseModel):
    model: str
    prompt: Union[List[int], List[List[int]], str, List[str]]
    best_of: Optional[int] = None
    echo: Optional[bool] = False
    frequency_penalty: Optional[float] = 0.0
    logit_bias: Optional[Dict[str, float]] = None
    logprobs: Optional[int] = None
    max_tokens: Optional[int] = None
    n: int = 1
    presence_penalty: Optional[float] = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = Field(default_factory=list)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    suffix: Optional[str] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    user: Optional[str] = None
    lora_request: Optional[Any] = None
    prompt_ignore_length: Optional[int] = 0
    use_beam_search: bool = False
    top_k: int = 0
    top_p_min: float = 0.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    length_penalty: Optional[float] = None
    early_stopping: Optional[Any] = None
    stop_token_ids: Optional[List[int]] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Optional[int] = Field(default=None, ge=1)
    return_context_logits: bool = False
    detokenize: bool = True
    thinking_token_budget: Optional[int] = None
    add_special_tokens: bool = True
    response_format: Optional[ResponseFormat] = None
    disaggregated_params: Optional[Any] = None
    priority: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    conversation_params: Optional[Any] = None

    @model_validator(mode="before")
    @classmethod
    def check_logprobs(cls, data):
        if isinstance(data, dict):
            _check_logprobs_limit("logprobs", data.get("logprobs"))
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data):
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise ValueError("Stream options can only be defined when stream is true.")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_suffix(cls, data):
        if isinstance(data, dict) and data.get("suffix"):
            raise ValueError("suffix is not supported")
        return data


# -- /v1/chat/completions --------------------------------------------------------------------
class ChatMessage(OpenAIBaseModel):
    role: str
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    reasoning: Optional[str] = None
    tool_calls: List[Any] = Field(default_factory=list)


class ChatCompletionLogProb(OpenAIBaseModel):
    token: str
    logprob: float = -9999.0
    bytes: Optional[List[int]] = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: Optional[List[ChatCompletionLogProb]] = None


class ChatCompletionLogProbs(OpenAIBaseModel):
    content: Optional[List[ChatCompletionLogProbsContent]] = None


class ChatCompletionResponseChoice(OpenAIBaseModel):
    index: int
    message: ChatMessage
    logprobs: Optional[ChatCompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None
    mm_embedding_handle: Optional[Dict[str, Any]] = None
    disaggregated_params: Optional[Dict[str, Any]] = None
    avg_decoded_tokens_per_iter: Optional[float] = None


class ChatCompletionResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: List[ChatCompletionResponseChoice]
    usage: UsageInfo
    prompt_token_ids: Optional[List[int]] = None
    prompt_token_ids_b64: Optional[str] = None


class DeltaMessage(OpenAIBaseModel):
    role: Optional[str] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    reasoning: Optional[str] = None
    tool_calls: Optional[List[Any]] = None


class ChatCompletionResponseStreamChoice(OpenAIBaseModel):
    index: int
    delta: DeltaMessage
    logprobs: Optional[ChatCompletionLogProbs] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None
    avg_decoded_tokens_per_iter: Optional[float] = None


class ChatCompletionStreamResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: List[ChatCompletionResponseStreamChoice]
    usage: Optional[UsageInfo] = None


class ChatCompletionRequest(OpenAIBaseModel):
    messages: List[Dict[str, Any]]
    prompt_token_ids: Optional[List[int]] = None
    prompt_token_ids_b64: Optional[str] = None
    model: str
    frequency_penalty: Optional[float] = 0.0
    logit_bias: Optional[Dict[str, float]] = None
    logprobs: Optional[bool] = False
    top_logprobs: Optional[int] = 0
    max_completion_tokens: Optional[int] = Field(default=None, validation_alias="max_tokens")
    n: int = 1
    presence_penalty: Optional[float] = 0.0
    response_format: Optional[ResponseFormat] = None
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = Field(default_factory=list)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    tools: Optional[List[Any]] = None
    tool_choice: Optional[Any] = "none"
    parallel_tool_calls: Optional[bool] = None
    user: Optional[str] = None
    reasoning_effort: Optional[str] = "low"
    thinking: Optional[Any] = None
    thinking_token_budget: Optional[int] = None
    prompt_ignore_length: Optional[int] = 0
    best_of: Optional[int] = None
    use_beam_search: bool = False
    top_k: int = 0
    top_p_min: float = 0.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    length_penalty: Optional[float] = None
    early_stopping: Optional[Any] = None
    stop_token_ids: Optional[List[int]] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Optional[int] = Field(default=None, ge=1)
    lora_request: Optional[Any] = None
    echo: bool = False
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    documents: Optional[List[Dict[str, str]]] = None
    chat_template: Optional[str] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    disaggregated_params: Optional[Any] = None
    cache_salt: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, values):
        if isinstance(values, dict) and values.get("stream_options") is not None and not values.get("stream"):
            raise ValueError("stream_options can only be set if stream is true")
        return values

    @model_validator(mode="before")
    @classmethod
    def check_tool_choice(cls, data):
        if isinstance(data, dict) and data.get("tool_choice", "none") not in ("none", "auto") and not data.get("tools"):
            raise ValueError("When using `tool_choice`, `tools` must be set.")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_logprobs(cls, data):
        if isinstance(data, dict) and (top_logprobs := data.get("top_logprobs")) is not None:
            _check_logprobs_limit("top_logprobs", top_logprobs)
            if not data.get("logprobs"):
                raise ValueError("logprobs must be true when using top_logprobs")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_suffix(cls, data):
        if isinstance(data, dict) and data.get("suffix"):
            raise ValueError("suffix is not supported")
        return data
