"""Stop before any build when the tritonserver found, or the tensorrt_llm installed here, is not what the
requested image ships (compat.toml): an engine built by one TensorRT-LLM does not load in another's backend.

Run for the local runtime only (pytest inside a serving image); a container runtime runs the image itself.
"""

from __future__ import annotations

from ..compat import Compat, ImageEntry
from .discovery import FoundServer
from ...common.errors import TritonLLMError


class VersionMismatch(TritonLLMError, ValueError):
    pass


def check_versions(
    compat: Compat, server: FoundServer, tensorrt_llm: tuple[str, str] | None, requested: ImageEntry | None
) -> ImageEntry | None:
    """The compat entry this local run stands for (None when nothing is known); VersionMismatch when the
    server or tensorrt_llm contradicts the requested image, or each other."""
    if requested is not None:
        image = f"--triton-image {requested.tag}-trtllm"
        if server.declared_version and server.declared_version != requested.triton:
            raise VersionMismatch(
                f"{image} ships Triton {requested.triton} (compat.toml), but the tritonserver found is Triton "
                f"{server.declared_version}: {server.binary} ({server.origin}); run inside that image or name the "
                "image you are in"
            )
        if tensorrt_llm and tensorrt_llm[0] != requested.tensorrt_llm:
            raise VersionMismatch(
                f"{image} ships TensorRT-LLM {requested.tensorrt_llm} (compat.toml), but tensorrt_llm "
                f"{tensorrt_llm[0]} is installed here ({tensorrt_llm[1]}); run inside that image or name the "
                "image you are in"
            )
        return requested
    if server.declared_version is None:
        return None
    candidates = [e for e in compat.images.values() if e.triton == server.declared_version]
    if tensorrt_llm is None:
        return candidates[-1] if candidates else None
    matching = [e for e in candidates if e.tensorrt_llm == tensorrt_llm[0]]
    if candidates and not matching:
        ships = candidates[-1]
        raise VersionMismatch(
            f"tensorrt_llm {tensorrt_llm[0]} is installed here ({tensorrt_llm[1]}), but the tritonserver found "
            f"is Triton {server.declared_version} ({server.binary}), which ships with TensorRT-LLM "
            f"{ships.tensorrt_llm} (image {ships.tag}-trtllm, compat.toml): engines built by one do not load "
            "in the other"
        )
    return matching[-1] if matching else None
