"""`--triton-image` values: `YY.MM-trtllm` (NGC's tritonserver:YY.MM-trtllm-python-py3) or a full reference."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..common.errors import TritonLLMError

NGC_TRTLLM = "nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
NO_IMAGE = "local"  # what serves, in reports, where no image is named: a tritonserver of this host
_SHORT = re.compile(r"^(\d{2}\.\d{2})-trtllm$")
_NGC = re.compile(r"^nvcr\.io/nvidia/tritonserver:(\d{2}\.\d{2})-trtllm-python-py3$")
_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")  # docker's grammar, loosely: no spaces, lower-case repository


class ImageError(TritonLLMError, ValueError):
    pass


@dataclass(frozen=True)
class ImageRef:
    """A serving image, parsed once from the command line."""

    given: str  # as the user wrote it
    reference: str  # the full image reference docker pulls

    @property
    def tag(self) -> str | None:
        """The YY.MM of an NGC trtllm image, else None (nothing is known of other images)."""
        return short_tag(self.reference)


def parse_image(value: str) -> ImageRef:
    """`24.09-trtllm` -> nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3; a full reference as is."""
    short = _SHORT.match(value)
    if short:
        return ImageRef(value, NGC_TRTLLM.format(tag=short.group(1)))
    if ("/" in value or ":" in value or "@" in value) and _REFERENCE.match(value.split(":", 1)[0].split("@", 1)[0]):
        return ImageRef(value, value)
    raise ImageError(
        f"--triton-image {value!r}: give YY.MM-trtllm (e.g. 24.09-trtllm, the NGC "
        f"tritonserver:YY.MM-trtllm-python-py3 image) or a full image reference such as repo/name:tag"
    )


def short_tag(reference: str) -> str | None:
    """The YY.MM of an NGC trtllm image reference, else None."""
    match = _NGC.match(reference)
    return match.group(1) if match else None
