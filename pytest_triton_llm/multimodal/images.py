"""Images the multimodal suite draws (Pillow: words, colours, near-duplicates; nothing downloaded), and the pixels a
client sends as image_input for them, as upstream's multimodal client prepares a LLaVA image: resized to the vision
encoder's size, scaled to [0, 1], normalized with CLIP's mean and deviation, channels first, float16."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

# CLIPImageProcessor's image_mean and image_std (OpenAI CLIP), which LLaVA's processor uses
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
SIZE = 224  # drawn at this size, resized to the encoder's as a real image would be


def drawn(word: str, background: str = "white", ink: str = "black", shift: int = 0) -> Image.Image:
    """`word` written on `background` in `ink`; `shift` moves it right by that many pixels (a near-duplicate)."""
    image = Image.new("RGB", (SIZE, SIZE), background)
    draw = ImageDraw.Draw(image)
    draw.text((24 + shift, SIZE // 2 - 20), word, fill=ink, font_size=48)
    return image


def pixels(image: Image.Image, size: int) -> np.ndarray:
    """[3, size, size] float16: what image_input carries for one image."""
    resized = np.asarray(image.convert("RGB").resize((size, size), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0
    normalized = (resized - np.array(CLIP_MEAN, dtype=np.float32)) / np.array(CLIP_STD, dtype=np.float32)
    return normalized.transpose(2, 0, 1).astype(np.float16)


def png(image: Image.Image) -> bytes:
    """The image as a PNG file's bytes (image_bytes_input, a data URL)."""
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
