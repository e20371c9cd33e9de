"""The OpenAI-compatible endpoint under test (--openai-url): its options, and the served model and server family found
from /v1/models once.

Not a Triton runtime (runtimes/): the migration gate serves a Triton deployment and talks to this endpoint in one
session, so the endpoint stands beside whichever runtime serves Triton.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import TritonLLMError
from ..host.hardware import REMOTE, hardware
from ..stack.lock import Engine
from .client import STAND_IN_HEADER, OpenAIEndpoint, OpenAIRequestError, OpenAIURLError
from .contract import ErrorCase, Family, load_families
from ..triton.tokenizer_source import TokenizerNotFound, load_named_tokenizer
from ..common.usage import OptionError, header_pairs


class OpenAITargetError(TritonLLMError, RuntimeError):
    """The endpoint cannot be used as asked (unreachable, no such model, an unknown family): one line, what to fix."""


@dataclass(frozen=True)
class OpenAIOptions:
    """--openai-url and what goes with it."""

    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # values may be secrets: never shown
    ca_file: str | None = None
    model: str | None = None  # --openai-model; None: the one /v1/models lists
    family: str | None = None  # --openai-family; None: recognised by /v1/models' owned_by
    engine: str | None = None  # --openai-engine: the lock's engine whose checkpoint it serves ([accuracy], limits)
    tokenizer: str | None = None  # --tokenizer; None: the served model's id names it


def openai_options(url, headers: list[str], ca_file, model, family, engine=None, tokenizer=None) -> OpenAIOptions | None:
    """The options, checked (OptionError names the option to fix); None without --openai-url. Whether the lock has
    --openai-engine is the session's to check (it loads the lock)."""
    if url is None:
        if headers or ca_file or model or family or engine:
            raise OptionError(
                "--openai-header, --openai-ca-file, --openai-model, --openai-family and --openai-engine apply to "
                "--openai-url; give one"
            )
        return None
    try:
        OpenAIEndpoint(url)
    except OpenAIURLError as exc:
        raise OptionError(str(exc)) from None
    pairs = header_pairs(headers, "--openai-header")
    if ca_file is not None and not Path(ca_file).is_file():
        raise OptionError(f"--openai-ca-file {ca_file}: no such file")
    families = load_families()
    if family is not None and family not in families:
        raise OptionError(f"--openai-family {family!r}: not a family of openai_families.toml ({', '.join(families)})")
    return OpenAIOptions(url.rstrip("/"), pairs, ca_file, model, family, engine, tokenizer)


# keys of a Hugging Face config.json that only image-text models have (LLaVA, Qwen2-VL, Mllama, Gemma 3, Phi-3-vision)
IMAGE_CONFIG_KEYS = {"vision_config", "image_token_index", "image_token_id", "img_processor"}


class OpenAITarget:
    """One endpoint, its served model and its family's contract (openai_families.toml)."""

    def __init__(self, options: OpenAIOptions, timeout_s: float = 300.0, engine: Engine | None = None):
        self.options = options
        self.engine = engine  # --openai-engine's lock entry, or None
        self._tokenizer = None
        self.endpoint = OpenAIEndpoint(options.url, dict(options.headers), options.ca_file, timeout_s)
        try:
            listed, headers = self.endpoint.listing()
        except OpenAIRequestError as exc:
            raise OpenAITargetError(f"--openai-url {options.url}: GET /v1/models answered HTTP {exc.status}") from None
        except OSError as exc:
            raise OpenAITargetError(f"--openai-url {options.url}: GET /v1/models failed: {exc}") from None
        ids = [str(m.get("id")) for m in listed]
        if options.model is not None:
            if options.model not in ids:
                raise OpenAITargetError(f"--openai-model {options.model!r}: {options.url}/models lists {ids}")
            self.model = options.model
        elif len(ids) == 1:
            self.model = ids[0]
        else:
            raise OpenAITargetError(f"{options.url}/models lists {len(ids)} models {ids}: pick one with --openai-model")
        self.stand_in: str | None = headers.get(STAND_IN_HEADER)  # the project's version, when its stand-in answers
        families = load_families()
        owned_by = [m.get("owned_by") for m in listed if str(m.get("id")) == self.model][0]
        self.family_name = options.family or self._recognised(owned_by, families)
        self.family: Family = families[self.family_name]

    def _recognised(self, owned_by, families: dict[str, Family]) -> str:
        matches = [n for n, f in families.items() if f.owned_by is not None and owned_by in f.owned_by.values]
        if len(matches) != 1:
            raise OpenAITargetError(
                f"{self.options.url}: /v1/models says owned_by {owned_by!r}, which no single family of "
                f"openai_families.toml states: pass --openai-family ({', '.join(families)})"
            )
        return matches[0]

    def describe(self) -> str:
        how = "--openai-family" if self.options.family else "owned_by in /v1/models"
        served = f"; served by the project's stand-in {self.stand_in}, not by {self.family_name}" if self.stand_in else ""
        return f"{self.options.url}, model {self.model!r}, family {self.family_name} ({self.family.title}; by {how}){served}"

    @property
    def deployment(self) -> str:
        """What serves, as perf budgets and reports name it: "openai:<family>", with ":stand-in" where the project's
        stand-in answers (its figures never stand for the real server's)."""
        return f"openai:{self.family_name}" + (":stand-in" if self.stand_in else "")

    @property
    def tokenizer(self):
        """The served model's tokenizer, loaded once: --tokenizer, else the model's id (a directory, a GGUF file as
        llama.cpp's server lists it, or a Hugging Face id)."""
        if self._tokenizer is None:
            given = self.options.tokenizer
            try:
                self._tokenizer = load_named_tokenizer(given or self.model, "--tokenizer" if given else "the model id")
            except TokenizerNotFound as exc:
                raise OpenAITargetError(f"{exc}{'' if given else '; pass --tokenizer DIR_OR_HF_ID'}") from None
        return self._tokenizer

    def takes_images(self) -> bool | None:
        """Whether the served model reads images: its Hugging Face config (in --tokenizer's directory, else the model
        id's) names a vision tower or an image token, as image-text checkpoints' configs do; None where none is at hand."""
        for where in (self.options.tokenizer, self.model):
            config = Path(where).expanduser() / "config.json" if where else None
            if config is not None and config.is_file():
                return bool(set(json.loads(config.read_text())) & IMAGE_CONFIG_KEYS)
        return None

    @property
    def hardware(self) -> str:
        """What serves, as perf budgets match it: this host's GPU or "cpu" for an endpoint on a loopback address (its
        server runs on this host; on a host of several GPUs the first stands for them), else REMOTE."""
        host = self.endpoint.host
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name other than localhost
            loopback = False
        return hardware() if loopback else REMOTE

    def greedy(self, **body) -> dict:
        """A request body that decodes greedily on this family: temperature 0 and the family's own greedy fields."""
        extra = self.family.greedy.fields if self.family.greedy is not None else {}
        return {"model": self.model, "temperature": 0.0, **extra, **body}

    def completion(self, prompt: str, max_tokens: int, **body) -> dict:
        return self.greedy(prompt=prompt, max_tokens=max_tokens, **body)

    def chat(self, message: str, max_tokens: int, **body) -> dict:
        """`message` as the one user message, unless `body` gives its own `messages`."""
        body.setdefault("messages", [{"role": "user", "content": message}])
        return self.greedy(max_tokens=max_tokens, **body)

    def lacks(self, name: str) -> str | None:
        """Why a check that needs request field `name` does not apply to this family, or None."""
        return None if self.family.supports(name) else self.family.why_not(name)

    @property
    def max_tokens_finish_reason(self) -> str | None:
        """The finish_reason a completion cut by max_tokens has on this family (None: the contract does not know)."""
        values = self.family.response.max_tokens_finish_reason.values
        return None if values == ("unknown",) else values[0]

    def error_case(self, *kinds: str) -> ErrorCase | None:
        """The family's error case of the first of `kinds` it states (a narrower kind first), or None."""
        for kind in kinds:
            for error in self.family.errors:
                if error.kind == kind:
                    return error
        return None
