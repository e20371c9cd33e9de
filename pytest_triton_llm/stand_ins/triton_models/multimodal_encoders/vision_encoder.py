"""The vision encoder a multimodal deployment's multimodal_encoders runs: the CLIP tower and LLaVA's projector that
stack/engines/vision_tower.py built beside the engine, loaded from their safetensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class VisionEncoder:
    """The CLIP tower and LLaVA's projector of vision_tower.py, loaded from their safetensors."""

    def __init__(self, path: Path):
        import torch
        from safetensors.torch import load_file
        from transformers import CLIPVisionConfig, CLIPVisionModel

        torch.set_num_threads(1)  # beside the language model's one thread, as the stand-ins run (generation.cpu_threads)
        record = json.loads((path / "config.json").read_text())
        self.layer = record["vision_feature_layer"]
        weights = load_file(str(path / "model.safetensors"))
        self.tower = CLIPVisionModel(CLIPVisionConfig(**record["vision_config"])).eval()
        self.tower.load_state_dict({k.removeprefix("tower."): v.float() for k, v in weights.items() if k.startswith("tower.")})
        size = record["projector"]
        self.projector = torch.nn.Sequential(
            torch.nn.Linear(size["in"], size["hidden"]), torch.nn.GELU(), torch.nn.Linear(size["hidden"], size["hidden"])
        ).eval()
        self.projector.load_state_dict(
            {k.removeprefix("projector."): v.float() for k, v in weights.items() if k.startswith("projector.")}
        )
        self.image_size = record["vision_config"]["image_size"]

    def rows(self, images: np.ndarray) -> np.ndarray:
        """[images, 3, H, W] -> [images x rows, hidden], float16 (the output's datatype)."""
        import torch

        if images.ndim != 4 or images.shape[1] != 3 or images.shape[2:] != (self.image_size, self.image_size):
            raise ValueError(
                f"image_input must be [images, 3, {self.image_size}, {self.image_size}] per request (the vision "
                f"encoder's image size), got {list(images.shape)}"
            )
        with torch.inference_mode():
            pixels = torch.from_numpy(images.astype(np.float32))
            features = self.tower(pixels, output_hidden_states=True).hidden_states[self.layer][:, 1:]
            table = self.projector(features)
        return table.reshape(-1, table.shape[-1]).numpy().astype(np.float16)
