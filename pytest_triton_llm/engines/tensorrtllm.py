"""trtllm-build options rendered from a lock recipe (TensorRT-LLM 0.12 and later).

The container build that runs them arrives with the container runtime; the options are
kept here, in one place, so the lock's recipe decides them and unit tests can pin them.
"""

from __future__ import annotations

from ..lock import Engine


def trtllm_build_options(engine: Engine) -> list[str]:
    """Flags for `trtllm-build --checkpoint_dir ... --output_dir ...`."""
    options = [
        "--max_batch_size", str(engine.max_batch_size),
        "--max_input_len", str(engine.max_input_len),
        "--max_seq_len", str(engine.max_input_len + engine.max_output_len),
        "--gpt_attention_plugin", engine.dtype,
        "--gemm_plugin", engine.dtype,
        "--remove_input_padding", "enable",
        "--kv_cache_type", "paged",
    ]  # fmt: skip
    if engine.lora is not None:
        options += [
            "--lora_plugin", engine.dtype,
            "--lora_target_modules", *engine.lora.target_modules,
            "--max_lora_rank", str(engine.lora.max_rank),
        ]  # fmt: skip
    return options
