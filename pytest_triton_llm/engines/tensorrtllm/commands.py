"""TensorRT-LLM engine builds rendered from a lock recipe, for the TensorRT-LLM version of an image.

The commands follow the image's version (compat.toml): before 0.8 `examples/llama/build.py`; from 0.8
`convert_checkpoint.py` (tp/pp are set there) or `quantization/quantize.py` (int4_awq, fp8), then
`trtllm-build`, whose sequence flag became --max_seq_len in 0.11 and whose paged KV cache flag became
--kv_cache_type paged in 0.13. Every value is passed explicitly: defaults drifted between versions.
Paths are the build container's (BuildPaths); unit tests pin the commands per version.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...compat import ImageEntry
from ...lock import Engine


class UnsupportedRecipe(ValueError):
    """The recipe asks for something the image's TensorRT-LLM cannot build."""


@dataclass(frozen=True)
class BuildPaths:
    examples: str  # TensorRT-LLM's examples/ in the container (/app/examples, or a mounted backend checkout)
    checkpoint: str = "/checkpoint"  # the Hugging Face checkpoint, mounted read-only
    work: str = "/work"  # the converted or quantized TensorRT-LLM checkpoint
    output: str = "/engine"  # the engine, published into the engine cache
    python: str = "python3"  # runs the example scripts: the image's, or this interpreter in a local build


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def _llama_example(entry: ImageEntry, paths: BuildPaths, script: str) -> str:
    # TensorRT-LLM 1.x moved the model examples under examples/models/core/
    folder = "models/core/llama" if _version(entry.tensorrt_llm) >= (1, 0) else "llama"
    return f"{paths.examples}/{folder}/{script}"


def trtllm_build_options(engine: Engine, entry: ImageEntry) -> list[str]:
    """Flags for `trtllm-build --checkpoint_dir ... --output_dir ...` as `entry`'s TensorRT-LLM names them."""
    seq_flag, kv_flag = entry.seq_len_flag, entry.kv_cache_flag
    seq_len = engine.max_output_len if seq_flag == "max_output_len" else engine.max_input_len + engine.max_output_len
    options = [
        "--max_batch_size", str(engine.max_batch_size),
        "--max_input_len", str(engine.max_input_len),
        f"--{seq_flag}", str(seq_len),
        "--gpt_attention_plugin", engine.dtype,
        "--gemm_plugin", engine.dtype,
        "--remove_input_padding", "enable",
        "--context_fmha", "enable",
        *(["--kv_cache_type", "paged"] if kv_flag == "kv_cache_type" else ["--paged_kv_cache", "enable"]),
    ]  # fmt: skip
    if engine.lora is not None:
        if _version(entry.tensorrt_llm) < (0, 9):
            raise UnsupportedRecipe(
                f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) cannot build LoRA into llama engines "
                "with target modules and a max rank (trtllm-build has them from 0.9, image 24.04)"
            )
        options += [
            "--lora_plugin", engine.dtype,
            "--lora_target_modules", *engine.lora.target_modules,
            "--max_lora_rank", str(engine.lora.max_rank),
        ]  # fmt: skip
    return options


def _legacy_build(engine: Engine, entry: ImageEntry, paths: BuildPaths) -> list[list[str]]:
    """TensorRT-LLM < 0.8: examples/llama/build.py (bare switches; --world_size must equal tp x pp)."""
    if engine.lora is not None:
        raise UnsupportedRecipe(
            f"TensorRT-LLM {entry.tensorrt_llm} (image {entry.tag}) builds LoRA only from a Hugging Face LoRA "
            "directory (--hf_lora_dir), not from target modules and a rank: use an image from 24.04"
        )
    dtype = engine.dtype
    build = [
        paths.python, _llama_example(entry, paths, "build.py"), "--model_dir", paths.checkpoint, "--dtype", dtype,
        "--use_gpt_attention_plugin", dtype, "--use_gemm_plugin", dtype,
        "--remove_input_padding", "--paged_kv_cache", "--enable_context_fmha", "--use_inflight_batching",
        "--max_batch_size", str(engine.max_batch_size), "--max_input_len", str(engine.max_input_len),
        "--max_output_len", str(engine.max_output_len),
        "--world_size", str(engine.world_size), "--tp_size", str(engine.tp_size), "--pp_size", str(engine.pp_size),
        "--output_dir", paths.output,
    ]  # fmt: skip
    if engine.quantization is None:
        return [build]
    quantize = [
        paths.python, _llama_example(entry, paths, "quantize.py"), "--model_dir", paths.checkpoint, "--dtype", dtype,
        "--qformat", engine.quantization, "--export_path", paths.work,
        "--calib_size", "32" if engine.quantization == "int4_awq" else "512",
    ]  # fmt: skip
    npz = f"{paths.work}/llama_tp1_rank0.npz"
    if engine.quantization == "int4_awq":
        build += ["--quant_ckpt_path", npz, "--use_weight_only", "--weight_only_precision", "int4_awq", "--per_group"]
    else:
        build += ["--quantized_fp8_model_path", npz, "--enable_fp8", "--fp8_kv_cache", "--strongly_typed"]
    return [quantize, build]


def build_commands(engine: Engine, entry: ImageEntry, paths: BuildPaths) -> list[list[str]]:
    """The commands, in order, that build `engine` inside a container of `entry`'s image."""
    if engine.dtype == "float32" and engine.quantization:
        raise UnsupportedRecipe("quantization needs dtype float16 or bfloat16")
    if entry.build == "build.py":
        return _legacy_build(engine, entry, paths)
    parallel = ["--tp_size", str(engine.tp_size), "--pp_size", str(engine.pp_size)]
    if engine.quantization is None:
        prepare = [paths.python, _llama_example(entry, paths, "convert_checkpoint.py"), "--model_dir", paths.checkpoint,
                   "--output_dir", paths.work, "--dtype", engine.dtype, *parallel]  # fmt: skip
    else:
        prepare = [
            paths.python, f"{paths.examples}/quantization/quantize.py", "--model_dir", paths.checkpoint,
            "--dtype", engine.dtype, "--qformat", engine.quantization,
            *(["--awq_block_size", "128", "--calib_size", "32"] if engine.quantization == "int4_awq"
              else ["--kv_cache_dtype", "fp8", "--calib_size", "512"]),
            *parallel, "--output_dir", paths.work,
        ]  # fmt: skip
    build = ["trtllm-build", "--checkpoint_dir", paths.work, "--output_dir", paths.output, *trtllm_build_options(engine, entry)]
    return [prepare, build]
