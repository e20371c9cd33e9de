"""A multimodal deployment's prompt, as tensorrtllm_backend v0.19.0's preprocessing builds it where
multimodal_model_path is set: the engine's vocab_size (from the checkpoint) and a request's share of the prompt table
(max_prompt_embedding_table_size // max_batch_size rows, divided by max_num_images where set) give the image's fake
prompt ids, vocab_size .. vocab_size + rows - 1; LLaVA's prompt is "USER:\\n", those ids, the text, " ASSISTANT:".
IMAGE_BYTES and IMAGE_URL are for the models whose preprocessing processes images (mllama, LLaVA-OneVision,
Qwen2-VL): LLaVA's has no vision preprocessor, and a request that sends one fails with upstream's assertion."""

from __future__ import annotations

import json
from pathlib import Path

SUPPORTED = ("llava", "blip2-opt", "vila", "mllama", "llava_onevision", "qwen2_vl")  # upstream's assertion's list
SERVED = {"llava": ("USER:\n", " ASSISTANT:")}  # what the stand-in serves: (pre prompt, post prompt)
NO_VISION_PREPROCESSOR = "Vision preprocessor for preparing images before encoding is None"
UNSET = ("", "${multimodal_model_path}")  # upstream's preprocessing reads these as "not multimodal"


class LlavaPrompt:
    def __init__(self, vision_dir: str, engine_dir: str, max_num_images: str | None, encode):
        model_type = json.loads((Path(vision_dir) / "config.json").read_text())["builder_config"]["model_type"]
        if model_type not in SUPPORTED:
            raise ValueError(
                "[TensorRT-LLM][ERROR] Currently supported multi-modal models are llava, blip2-opt, vila, mllama, "
                f"llava_onevision and qwen2_vl. Got {model_type}."
            )
        if model_type not in SERVED:
            raise ValueError(f"the stand-in serves the multimodal contract of {', '.join(SERVED)} only, not {model_type}")
        engine = Path(engine_dir)
        build = json.loads((engine / "engine.json").read_text())["build_config"]
        self.vocab_size = int(json.loads((engine / "config.json").read_text())["vocab_size"])
        rows = build.get("max_prompt_embedding_table_size", 0) // build["max_batch_size"]
        if max_num_images and max_num_images.isdigit():
            rows //= int(max_num_images)
        self.rows = rows
        pre, post = SERVED[model_type]
        self.pre, self.post = encode(pre), encode(post)

    @classmethod
    def of(cls, params: dict, encode) -> LlavaPrompt | None:
        """The deployment's multimodal prompt, None where multimodal_model_path is unset (a text deployment)."""
        path = params.get("multimodal_model_path", "")
        if path in UNSET:
            return None
        return cls(path, params["gpt_model_path"], params.get("max_num_images"), encode)

    def wrap(self, ids: list[int], offset: bool = False) -> list[int]:
        """The request's token ids with the image's fake prompt ids before them, in the model's prompt. `offset` (fault
        image_rows_offset_by_one): the ids counted from one past vocab_size, the last wrapping to the first row."""
        fake = [self.vocab_size + (row + offset) % self.rows for row in range(self.rows)]
        return [*self.pre, *fake, *ids, *self.post]
