"""The engine cache: built engines (and LoRA adapters) under a key over their recipe.

Layout under the cache root (default ~/.cache/pytest-triton-llm):

    engines/<engine>-<key12>/        a finished engine, with manifest.json
    engines/.build-<key12>-<pid>/    a build in progress (renamed into place when done)
    adapters/<adapter>-<key12>/      a finished LoRA adapter, likewise

The key covers the lock's recipe and the builder's identity (its version; for
TensorRT-LLM also image digest, GPU architecture, parallelism), so a changed builder
never reuses an engine made by the old one.
    sources/<sha256>/<file>          fetched model sources, checked by digest
    locks/<key12>.lock               one builder per key across parallel sessions

A build is published by a single rename, so a reader never sees half an engine,
and a finished engine is never deleted except by an explicit --rebuild-engines.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from .progress import Progress

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class BuiltEngine:
    name: str
    path: Path
    manifest: dict
    cached: bool  # reused from the cache rather than built in this session
    seconds: float  # time spent getting it: build, wait or verification

    @property
    def digest(self) -> str:
        return self.manifest["digest"]


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tree_digest(root: Path) -> tuple[str, dict[str, str]]:
    """sha256 over every file (name and content) except the manifest."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(root).as_posix()] = file_sha256(path)
    blob = json.dumps(files, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest(), files


# builds the engine into an empty directory; returns extra manifest fields
BuildFn = Callable[[Path], dict]


class EngineCache:
    def __init__(self, root: Path | str, progress: Progress | None = None):
        self.root = Path(root).expanduser()
        self.progress = progress or Progress()

    @staticmethod
    def key(recipe: dict, builder: dict) -> str:
        blob = json.dumps({"recipe": recipe, "builder": builder}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def entry_dir(self, kind: str, name: str, key: str) -> Path:
        return self.root / f"{kind}s" / f"{name}-{key[:12]}"

    def sources_dir(self) -> Path:
        return self.root / "sources"

    def lock_for(self, key: str) -> FileLock:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        return FileLock(str(locks / f"{key}.lock"))

    def _load_valid(self, what: str, key: str, final: Path) -> dict | None:
        """The manifest of a finished entry whose files still match it, else None."""
        manifest_path = final / MANIFEST
        if not manifest_path.is_file():
            return None
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError):
            manifest = {}
        if manifest.get("cache_key") != key:
            self.progress.say(f"{what}: cached manifest does not match the recipe and builder; rebuilding")
            return None
        digest, _ = tree_digest(final)
        if digest != manifest.get("digest"):
            self.progress.say(
                f"WARNING: {what}: cached files at {final} do not match their digest "
                f"({digest[:12]} != {str(manifest.get('digest'))[:12]}); rebuilding"
            )
            return None
        return manifest

    def get_or_build(
        self, name: str, recipe: dict, builder: dict, build: BuildFn, rebuild: bool = False, kind: str = "engine"
    ) -> BuiltEngine:
        """The cached `kind` for (recipe, builder), built by `build(staging_dir)` when missing or invalid."""
        start = time.monotonic()
        what = f"{kind} {name}"
        key = self.key(recipe, builder)
        final = self.entry_dir(kind, name, key)
        lock = self.lock_for(key[:12])
        try:
            lock.acquire(timeout=0)
        except Timeout:
            self.progress.say(f"{what}: another session is building it; waiting for {lock.lock_file}")
            lock.acquire()
        try:
            if not rebuild:
                manifest = self._load_valid(what, key, final)
                if manifest is not None:
                    self.progress.say(f"{what}: reusing {final} (digest {manifest['digest'][:12]})")
                    return BuiltEngine(name, final, manifest, True, time.monotonic() - start)
            manifest = self._build(what, recipe, builder, key, final, build)
            return BuiltEngine(name, final, manifest, False, time.monotonic() - start)
        finally:
            lock.release()

    def _build(self, what: str, recipe: dict, builder: dict, key: str, final: Path, build: BuildFn) -> dict:
        staging = final.parent / f".build-{key[:12]}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            with self.progress.step(f"{what}: building in {staging}"):
                started = time.monotonic()
                extra = build(staging)
                digest, files = tree_digest(staging)
                manifest = {
                    "name": final.name.rsplit("-", 1)[0],
                    "recipe": recipe,
                    "builder": builder,
                    "cache_key": key,
                    "digest": digest,
                    "files": files,
                    "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "build_seconds": round(time.monotonic() - started, 1),
                    **extra,
                }
                (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            self._publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.progress.say(f"{what}: ready at {final} (digest {digest[:12]})")
        return manifest

    @staticmethod
    def _publish(staging: Path, final: Path) -> None:
        """Swap the new build in; an old one (rebuild, or stale) is removed only afterwards."""
        old = None
        if final.exists():
            old = final.parent / f".old-{final.name}-{os.getpid()}"
            os.rename(final, old)
        os.rename(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
