"""Listing and pruning the engine cache: `pytest-triton-llm cache list|prune`."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import Timeout

from ..stack.cache import MANIFEST, EngineCache
from ..common.progress import human_bytes
from ..common.errors import TritonLLMError

KINDS = ("engine", "adapter")  # entry folders engines/ and adapters/, as EngineCache.entry_dir names them
_ENTRY = re.compile(r"(?P<name>.+)-(?P<key>[0-9a-f]{12})")
# folders a build, a publish or a prune leaves behind when its process dies: .build-<key12>-<pid>,
# .old-<name>-<key12>-<pid>, .prune-<what it was>-<pid>
_LEFTOVER = re.compile(r"\.(?P<what>build|old|prune)-(?P<rest>.+)-(?P<pid>\d+)")
_KEY12 = re.compile(r"(?:^|-)([0-9a-f]{12})(?=-|$)")


class CacheAdminError(TritonLLMError, ValueError):
    """Bad input (a missing cache, a missing or negative age): reported as one line, exit 2."""


@dataclass(frozen=True)
class Entry:
    """A finished engine or adapter folder."""

    kind: str
    name: str
    key12: str
    path: Path
    size: int
    built_at: _dt.datetime | None  # None: no readable manifest; such a folder is listed, never pruned

    def age_days(self, now: _dt.datetime) -> float | None:
        return None if self.built_at is None else (now - self.built_at).total_seconds() / 86400


@dataclass(frozen=True)
class Leftover:
    """An unfinished folder: a build in progress or one whose process died."""

    kind: str
    what: str  # build | old | prune
    key12: str | None  # None for .prune-*: already taken out under its lock
    pid: int
    path: Path
    size: int

    @property
    def running(self) -> bool:
        return _pid_alive(self.pid)


@dataclass(frozen=True)
class Listing:
    root: Path
    entries: tuple[Entry, ...]
    leftovers: tuple[Leftover, ...]
    sources_size: int


@dataclass(frozen=True)
class Pruned:
    older_than_days: float
    dry_run: bool
    removed: tuple[Entry | Leftover, ...]
    skipped: tuple[tuple[Entry | Leftover, str], ...]  # with the reason it stays

    @property
    def freed(self) -> int:
        return sum(item.size for item in self.removed)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _pid_alive(pid: int) -> bool:
    """Whether `pid` runs in this pid namespace; a pid of another namespace (a container sharing the cache)
    may read as gone, which is why removal also needs the entry's lock."""
    if pid <= 0:
        return True  # os.kill(0, ...) would mean our own process group: never treat it as gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tree_size(path: Path) -> int:
    """Bytes of the files under `path` (symlinks not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass  # removed while we walked
    return total


def _built_at(path: Path) -> _dt.datetime | None:
    try:
        when = _dt.datetime.fromisoformat(json.loads((path / MANIFEST).read_text())["built_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def _leftover(kind: str, path: Path) -> Leftover | None:
    match = _LEFTOVER.fullmatch(path.name)
    if match is None:
        return None
    keys = _KEY12.findall(match["rest"])
    key12 = keys[-1] if keys and match["what"] != "prune" else None
    if key12 is None and match["what"] != "prune":
        return None  # not a name the cache makes: leave it alone
    return Leftover(kind, match["what"], key12, int(match["pid"]), path, tree_size(path))


def _entries_of(kind: str, folder: Path) -> tuple[list[Entry], list[Leftover]]:
    entries, leftovers = [], []
    for path in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        if path.name.startswith("."):
            leftover = _leftover(kind, path)
            leftovers += [leftover] if leftover else []
        elif match := _ENTRY.fullmatch(path.name):
            entries.append(Entry(kind, match["name"], match["key"], path, tree_size(path), _built_at(path)))
    return entries, leftovers


def list_cache(root: Path | str) -> Listing:
    """Every engine and adapter under `root`, with the unfinished folders and the size of sources/."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise CacheAdminError(f"no engine cache at {root}")
    entries, leftovers = [], []
    for kind in KINDS:
        found, left = _entries_of(kind, root / f"{kind}s")
        entries += found
        leftovers += left
    return Listing(root, tuple(entries), tuple(leftovers), tree_size(root / "sources"))


def _check_age(older_than_days: float | None) -> float:
    if older_than_days is None:
        # removing built engines costs hours of rebuilding: an age must be asked for, never assumed
        raise CacheAdminError("prune needs an explicit age: --older-than DAYS; nothing was removed")
    if not older_than_days >= 0:  # also refuses NaN
        raise CacheAdminError(f"--older-than must be 0 days or more, not {older_than_days:g}")
    return older_than_days


def _candidates(listing: Listing, older_than_days: float, now: _dt.datetime) -> list[Entry | Leftover]:
    """Finished entries built more than `older_than_days` ago, and every unfinished folder (running ones are
    skipped by `_take_out`, so the user hears why their space stays)."""
    old = [e for e in listing.entries if (age := e.age_days(now)) is not None and age > older_than_days]
    return [*old, *listing.leftovers]


def _take_out(cache: EngineCache, item: Entry | Leftover, dry_run: bool) -> tuple[Path | None, str | None]:
    """Renames `item` to a .prune-* name under its lock, so no builder or reuse check of its key sees half of it.
    Returns (the folder to delete, None), or (None, why it stays); a dry run only tests the lock."""
    if isinstance(item, Leftover) and item.running:
        return None, f"its process (pid {item.pid}) is still running"
    if item.key12 is None:
        return (None if dry_run else item.path), None  # a .prune-* folder is already out of every reader's way
    # the lock file itself stays: unlinking one another process may be opening would let two holders in
    lock = cache.lock_for(item.key12)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None, f"its lock {lock.lock_file} is held by another process (building or checking it)"
    try:
        if dry_run:
            return None, None
        doomed = item.path.parent / f".prune-{item.path.name}-{os.getpid()}"
        os.rename(item.path, doomed)
        return doomed, None
    except OSError as exc:
        return None, f"cannot move it aside: {exc}"
    finally:
        lock.release()


def prune(root: Path | str, older_than_days: float | None, dry_run: bool = False, now: _dt.datetime | None = None) -> Pruned:
    """Removes finished entries built more than `older_than_days` ago and folders left by dead builds; never an
    entry whose lock is held (a build or a reuse check of it is running), never a build of a live pid.

    A session that reused an entry and serves it no longer holds its lock: pick an age no running session's
    engines can have."""
    older_than_days = _check_age(older_than_days)
    listing = list_cache(root)
    cache = EngineCache(listing.root)
    removed, skipped = [], []
    for item in _candidates(listing, older_than_days, now or _now()):
        doomed, reason = _take_out(cache, item, dry_run)
        if reason is not None:
            skipped.append((item, reason))
            continue
        if doomed is not None:
            shutil.rmtree(doomed, ignore_errors=True)  # out of every reader's way already; a rest is a .prune-* leftover
        removed.append(item)
    return Pruned(older_than_days, dry_run, tuple(removed), tuple(skipped))


# --- rendering for the CLI ---

HEADER = ("NAME", "KIND", "KEY", "SIZE", "BUILT (UTC)", "AGE", "PATH")


def _when(when: _dt.datetime | None) -> str:
    return "-" if when is None else when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _entry_row(entry: Entry, now: _dt.datetime) -> tuple[str, ...]:
    age = entry.age_days(now)
    built = _when(entry.built_at) if entry.built_at else "no manifest"
    return (
        entry.name,
        entry.kind,
        entry.key12,
        human_bytes(entry.size),
        built,
        "-" if age is None else f"{age:.1f} d",
        str(entry.path),
    )


def _leftover_row(left: Leftover) -> tuple[str, ...]:
    state = f"running (pid {left.pid})" if left.running else f"stale (pid {left.pid} gone)"
    return (left.path.name, f"{left.kind} .{left.what}", left.key12 or "-", human_bytes(left.size), state, "-", str(left.path))


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]

    def line(row: tuple[str, ...]) -> str:
        # sizes right-aligned, so their magnitudes line up
        return "  ".join(cell.rjust(w) if i == 3 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))

    return "".join(line(row).rstrip() + "\n" for row in rows)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def render_listing(listing: Listing, now: _dt.datetime | None = None) -> str:
    now = now or _now()
    rows = [HEADER, *(_entry_row(e, now) for e in listing.entries), *(_leftover_row(left) for left in listing.leftovers)]
    counts = ", ".join(_count(sum(e.kind == kind for e in listing.entries), kind) for kind in KINDS)
    size = human_bytes(sum(e.size for e in listing.entries))
    total = f"total: {_count(len(listing.entries), 'entry', 'entries')} ({counts}), {size}"
    if listing.leftovers:
        total += f"; unfinished folders: {len(listing.leftovers)}, {human_bytes(sum(x.size for x in listing.leftovers))}"
    return _table(rows) + f"{total}; sources/: {human_bytes(listing.sources_size)}; cache: {listing.root}\n"


def _describe(item: Entry | Leftover, now: _dt.datetime) -> str:
    if isinstance(item, Leftover):
        return f"{item.path} ({item.kind} .{item.what} folder of pid {item.pid}; {human_bytes(item.size)})"
    age = item.age_days(now)
    return f"{item.path} ({item.kind}, built {_when(item.built_at)} UTC, {age:.1f} days ago; {human_bytes(item.size)})"


def render_pruned(pruned: Pruned, now: _dt.datetime | None = None) -> str:
    now = now or _now()
    verb = "would remove" if pruned.dry_run else "removed"
    lines = [f"{verb} {_describe(item, now)}" for item in pruned.removed]
    skip = "would skip" if pruned.dry_run else "skipped"
    lines += [f"{skip} {_describe(item, now)}: {reason}" for item, reason in pruned.skipped]
    if not pruned.removed and not pruned.skipped:
        lines.append(f"nothing built more than {pruned.older_than_days:g} days ago, and no stale folders")
    freed = f"{human_bytes(pruned.freed)} ({pruned.freed} bytes)"
    lines.append(
        f"{'would free' if pruned.dry_run else 'freed'} {freed} in {_count(len(pruned.removed), 'folder')}"
        + ("; dry run: nothing was removed" if pruned.dry_run else "")
    )
    return "\n".join(lines) + "\n"
