"""TensorRT-LLM engine builds rendered from a lock recipe, for the TensorRT-LLM version of an image.

The commands follow the image's version (compat.toml) and the recipe's architecture (architectures.toml: which
example folder, script and flag spelling): before 0.8 `examples/llama/build.py` (llama and mistral only); from 0.8
the architecture's `convert_checkpoint.py` (tp/pp are set there) or `quantization/quantize.py` (int4_awq, fp8), then
`trtllm-build`, whose sequence flag became --max_seq_len in 0.11 and whose paged KV cache flag became
--kv_cache_type paged in 0.13. Every value is passed explicitly: defaults drifted between versions.
A dummy-weight engine has no checkpoint to convert: `trtllm-build --model_config` builds random weights from the
PretrainedConfig the builder writes into the work directory (dummy.py).
Paths are the build container's (BuildPaths); unit tests pin the commands per version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ...compat import ImageEntry, load_compat
from ...lock import LOGITS_GATHERING, Engine
from ....common.schema import SchemaError, load_toml
from ....common.schema import build as build_table
from .dummy import MODEL_CONFIG

ARCHITECTURES_FILE = Path(str(resources.files(__package__) / "architectures.toml"))


class UnsupportedRecipe(ValueError):
    """The recipe asks for something the image's TensorRT-LLM cannot build."""


@dataclass(frozen=True)
class BuildPaths:
    examples: str  # TensorRT-LLM's examples/ in the container (/app/examples, or a mounted backend checkout)
    checkpoint: str = "/checkpoint"  # the Hugging Face checkpoint, mounted read-only
    work: str = "/work"  # the converted or quantized TensorRT-LLM checkpoint (a dummy engine's PretrainedConfig)
    output: str = "/engine"  # the engine, published into the engine cache
    python: str = "python3"  # runs the example scripts: the image's, or this interpreter in a local build


@dataclass(frozen=True)
class Example:
    """How one TensorRT-LLM version's example converts an architecture's checkpoint (an architectures.toml entry)."""

    since: str  # the first TensorRT-LLM version (major.minor) it holds for, until the architecture's next entry
    folder: str  # under examples/
    script: str  # "build.py" (before 0.8) or "convert_checkpoint.py"
    flags: dict[str, str] = field(default_factory=dict)  # the script's spelling of model, output, dtype, tp[, pp]
    extra: tuple[str, ...] = ()  # given first, always
    pipeline_parallel: bool = True  # false: pp_size > 1 is refused


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


@lru_cache(maxsize=1)
def load_architectures(path: Path = ARCHITECTURES_FILE) -> dict[str, tuple[Example, ...]]:
    """Each architecture's examples, oldest first; a SchemaError names the entry and field at fault."""
    examples = {}
    for name, entries in load_toml(path).items():
        examples[name] = tuple(build_table(Example, e, f"{path.name}: {name}[{i}]") for i, e in enumerate(entries))
        for i, example in enumerate(examples[name]):
            missing = {"model", "output", "dtype", "tp"} - set(example.flags) if example.script != "build.py" else set()
            if missing:
                raise SchemaError(f"{path.name}: {name}[{i}]: field 'flags.{sorted(missing)[0]}': required for {example.script}")
    return examples


def _example(engine: Engine, entry: ImageEntry) -> Example:
    """The example that converts `engine`'s architecture in `entry`'s TensorRT-LLM, or why there is none."""
    examples = load_architectures()[engine.architecture]
    known = [e for e in examples if _version(e.since) <= _version(entry.tensorrt_llm)]
    if not known:
        since = _version(examples[0].since)
        first = next((i for i in load_compat().images.values() if _version(i.tensorrt_llm) >= since), None)
        raise UnsupportedRecipe(
            f"architecture {engine.architecture!r}: TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) has no example that "
            f"converts it; the first image that has one is {first.tag if first else 'none listed'} "
            f"(TensorRT-LLM {examples[0].since})"
        )
    example = known[-1]
    if engine.pp_size > 1 and not example.pipeline_parallel:
        raise UnsupportedRecipe(
            f"architecture {engine.architecture!r} cannot be pipeline parallel in TensorRT-LLM {entry.tensorrt_llm} "
            f"(image {entry.tag}, examples/{example.folder}/{example.script}): set pp_size = 1"
        )
    return example


def trtllm_build_options(engine: Engine, entry: ImageEntry) -> list[str]:
    """Flags for `trtllm-build --checkpoint_dir ... --output_dir ...` as `entry`'s TensorRT-LLM names them."""
    seq_flag, kv_flag = entry.seq_len_flag, entry.kv_cache_flag
    seq_len = engine.max_output_len if seq_flag == "max_output_len" else engine.max_input_len + engine.max_output_len
    options = [
        "--max_batch_size",
        str(engine.max_batch_size),
        "--max_input_len",
        str(engine.max_input_len),
        f"--{seq_flag}",
        str(seq_len),
        "--gpt_attention_plugin",
        engine.dtype,
        "--gemm_plugin",
        engine.dtype,
        "--remove_input_padding",
        "enable",
        "--context_fmha",
        "enable",
        *(["--kv_cache_type", "paged"] if kv_flag == "kv_cache_type" else ["--paged_kv_cache", "enable"]),
    ]
    if engine.lora is not None:
        if _version(entry.tensorrt_llm) < (0, 9):
            raise UnsupportedRecipe(
                f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) cannot build LoRA into llama engines "
                "with target modules and a max rank (trtllm-build has them from 0.9, image 24.04)"
            )
        options += [
            "--lora_plugin",
            engine.dtype,
            "--lora_target_modules",
            *engine.lora.target_modules,
            "--max_lora_rank",
            str(engine.lora.max_rank),
        ]
    if engine.max_prompt_embedding_table_size:
        options += ["--max_prompt_embedding_table_size", str(engine.max_prompt_embedding_table_size)]
    if engine.max_draft_len:  # a trtllm-build without the mode refuses it in its own words
        options += ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", str(engine.max_draft_len)]
    options += [f"--{gather}" for gather in LOGITS_GATHERING if getattr(engine, gather)]
    return options


def _refuse_on_legacy_build(engine: Engine, entry: ImageEntry, folder: str) -> None:
    """What the recipe asks that build.py is not given here."""
    if engine.max_prompt_embedding_table_size:
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) builds with examples/{folder}/build.py here; prompt "
            "tables (max_prompt_embedding_table_size) are built with trtllm-build, from TensorRT-LLM 0.8 (image 24.02)"
        )
    if any(getattr(engine, gather) for gather in LOGITS_GATHERING):
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) builds with examples/{folder}/build.py here; "
            "gathered logits (gather_context_logits, gather_generation_logits) are built with trtllm-build here"
        )
    if engine.max_draft_len:
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) builds with examples/{folder}/build.py here; draft "
            "tokens (max_draft_len) are built with trtllm-build's --speculative_decoding_mode draft_tokens_external"
        )
    if engine.lora is not None:
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) builds LoRA only from a Hugging Face LoRA "
            "directory (--hf_lora_dir), not from target modules and a rank: use an image from 24.04"
        )


def _legacy_build(engine: Engine, entry: ImageEntry, paths: BuildPaths, folder: str) -> list[list[str]]:
    """TensorRT-LLM < 0.8: examples/llama/build.py (bare switches; --world_size must equal tp x pp)."""
    _refuse_on_legacy_build(engine, entry, folder)
    dtype = engine.dtype
    build = [
        paths.python,
        f"{paths.examples}/{folder}/build.py",
        "--model_dir",
        paths.checkpoint,
        "--dtype",
        dtype,
        "--use_gpt_attention_plugin",
        dtype,
        "--use_gemm_plugin",
        dtype,
        "--remove_input_padding",
        "--paged_kv_cache",
        "--enable_context_fmha",
        "--use_inflight_batching",
        "--max_batch_size",
        str(engine.max_batch_size),
        "--max_input_len",
        str(engine.max_input_len),
        "--max_output_len",
        str(engine.max_output_len),
        "--world_size",
        str(engine.world_size),
        "--tp_size",
        str(engine.tp_size),
        "--pp_size",
        str(engine.pp_size),
        "--output_dir",
        paths.output,
    ]
    if engine.quantization is None:
        return [build]
    quantize = [
        paths.python,
        f"{paths.examples}/{folder}/quantize.py",
        "--model_dir",
        paths.checkpoint,
        "--dtype",
        dtype,
        "--qformat",
        engine.quantization,
        "--export_path",
        paths.work,
        "--calib_size",
        "32" if engine.quantization == "int4_awq" else "512",
    ]
    npz = f"{paths.work}/llama_tp1_rank0.npz"
    if engine.quantization == "int4_awq":
        build += ["--quant_ckpt_path", npz, "--use_weight_only", "--weight_only_precision", "int4_awq", "--per_group"]
    else:
        build += ["--quantized_fp8_model_path", npz, "--enable_fp8", "--fp8_kv_cache", "--strongly_typed"]
    return [quantize, build]


def _dummy_build(engine: Engine, entry: ImageEntry, paths: BuildPaths) -> list[str]:
    """trtllm-build of random weights: no convert or quantize step, the PretrainedConfig instead of a checkpoint."""
    if _version(entry.tensorrt_llm) < (0, 8):
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) is built with examples/llama/build.py "
            "here; dummy weights are built with trtllm-build --model_config, used from TensorRT-LLM 0.8 "
            "(image 24.02)"
        )
    if engine.quantization is not None:
        raise UnsupportedRecipe(
            f"quantization {engine.quantization!r} calibrates a checkpoint, and a dummy-weight engine "
            "has none: leave quantization out"
        )
    return [
        "trtllm-build",
        "--model_config",
        f"{paths.work}/{MODEL_CONFIG}",
        "--output_dir",
        paths.output,
        *trtllm_build_options(engine, entry),
    ]


def build_commands(engine: Engine, entry: ImageEntry, paths: BuildPaths) -> list[list[str]]:
    """The commands, in order, that build `engine` inside a container of `entry`'s image."""
    if engine.dtype == "float32" and engine.quantization:
        raise UnsupportedRecipe("quantization needs dtype float16 or bfloat16")
    if engine.dummy_weights:
        return [_dummy_build(engine, entry, paths)]
    example = _example(engine, entry)
    if example.script == "build.py":
        return _legacy_build(engine, entry, paths, example.folder)
    parallel = ["--tp_size", str(engine.tp_size), "--pp_size", str(engine.pp_size)]
    if engine.quantization is None:
        flag = example.flags
        prepare = [
            paths.python,
            f"{paths.examples}/{example.folder}/{example.script}",
            *example.extra,
            flag["model"],
            paths.checkpoint,
            flag["output"],
            paths.work,
            flag["dtype"],
            engine.dtype,
            flag["tp"],
            str(engine.tp_size),
            *([flag["pp"], str(engine.pp_size)] if "pp" in flag else []),
        ]
    else:
        prepare = [
            paths.python,
            f"{paths.examples}/quantization/quantize.py",
            "--model_dir",
            paths.checkpoint,
            "--dtype",
            engine.dtype,
            "--qformat",
            engine.quantization,
            *(
                ["--awq_block_size", "128", "--calib_size", "32"]
                if engine.quantization == "int4_awq"
                else ["--kv_cache_dtype", "fp8", "--calib_size", "512"]
            ),
            *parallel,
            "--output_dir",
            paths.work,
        ]
    build = ["trtllm-build", "--checkpoint_dir", paths.work, "--output_dir", paths.output, *trtllm_build_options(engine, entry)]
    return [prepare, build]
