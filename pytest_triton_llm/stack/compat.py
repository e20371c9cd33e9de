"""What each NGC trtllm image carries and supports (data in compat.toml), and what a test needs of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from ..host.images import short_tag
from ..common.schema import load_toml

COMPAT_FILE = Path(str(resources.files(__package__) / "compat.toml"))


@dataclass(frozen=True)
class ImageEntry:
    tag: str  # YY.MM
    triton: str
    tensorrt_llm: str
    backend: str
    python: str
    build: str  # "build.py" (examples/<model>/build.py) or "trtllm-build" (convert_checkpoint.py + trtllm-build)
    seq_len_flag: str  # trtllm-build's "max_output_len" or "max_seq_len"
    kv_cache_flag: str  # "paged_kv_cache" (--paged_kv_cache enable) or "kv_cache_type" (--kv_cache_type paged)
    features: frozenset[str]
    python_models: tuple[str, ...] = ()  # where the image may ship upstream's inflight_batcher_llm models ([python_models])

    def describe(self) -> str:
        return f"{self.tag}-trtllm (Triton {self.triton}, TensorRT-LLM {self.tensorrt_llm})"


@dataclass(frozen=True)
class Compat:
    images: dict[str, ImageEntry]
    capabilities: dict[str, str]  # what a test asks for -> the image feature it needs
    features: dict[str, str]  # feature -> what it is, for skip reasons
    without_trtllm: dict[str, dict] = field(default_factory=dict)  # YY.MM -> why no trtllm image is known, sources
    capability_inputs: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # -> model -> inputs
    capability_settings: dict[str, str] = field(default_factory=dict)  # -> the lock Deployment field that gives it

    def no_trtllm_image(self, tag: str) -> str | None:
        """Why `YY.MM-trtllm` names no image this file knows of (a release after the newest confirmed), or None."""
        release = self.without_trtllm.get(tag)
        if release is None:
            return None
        newest = max(self.images, key=lambda t: tuple(int(p) for p in t.split(".")))
        return (
            f"NGC {tag} has no confirmed tritonserver trtllm-python-py3 image ({COMPAT_FILE.name}: "
            f"{release['finding']}; {release['sources'][0]}). The newest confirmed is {newest}-trtllm. For the PyTorch "
            "path, serve an llmapi deployment on an image that carries it; if NVIDIA has since published this image, "
            f"pass its full reference (nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3)"
        )

    def entry(self, tag: str) -> ImageEntry:
        try:
            return self.images[tag]
        except KeyError:
            raise KeyError(f"image {tag} is not in {COMPAT_FILE.name} (known: {', '.join(self.images)})") from None

    def for_image(self, reference: str) -> ImageEntry | None:
        """The entry of an NGC trtllm image reference; None for other images (nothing known about them)."""
        tag = short_tag(reference)
        return self.images.get(tag) if tag else None

    def for_triton(self, version: str) -> ImageEntry | None:
        """The image of a Triton server version such as 2.51.0 (each image carries its own), or None."""
        return next((e for e in self.images.values() if e.triton == version), None)

    def lacking(self, entry: ImageEntry, needs: set[str]) -> str | None:
        """Why `entry` cannot run a test that needs `needs` on a tensorrtllm engine, or None."""
        missing = sorted({self.capabilities[n] for n in needs if n in self.capabilities} - entry.features)
        if not missing:
            return None
        return f"image {entry.describe()} lacks " + "; ".join(self.features.get(f, f) for f in missing)


@lru_cache(maxsize=1)
def load_compat(path: Path = COMPAT_FILE) -> Compat:
    data = load_toml(path)
    images = {}
    shipped = data["python_models"]
    for tag, e in data["images"].items():
        images[tag] = ImageEntry(
            tag=tag,
            triton=e["triton"],
            tensorrt_llm=e["tensorrt_llm"],
            backend=e["backend"],
            python=e["python"],
            build=e["build"],
            seq_len_flag=e["seq_len_flag"],
            kv_cache_flag=e["kv_cache_flag"],
            features=frozenset(e["features"]),
            python_models=tuple(shipped["paths"]) if _release(tag) >= _release(shipped["first"]) else (),
        )
    inputs = {cap: {model: tuple(names) for model, names in table.items()} for cap, table in data["capability_inputs"].items()}
    return Compat(
        images,
        dict(data["capabilities"]),
        dict(data["features"]),
        dict(data.get("without_trtllm", {})),
        inputs,
        dict(data["capability_settings"]),
    )


def _release(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.split("."))


def installed_tensorrt_llm() -> tuple[str, str] | None:
    """(version, location) of the tensorrt_llm distribution here; read from its metadata, as importing it
    takes seconds and initialises CUDA. Its __version__ is the same string."""
    try:
        dist = metadata.distribution("tensorrt_llm")
    except metadata.PackageNotFoundError:
        return None
    return dist.version, str(dist.locate_file("tensorrt_llm"))
