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
and a finished engine is never deleted except by an explicit --engines-rebuild or
`pytest-triton-llm cache prune --older-than DAYS` (see cli/cache.py).

Reuse is checked cheaply: the manifest records each file's sha256 and its size and
mtime_ns ("stat"); when every file is present with the recorded size and mtime (and
no file was added), the entry is reused without reading it. Otherwise - an older
manifest without "stat", or any difference - every file is hashed against its
digest, with progress lines. A file whose content changed while its size and mtime
did not is caught only by that full check, which --engines-verify forces.
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

from ..common.progress import Progress, human_bytes

MANIFEST = "manifest.json"
VERIFY_OPTION = "--engines-verify"  # the option that forces the full check, named in progress lines
VERIFY_REPORT_S = 10.0  # a full check says how far it got this often, so hashing 16 GB is not silent
GIB = 1 << 30

# per file (relative path): [size, mtime_ns], what the cheap reuse check compares
Stat = dict[str, list[int]]


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

    @property
    def tokenizer_path(self) -> Path:
        """Where the engine keeps its tokenizer: a subdirectory the build names in the manifest (a TensorRT-LLM
        engine's own config.json would shadow the checkpoint's), else the engine directory itself."""
        return self.path / self.manifest.get("tokenizer", "")


def file_sha256(path: Path, chunk: int = 1 << 20, read: Callable[[int], None] | None = None) -> str:
    """sha256 of a file's content; `read(n)` hears of every block, for progress."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
            if read is not None:
                read(len(block))
    return digest.hexdigest()


def _tree_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def tree_digest(root: Path, read: Callable[[int], None] | None = None) -> tuple[str, dict[str, str]]:
    """sha256 over every file (name and content) except the manifest."""
    files = {}
    for path in _tree_files(root):
        files[path.relative_to(root).as_posix()] = file_sha256(path, read=read)
    blob = json.dumps(files, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest(), files


def tree_stat(root: Path) -> Stat:
    """[size, mtime_ns] of every file except the manifest: reading metadata only, never content."""
    stat = {}
    for path in _tree_files(root):
        st = path.stat()
        stat[path.relative_to(root).as_posix()] = [st.st_size, st.st_mtime_ns]
    return stat


class _HashProgress:
    """Counts the bytes a full check has hashed and says how far it got every VERIFY_REPORT_S seconds."""

    def __init__(self, progress: Progress, what: str, total: int):
        self.progress, self.what, self.total = progress, what, total
        self.done = 0
        self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.last >= VERIFY_REPORT_S:
            self.last = time.monotonic()
            self.progress.say(f"{self.what}: verifying digest: {self.done / GIB:.1f}/{self.total / GIB:.1f} GiB")


# builds the engine into an empty directory; returns extra manifest fields
BuildFn = Callable[[Path], dict]


class EngineCache:
    def __init__(self, root: Path | str, progress: Progress | None = None, verify: bool = False):
        """verify: hash every file of a reused entry even when its sizes and mtimes match (VERIFY_OPTION)."""
        self.root = Path(root).expanduser()
        self.progress = progress or Progress()
        self.verify = verify

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
        stat = tree_stat(final)
        if not self.verify and manifest.get("stat") == stat:
            self.progress.say(
                f"{what}: reusing {final} (digest {manifest['digest'][:12]}; size and mtime checked; "
                f"{VERIFY_OPTION} hashes every file)"
            )
            return manifest
        if not self.verify and "stat" in manifest:
            self.progress.say(f"{what}: files at {final} differ in size, mtime or number from the manifest; hashing them")
        digest = self._verified_digest(what, final, stat)
        if digest != manifest.get("digest"):
            self.progress.say(
                f"WARNING: {what}: cached files at {final} do not match their digest "
                f"({digest[:12]} != {str(manifest.get('digest'))[:12]}); rebuilding"
            )
            return None
        self.progress.say(f"{what}: reusing {final} (digest {manifest['digest'][:12]})")
        return self._record_stat(final, manifest, stat)

    def _verified_digest(self, what: str, final: Path, stat: Stat) -> str:
        """The tree digest of `final`, hashing every file, with progress lines (an engine can be 16 GB)."""
        total = sum(size for size, _ in stat.values())
        with self.progress.step(f"{what}: verifying digest of {len(stat)} files ({human_bytes(total)})"):
            digest, _ = tree_digest(final, read=_HashProgress(self.progress, what, total))
        return digest

    def _record_stat(self, final: Path, manifest: dict, stat: Stat) -> dict:
        """After a full check passed, record the sizes and mtimes seen, so the next reuse is cheap again
        (an older manifest without "stat", or files whose mtime changed by a copy). Written beside the entry
        (a stray file inside it would fail the next check) and renamed in, so no reader sees half a manifest;
        a read-only cache is left as it is."""
        if manifest.get("stat") == stat:
            return manifest
        manifest = {**manifest, "stat": stat}
        scratch = final.parent / f".manifest-{final.name}-{os.getpid()}"
        try:
            scratch.write_text(json.dumps(manifest, indent=2, sort_keys=True))
            os.replace(scratch, final / MANIFEST)
        except OSError:
            scratch.unlink(missing_ok=True)
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
                    "stat": tree_stat(staging),  # after the last write: renaming the directory keeps mtimes
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
