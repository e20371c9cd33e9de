"""Serving images: `--triton-image` references, what an image is (digest, Triton version), pulls."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..progress import Progress

NGC_TRTLLM = "nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
_SHORT = re.compile(r"^(\d{2}\.\d{2})-trtllm$")
_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")  # docker's grammar, loosely: no spaces, lower-case repository


class ImageError(ValueError):
    pass


def expand_image(value: str) -> str:
    """`24.09-trtllm` -> nvcr.io/nvidia/tritonserver:24.09-trtllm-python-py3; a full reference as is."""
    short = _SHORT.match(value)
    if short:
        return NGC_TRTLLM.format(tag=short.group(1))
    if ("/" in value or ":" in value or "@" in value) and _REFERENCE.match(value.split(":", 1)[0].split("@", 1)[0]):
        return value
    raise ImageError(
        f"--triton-image {value!r}: give YY.MM-trtllm (e.g. 24.09-trtllm, the NGC "
        f"tritonserver:YY.MM-trtllm-python-py3 image) or a full image reference such as repo/name:tag"
    )


def short_tag(reference: str) -> str | None:
    """The YY.MM of an NGC trtllm image reference, else None."""
    match = re.match(r"^nvcr\.io/nvidia/tritonserver:(\d{2}\.\d{2})-trtllm-python-py3$", reference)
    return match.group(1) if match else None


@dataclass(frozen=True)
class ImageInfo:
    reference: str
    id: str  # sha256:... of the local image
    digest: str  # the registry digest where the image came from one, else its id
    env: dict[str, str]

    @property
    def triton_version(self) -> str | None:
        """As NGC images (and ours) declare it in their environment."""
        return self.env.get("TRITON_SERVER_VERSION")


def image_info(image) -> ImageInfo:
    attrs = image.attrs
    config = attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    digests = attrs.get("RepoDigests") or []
    reference = (image.tags or [attrs["Id"]])[0]
    return ImageInfo(reference, attrs["Id"], digests[0] if digests else attrs["Id"], env)


def ensure_image(client, reference: str, progress: Progress):
    """The local image, pulled (with progress) when missing."""
    from docker.errors import APIError, ImageNotFound

    try:
        return client.images.get(reference)
    except ImageNotFound:
        pass
    progress.say(f"image {reference}: not here; pulling")
    repository, _, tag = reference.rpartition(":") if ":" in reference.split("/")[-1] else (reference, "", "latest")
    layers: dict[str, tuple[int, int]] = {}
    next_note = time.monotonic() + 5
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise ImageError(f"pulling {reference}: {event['error']}")
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (detail.get("current", 0), detail["total"])
            if time.monotonic() >= next_note:
                done = sum(c for c, _ in layers.values()) / 1e6
                total = sum(t for _, t in layers.values()) / 1e6
                progress.say(f"image {reference}: {done:,.0f} of {total:,.0f} MB in {len(layers)} layers")
                next_note = time.monotonic() + 5
    except APIError as exc:
        raise ImageError(
            f"pulling {reference} failed: {exc.explanation or exc}. For nvcr.io run `docker login nvcr.io` "
            "(user $oauthtoken, an NGC API key) or pull the image yourself"
        ) from None
    progress.say(f"image {reference}: pulled")
    return client.images.get(reference)
