"""Upstream's own python models of the served TensorRT-LLM version (preprocessing, postprocessing, tensorrt_llm_bls), for
real tensorrtllm deployments: what users deploy, never the project's stand-in copies.

upstream_models.toml pins, per TensorRT-LLM version, the repository, tag and commit whose all_models/inflight_batcher_llm
(from 0.20 on: TensorRT-LLM's triton_backend/all_models/inflight_batcher_llm) that version's images serve, and each
file's sha256. The code comes, in this order, from:
  1. the serving image's own copy, where the image ships one (`image_models`): linked, resolved inside the container;
  2. --trtllm-models DIR, a checkout or extract of that tag (hosts that cannot reach GitHub): checked file by file;
  3. raw.githubusercontent.com at the pinned commit: fetched once into the engine cache (`upstream/`), checked.
Where the data file has no sha256 for a file (TensorRT-LLM 0.20 on: not readable where the file was made), the first
fetch records what it got and later uses are checked against that; the report then says "sha256 not pinned".
Nothing of it is copied into this repository. The report names each model's origin (rendered.json's model_code).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path

from ...common.schema import load_toml
from ...common.errors import TritonLLMError

DATA_FILE = Path(str(resources.files(__package__) / "upstream_models.toml"))
MODELS = ("preprocessing", "postprocessing", "tensorrt_llm_bls")
RAW_URL = "https://raw.githubusercontent.com/{repository}/{commit}/{prefix}/{path}"
TIMEOUT_S = 60


class UpstreamModelsError(TritonLLMError, RuntimeError):
    """Upstream's models could not be had or are not upstream's: one line naming what to fix."""


@dataclass(frozen=True)
class Source:
    version: str  # TensorRT-LLM's, as compat.toml spells it
    repository: str
    tag: str | None  # None: no release tag is known for the version (its images ship the models: they are linked)
    commit: str | None  # None: no commit is known, so nothing can be fetched (--trtllm-models, or the image's copy)
    prefix: str  # the inflight_batcher_llm directory inside the repository
    files: dict[str, str | None]  # path under prefix -> sha256 (None: not pinned)

    @property
    def pinned(self) -> bool:
        return all(self.files.values())

    def describe(self) -> str:
        commit = self.commit[:12] if self.commit else "commit not pinned"
        return f"upstream {self.repository} {self.tag or self.version} ({commit}{'' if self.pinned else ', sha256 not pinned'})"

    def clone_hint(self) -> str:
        release = self.tag or f"the release of TensorRT-LLM {self.version}"
        return (
            f"git clone --depth 1 --branch {release} https://github.com/{self.repository}.git and pass "
            "--trtllm-models with its path"
        )


def sources(path: Path = DATA_FILE) -> dict[str, Source]:
    data = load_toml(path)["sources"]
    return {
        version: Source(
            version,
            e["repository"],
            e.get("tag"),
            e.get("commit"),
            e["prefix"],
            {p: f.get("sha256") for p, f in e["files"].items()},
        )
        for version, e in data.items()
    }


def source_for(tensorrt_llm: str, path: Path = DATA_FILE) -> Source:
    known = sources(path)
    if tensorrt_llm not in known:
        raise UpstreamModelsError(
            f"{path.name} pins no upstream python models for TensorRT-LLM {tensorrt_llm} (known: {', '.join(known)})"
        )
    return known[tensorrt_llm]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _local_root(source: Source, directory: Path) -> Path:
    """The inflight_batcher_llm directory of --trtllm-models: a checkout's root, or that directory itself."""
    for candidate in (directory / source.prefix, directory / "all_models" / "inflight_batcher_llm", directory):
        if (candidate / "preprocessing" / "1" / "model.py").is_file():
            return candidate
    raise UpstreamModelsError(
        f"--trtllm-models {directory}: no {source.prefix}/preprocessing/1/model.py in it (give a "
        f"checkout of {source.repository} at {source.tag})"
    )


def _check(source: Source, root: Path, where: str, recorded: dict | None = None) -> dict[str, str]:
    """Every file of `source` under `root` with its pinned sha256 (or, where none is pinned, the one `recorded` at the
    first fetch); returns each file's sha256."""
    found = {}
    for path, pinned in source.files.items():
        file = root / path
        if not file.is_file():
            raise UpstreamModelsError(f"{where}: {path} is missing: it is not {source.repository} {source.tag}")
        got = found[path] = _sha256(file)
        sha256 = pinned or (recorded or {}).get(path)
        if sha256 is not None and got != sha256:
            raise UpstreamModelsError(
                f"{where}: {path} has sha256 {got[:16]}..., {source.repository} {source.tag} has {sha256[:16]}...: it is "
                "not that tag's file (a customised repository is served as a lock deployment's `repository`)"
            )
    return found


def _fetch(source: Source, cache_root: Path, progress) -> Path:
    """The pinned files in the engine cache, fetched once from GitHub at the commit."""
    if source.commit is None:
        raise UpstreamModelsError(
            f"upstream models: no commit of {source.repository} is pinned for TensorRT-LLM "
            f"{source.version} ({DATA_FILE.name}); {source.clone_hint()}"
        )
    root = cache_root / "upstream" / f"{source.repository.replace('/', '+')}@{source.commit}"
    if (root / ".complete").is_file():
        _check(source, root, f"the engine cache's {root}", json.loads((root / ".complete").read_text()))
        return root
    staging = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    with progress.step(f"upstream models: fetching {len(source.files)} files of {source.describe()} into {root}"):
        for path in source.files:
            url = RAW_URL.format(repository=source.repository, commit=source.commit, prefix=source.prefix, path=path)
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:  # noqa: S310 (a fixed https URL)
                    body = resp.read()
            except (OSError, urllib.error.URLError) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise UpstreamModelsError(
                    f"upstream models: cannot fetch {url} ({exc}); without GitHub, {source.clone_hint()}"
                ) from None
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).write_bytes(body)
        found = _check(source, staging, f"{source.describe()} as fetched")
        (staging / ".complete").write_text(json.dumps(found, indent=2) + "\n")  # what later uses are checked against
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    return root


def _copy(root: Path, model: str, origin: str, version_dir: Path) -> str:
    for file in sorted((root / model / "1").rglob("*.py")):
        target = version_dir / file.relative_to(root / model / "1")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    return origin


def _link(image_dir: str, model: str, source: Source, version_dir: Path) -> str:
    """Links to the image's own copy (resolved inside the server's container, where the image has it)."""
    for path in (p for p in source.files if p.startswith(f"{model}/1/")):
        target = version_dir / path.removeprefix(f"{model}/1/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"{image_dir}/{path}", target)
    return f"the image's {image_dir}/{model} ({source.describe()})"


def model_code(
    tensorrt_llm: str, cache_root: Path | None, progress, local_dir: str | None = None, image_dir: str | None = None
) -> dict:
    """model -> a function that fills its version directory with upstream's code of TensorRT-LLM `tensorrt_llm` and
    returns where the code came from (for rendering: repository.render_repository's `python_code`)."""
    source = source_for(tensorrt_llm)
    if image_dir is not None:
        return {model: partial(_link, image_dir, model, source) for model in MODELS}
    if local_dir is not None:
        root = _local_root(source, Path(local_dir))
        _check(source, root, f"--trtllm-models {local_dir}")
        origin = f"{source.describe()}, from --trtllm-models {local_dir}"
    elif cache_root is not None:
        root = _fetch(source, cache_root, progress)
        origin = f"{source.describe()}, fetched into {root}"
    else:
        raise UpstreamModelsError(
            f"upstream models of {source.describe()}: no engine cache to fetch them into, "
            "no --trtllm-models and none in the image"
        )
    return {model: partial(_copy, root, model, origin) for model in MODELS}
