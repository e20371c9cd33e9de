"""The OpenAI-compatible server families (openai_families.toml, beside this module): what each one's /v1 request and response
contract is, every fact cited to the upstream source it was read from. One job: read and check the file.

A field's `supported` says what the server does with it: `yes` (honoured), `partial` (honoured with limits, the
note says which), `ignored` (accepted, no effect), `refused` (the request is rejected), `unknown` (the sources read
are silent; the note says why). A default is the JSON literal the source states, `required`, `absent` (the request
type has no such field) or `unknown`. A cite is `<source id>: <symbol>`, several joined by `; `.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..common.schema import SchemaError, build, load_toml

FAMILIES_FILE = Path(__file__).with_name("openai_families.toml")
Support = Literal["yes", "partial", "ignored", "refused", "unknown"]
# what every family must state, so that a suite can ask any family the same questions
REQUIRED_ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
REQUIRED_FIELDS = (
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stream",
    "stream_options.include_usage",
    "logprobs",
    "top_logprobs",
    "n",
    "ignore_eos",
    "min_tokens",
)
DEFAULT_WORDS = ("required", "absent", "unknown")
NEEDS_NOTE = ("partial", "ignored", "unknown")
# a GitHub source is pinned: blob/tree at a 40-hex commit or a v-tag, or a pull request / issue number
_GITHUB = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/((blob|tree)/([0-9a-f]{40}|v[\w.-]+)/|(pull|issues)/\d+$)")


@dataclass(frozen=True)
class Source:
    url: str
    read: str  # what was read there, and what the version is known to be


@dataclass(frozen=True)
class Before:
    """A field as the family's older stored version (`before_version`) had it."""

    supported: Support
    default: str
    cite: str
    note: str = ""


@dataclass(frozen=True)
class Field:
    supported: Support
    default: str  # on /v1/completions, or on the one endpoint that has the field
    cite: str
    chat_default: str = ""  # on /v1/chat/completions, where it differs
    note: str = ""
    before: Before | None = None
    # what the server does with a request that leaves the field out, where the default alone does not say it: a number,
    # "none" (no limit but the model's window) or "server" (a server option decides); "" where the sources are silent
    when_omitted: str = ""


@dataclass(frozen=True)
class Endpoint:
    method: Literal["GET", "POST"]
    cite: str
    note: str = ""


@dataclass(frozen=True)
class Fact:
    values: tuple[str, ...]  # ("unknown",) where the sources read are silent
    cite: str
    note: str = ""


@dataclass(frozen=True)
class Greedy:
    fields: dict[str, float]
    cite: str
    note: str = ""


@dataclass(frozen=True)
class Response:
    text: Fact  # where the generated text is
    finish_reasons: Fact
    usage: Fact
    stream_usage: Fact  # how a streamed response reports usage (stream_options.include_usage)
    completion_logprobs: Fact  # choices[].logprobs of /v1/completions
    chat_logprobs: Fact  # choices[].logprobs of /v1/chat/completions
    max_tokens_finish_reason: Fact  # the finish_reason of a completion that max_tokens cut short


@dataclass(frozen=True)
class ErrorCase:
    case: str
    status: str  # the HTTP status, or "unknown"
    body: str  # the JSON body's shape, or "unknown"
    cite: str
    note: str = ""
    kind: str = ""  # what a suite asks for: "invalid_body" (a body that fails the request model), "not_json",
    # "unknown_field" (a field the request type lacks), "max_tokens_beyond_context", "media_part_to_a_text_model"
    text: str = ""  # the exact plain-text body, where the server answers this case without JSON
    message: str = ""  # words the error's message holds, where the sources state them


@dataclass(frozen=True)
class Guides:
    """How the family's response_format asks for each guide kind (verdicts.guided.KINDS): the field's JSON with
    "$schema" for the schema as it is and "$text" for the guide as a JSON string; the endpoints that take it; a
    response_format the family does not take, and the HTTP status that answers it."""

    bodies: dict[str, str]
    endpoints: tuple[str, ...]
    unknown: str
    unknown_status: str
    cite: str
    note: str = ""

    def body(self, kind: str, guide: str) -> dict:
        """The response_format for (`kind`, `guide`): KeyError where the family takes no such kind."""
        text = self.bodies[kind].replace('"$text"', json.dumps(guide)).replace("$schema", guide or "{}")
        return json.loads(text)


@dataclass(frozen=True)
class Family:
    title: str
    version: str  # which release or commit the entry speaks for
    sources: dict[str, Source]
    endpoints: dict[str, Endpoint]
    fields: dict[str, Field]
    response: Response
    errors: tuple[ErrorCase, ...]
    before_version: str = ""  # the older stored version that the fields' `before` tables describe
    note: str = ""
    # /v1/models' owned_by, where the family states one: how a served endpoint's family is recognised
    owned_by: Fact | None = None
    # request fields besides temperature 0 that make the family's decoding plain argmax (a default penalty it applies)
    greedy: Greedy | None = None
    # guided decoding: how response_format asks for each guide kind, where the family takes it
    guides: Guides | None = None

    def supports(self, name: str) -> bool:
        """Whether the family honours request field `name` as OpenAI defines it."""
        return self.fields[name].supported == "yes"

    def why_not(self, name: str) -> str:
        """Why a check that needs field `name` does not apply to this family (its contract's support and note)."""
        field = self.fields[name]
        return f"{self.title}: request field '{name}' is {field.supported} ({field.note or field.cite})"

    def __post_init__(self):
        for name, source in self.sources.items():
            if not source.url.startswith("https://") or ("github.com/" in source.url and not _GITHUB.match(source.url)):
                raise ValueError(f"source '{name}': url {source.url!r} is not an https address pinned to a commit or tag")
        missing = [e for e in REQUIRED_ENDPOINTS if e not in self.endpoints]
        if missing:
            raise ValueError(f"lists no endpoint '{missing[0]}' (every family lists {', '.join(REQUIRED_ENDPOINTS)})")
        missing = [f for f in REQUIRED_FIELDS if f not in self.fields]
        if missing:
            raise ValueError(f"lists no field '{missing[0]}' (every family lists {', '.join(REQUIRED_FIELDS)})")
        for path, endpoint in self.endpoints.items():
            self._check_cite(f"endpoint '{path}'", endpoint.cite)
        for name, field in self.fields.items():
            self._check_field(f"field '{name}'", field)
            if field.before is not None:
                if not self.before_version:
                    raise ValueError(f"field '{name}': a 'before' table needs the family's before_version")
                self._check_field(f"field '{name}.before'", field.before)
        for name in Response.__dataclass_fields__:
            fact = getattr(self.response, name)
            if not fact.values:
                raise ValueError(f"response '{name}': no values (write [\"unknown\"] where the sources are silent)")
            if fact.values == ("unknown",) and not fact.note:
                raise ValueError(f"response '{name}': 'unknown' needs a note saying why")
            self._check_cite(f"response '{name}'", fact.cite)
        if self.guides is not None:
            self._check_guides(self.guides)
        for name, fact in (("owned_by", self.owned_by), ("greedy", self.greedy)):
            if fact is not None:
                self._check_cite(name, fact.cite)
        if not self.errors:
            raise ValueError("lists no error case")
        for number, error in enumerate(self.errors, 1):
            if not (error.status.isdigit() or error.status == "unknown"):
                raise ValueError(f"error #{number}: status {error.status!r} is neither an HTTP status nor 'unknown'")
            self._check_cite(f"error #{number}", error.cite)

    def _check_field(self, what: str, field: Field | Before) -> None:
        if field.supported in NEEDS_NOTE and not field.note:
            raise ValueError(f"{what}: supported '{field.supported}' needs a note saying how")
        defaults = [("default", field.default)]
        if isinstance(field, Field) and field.chat_default:
            defaults.append(("chat_default", field.chat_default))
        for key, value in defaults:
            if value not in DEFAULT_WORDS:
                try:
                    json.loads(value)
                except ValueError:
                    raise ValueError(
                        f"{what}: {key} {value!r} is neither a JSON literal nor one of {', '.join(DEFAULT_WORDS)}"
                    ) from None
        self._check_cite(what, field.cite)

    def _check_guides(self, guides: Guides) -> None:
        self._check_cite("guides", guides.cite)
        unknown = [e for e in guides.endpoints if e not in self.endpoints]
        if unknown:
            raise ValueError(f"guides: endpoint '{unknown[0]}' is not among the family's endpoints")
        for kind in guides.bodies:
            try:
                guides.body(kind, '{"type": "object"}' if kind == "json_schema" else "x")
            except ValueError as exc:
                raise ValueError(f"guides.bodies.{kind}: not JSON once filled: {exc}") from None
        if not guides.unknown_status.isdigit():
            raise ValueError(f"guides: unknown_status {guides.unknown_status!r} is no HTTP status")

    def _check_cite(self, what: str, cite: str) -> None:
        for part in cite.split("; "):
            source, sep, symbol = part.partition(": ")
            if not sep or not symbol.strip():
                raise ValueError(f"{what}: cite {part!r} is not '<source>: <symbol>'")
            if source not in self.sources:
                raise ValueError(f"{what}: cite names no source '{source}' (sources: {', '.join(self.sources)})")


def load_families(path: Path = FAMILIES_FILE) -> dict[str, Family]:
    """Every family of `path`, checked; any problem is one SchemaError line naming the file, family and field."""
    data = load_toml(path)
    tables = data.get("families")
    if not isinstance(tables, dict) or not tables:
        raise SchemaError(f"{path}: no [families.<name>] table")
    families = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise SchemaError(f"{path}: family '{name}': expected a table, got {type(table).__name__}")
        families[name] = build(Family, table, f"{path}: family '{name}'")
    return families
