"""`multimodal_encoders`: an image -> the rows of the engine's prompt table for it (upstream's all_models/multimodal
contract, LLaVA's path): the vision tower's second-to-last layer without the class token, through the projector.

Input IMAGE (the ensemble's image_input: [batch, images, 3, H, W], normalized pixels as upstream's client sends them
for LLaVA); outputs OUT_PROMPT_EMBEDDING_TABLE [batch, images x rows, hidden] and OUT_PROMPT_VOCAB_SIZE [batch, 1].
A request without an image fails as upstream's does ("There is no preprocessed image tensor to encode").
Parameters: multimodal_model_path (the engine's vision/ directory, stack/engines/vision_tower.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from triton_io import each_answered, model_parameters, optional_input
from vision_encoder import VisionEncoder

NO_IMAGE = "There is no preprocessed image tensor to encode"  # upstream's assertion, LLaVA's path


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.encoder = VisionEncoder(Path(params["multimodal_model_path"]))

    def _one(self, request):
        image = optional_input(request, "IMAGE")
        if image is None:
            image = optional_input(request, "pixel_values")
        if image is None:
            raise ValueError(NO_IMAGE)
        batch = image.shape[0]
        tables = [self.encoder.rows(image[row].reshape(-1, *image.shape[-3:])) for row in range(batch)]
        table = np.stack(tables)
        vocab = np.full((batch, 1), table.shape[1], dtype=np.int32)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("OUT_PROMPT_EMBEDDING_TABLE", table), pb_utils.Tensor("OUT_PROMPT_VOCAB_SIZE", vocab)]
        )

    def execute(self, requests):
        return each_answered(requests, self._one)
