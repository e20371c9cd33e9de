import datetime as _dt
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_triton_llm.stack import cache as cache_module
from pytest_triton_llm import cli
from pytest_triton_llm.stack.cache import MANIFEST, EngineCache
from pytest_triton_llm.cli.cache import CacheAdminError, list_cache, prune, render_pruned
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.common.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
BUILDER = {"backend": "test", "builder_version": 1}


@pytest.fixture
def engine():
    return load_lock(ROOT / "engines.lock").engines["smollm2-135m"]


def quiet(lines: list | None = None) -> Progress:
    return Progress((lines if lines is not None else []).append)


def counting_build(counter: Path):
    def build(out: Path) -> dict:
        with open(counter, "a") as fh:
            fh.write("x")
        (out / "weights.bin").write_bytes(b"weights")
        return {"extra": 1}

    return build


def test_builds_once_then_reuses(tmp_path, engine):
    cache, counter = EngineCache(tmp_path / "cache", quiet()), tmp_path / "count"
    first = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    second = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert counter.read_text() == "x"
    assert (first.cached, second.cached) == (False, True)
    assert first.path == second.path and first.path.name.startswith("e-")
    manifest = json.loads((first.path / MANIFEST).read_text())
    assert manifest["cache_key"] == EngineCache.key(engine.recipe(), BUILDER) and manifest["extra"] == 1
    assert manifest["digest"] == second.digest
    assert not [p for p in first.path.parent.iterdir() if p.name.startswith(".")]


def test_corrupted_engine_is_rebuilt_with_a_warning(tmp_path, engine):
    lines = []
    cache, counter = EngineCache(tmp_path / "cache", quiet(lines)), tmp_path / "count"
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    (built.path / "weights.bin").write_bytes(b"tampered")
    again = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert counter.read_text() == "xx"
    assert (again.path / "weights.bin").read_bytes() == b"weights"
    assert any("WARNING" in line and "do not match their digest" in line for line in lines)


def test_failed_build_leaves_nothing_behind_and_keeps_the_old_engine(tmp_path, engine):
    cache = EngineCache(tmp_path / "cache", quiet())
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(tmp_path / "count"))

    def broken(out: Path) -> dict:
        (out / "half").write_text("partial")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        cache.get_or_build("e", engine.recipe(), BUILDER, broken, rebuild=True)
    assert sorted(p.name for p in built.path.parent.iterdir()) == [built.path.name]
    assert (built.path / "weights.bin").read_bytes() == b"weights"


def test_rebuild_replaces_the_cached_engine(tmp_path, engine):
    cache, counter = EngineCache(tmp_path / "cache", quiet()), tmp_path / "count"
    cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    rebuilt = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter), rebuild=True)
    assert counter.read_text() == "xx" and not rebuilt.cached


def _build_in_process(root: str, counter: str, barrier) -> None:
    engine = load_lock(ROOT / "engines.lock").engines["smollm2-135m"]

    def slow(out: Path) -> dict:
        time.sleep(1.0)
        return counting_build(Path(counter))(out)

    barrier.wait()
    EngineCache(root, quiet()).get_or_build("e", engine.recipe(), BUILDER, slow)


def test_parallel_sessions_build_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_build_in_process, args=(str(tmp_path / "cache"), str(tmp_path / "count"), barrier)) for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert (tmp_path / "count").read_text() == "x"


def test_a_new_builder_version_does_not_reuse_the_old_engine(tmp_path, engine):
    cache, counter = EngineCache(tmp_path / "cache", quiet()), tmp_path / "count"
    old = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    new = cache.get_or_build("e", engine.recipe(), dict(BUILDER, builder_version=2), counting_build(counter))
    assert counter.read_text() == "xx" and old.path != new.path and old.path.is_dir()


def test_a_reuse_with_matching_sizes_and_mtimes_reads_no_file(tmp_path, engine, monkeypatch):
    lines = []
    cache = EngineCache(tmp_path / "cache", quiet(lines))
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(tmp_path / "count"))
    assert json.loads((built.path / MANIFEST).read_text())["stat"]["weights.bin"][0] == len(b"weights")

    def no_hashing(*args, **kwargs):
        raise AssertionError("a reuse with matching sizes and mtimes must not hash")

    monkeypatch.setattr(cache_module, "file_sha256", no_hashing)
    again = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(tmp_path / "count"))
    assert again.cached and (tmp_path / "count").read_text() == "x"
    assert any("size and mtime checked; --engines-verify hashes every file" in line for line in lines)


def test_a_changed_size_forces_the_full_check_and_a_rebuild(tmp_path, engine):
    lines = []
    cache, counter = EngineCache(tmp_path / "cache", quiet(lines)), tmp_path / "count"
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    (built.path / "weights.bin").write_bytes(b"longer weights")
    again = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert counter.read_text() == "xx" and not again.cached
    assert any("differ in size, mtime or number" in line for line in lines)
    assert any("verifying digest of 1 files" in line for line in lines)
    assert any("do not match their digest" in line for line in lines)


def test_an_extra_file_forces_the_full_check(tmp_path, engine):
    lines = []
    cache, counter = EngineCache(tmp_path / "cache", quiet(lines)), tmp_path / "count"
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    (built.path / "stray.bin").write_bytes(b"")
    cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert counter.read_text() == "xx" and any("do not match their digest" in line for line in lines)


def test_verify_hashes_every_file_and_reports_progress(tmp_path, engine, monkeypatch):
    root, counter = tmp_path / "cache", tmp_path / "count"
    EngineCache(root, quiet()).get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    hashed, lines = [], []
    real = cache_module.file_sha256
    monkeypatch.setattr(cache_module, "file_sha256", lambda path, **kw: hashed.append(path.name) or real(path, **kw))
    monkeypatch.setattr(cache_module, "VERIFY_REPORT_S", 0.0)
    again = EngineCache(root, quiet(lines), verify=True).get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert again.cached and hashed == ["weights.bin"] and counter.read_text() == "x"
    assert any("engine e: verifying digest: 0.0/0.0 GiB" in line for line in lines)
    assert any("verifying digest of 1 files (7 B): done in" in line for line in lines)


def test_an_old_manifest_without_stat_is_reused_after_a_full_check_then_cheaply(tmp_path, engine, monkeypatch):
    lines = []
    cache, counter = EngineCache(tmp_path / "cache", quiet(lines)), tmp_path / "count"
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    manifest = json.loads((built.path / MANIFEST).read_text())
    del manifest["stat"]
    (built.path / MANIFEST).write_text(json.dumps(manifest))
    again = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    assert again.cached and counter.read_text() == "x"
    assert any("verifying digest of 1 files" in line for line in lines)
    assert "stat" in json.loads((built.path / MANIFEST).read_text())  # recorded for the next reuse
    monkeypatch.setattr(cache_module, "file_sha256", lambda *a, **kw: pytest.fail("hashed again"))
    assert cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter)).cached
    assert [p.name for p in built.path.parent.iterdir()] == [built.path.name]  # no scratch manifest left


def test_a_touched_file_with_the_same_content_is_reused_after_a_full_check(tmp_path, engine):
    lines = []
    cache, counter = EngineCache(tmp_path / "cache", quiet(lines)), tmp_path / "count"
    built = cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter))
    os.utime(built.path / "weights.bin", ns=(1, 1))
    assert cache.get_or_build("e", engine.recipe(), BUILDER, counting_build(counter)).cached
    assert counter.read_text() == "x" and any("verifying digest" in line for line in lines)
    assert json.loads((built.path / MANIFEST).read_text())["stat"]["weights.bin"][1] == 1


# --- cache list / prune ---


def _age(entry: Path, days: float) -> None:
    """Pretends `entry` was built `days` ago."""
    manifest = json.loads((entry / MANIFEST).read_text())
    when = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=days)
    manifest["built_at"] = when.isoformat(timespec="seconds")
    (entry / MANIFEST).write_text(json.dumps(manifest))


@pytest.fixture
def filled(tmp_path, engine):
    """A cache with an engine built 40 days ago, one built today, an adapter 40 days ago and a fetched source."""
    cache = EngineCache(tmp_path / "cache", quiet())
    build = counting_build(tmp_path / "count")
    old = cache.get_or_build("old", engine.recipe(), BUILDER, build).path
    new = cache.get_or_build("new", engine.recipe(), dict(BUILDER, builder_version=2), build).path
    adapter = cache.get_or_build("lora", engine.recipe(), dict(BUILDER, adapter=1), build, kind="adapter").path
    _age(old, 40)
    _age(adapter, 40)
    (cache.sources_dir() / "abc").mkdir(parents=True)
    (cache.sources_dir() / "abc" / "model.gguf").write_bytes(b"s" * 1000)
    return cache, old, new, adapter


def test_the_listing_shows_every_entry_and_the_sources(filled):
    cache, old, new, adapter = filled
    listing = list_cache(cache.root)
    by_name = {e.name: e for e in listing.entries}
    assert sorted(by_name) == ["lora", "new", "old"]
    assert (by_name["lora"].kind, by_name["old"].kind) == ("adapter", "engine")
    assert by_name["old"].key12 == old.name[-12:] and by_name["old"].path == old
    assert by_name["new"].size == len(b"weights") + (new / MANIFEST).stat().st_size
    assert round(by_name["old"].age_days(_dt.datetime.now(_dt.timezone.utc))) == 40
    assert listing.sources_size == 1000 and listing.leftovers == ()


def test_prune_removes_only_entries_older_than_the_age_given(filled):
    cache, old, new, adapter = filled
    pruned = prune(cache.root, 30)
    assert sorted(item.path for item in pruned.removed) == sorted([old, adapter])
    assert not old.exists() and not adapter.exists() and new.is_dir()
    assert pruned.freed > 0 and pruned.skipped == ()
    assert not [p for p in old.parent.iterdir() if p.name.startswith(".")]  # no .prune-* left behind


def test_prune_skips_an_entry_whose_lock_is_held(filled):
    cache, old, new, adapter = filled
    held = cache.lock_for(old.name[-12:])  # a second lock on the same file conflicts as another process's would
    held.acquire(timeout=0)
    try:
        pruned = prune(cache.root, 30)
    finally:
        held.release()
    assert old.is_dir() and not adapter.exists()
    assert [(item.path, "is held by another process" in why) for item, why in pruned.skipped] == [(old, True)]
    assert "would" not in render_pruned(pruned) and f"skipped {old}" in render_pruned(pruned)


def test_a_dry_run_removes_nothing_and_says_what_would_go(filled):
    cache, old, new, adapter = filled
    pruned = prune(cache.root, 30, dry_run=True)
    assert old.is_dir() and adapter.is_dir() and len(pruned.removed) == 2
    text = render_pruned(pruned)
    assert f"would remove {old}" in text and "dry run: nothing was removed" in text


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_prune_removes_folders_of_dead_builds_but_not_a_running_one(filled):
    cache, old, new, adapter = filled
    stale = old.parent / f".build-{old.name[-12:]}-{_dead_pid()}"
    running = old.parent / f".build-{new.name[-12:]}-{os.getpid()}"
    for folder in (stale, running):
        folder.mkdir()
        (folder / "half").write_text("partial")
    pruned = prune(cache.root, 1000)
    assert not stale.exists() and running.is_dir() and new.is_dir()
    assert [item.path for item in pruned.removed] == [stale]
    assert [(item.path, why) for item, why in pruned.skipped] == [(running, f"its process (pid {os.getpid()}) is still running")]


def test_prune_without_an_age_removes_nothing(filled):
    cache, old, new, adapter = filled
    with pytest.raises(CacheAdminError, match="explicit age"):
        prune(cache.root, None)
    assert old.is_dir() and adapter.is_dir()


@pytest.mark.parametrize(
    "args, error",
    [
        (["prune"], "prune needs an explicit age: --older-than DAYS; nothing was removed"),
        (["prune", "--older-than", "-1"], "--older-than must be 0 days or more, not -1"),
        (["list", "--cache-dir", "{missing}"], "no engine cache at {missing}"),
    ],
)
def test_bad_cache_commands_exit_2_with_one_line(filled, capsys, tmp_path, args, error):
    cache, old, new, adapter = filled
    missing = str(tmp_path / "missing")
    args = [a.format(missing=missing) for a in args]
    if "--cache-dir" not in args:
        args += ["--cache-dir", str(cache.root)]
    assert cli.main(["cache", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"pytest-triton-llm cache: error: {error.format(missing=missing)}\n"
    assert old.is_dir() and adapter.is_dir()


def test_the_cli_prints_the_table_with_totals_and_what_prune_freed(filled, capsys):
    cache, old, new, adapter = filled
    assert cli.main(["cache", "list", "--cache-dir", str(cache.root)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["NAME", "KIND", "KEY", "SIZE", "BUILT", "(UTC)", "AGE", "PATH"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:-1]}
    assert rows["old"][:3] == ["old", "engine", old.name[-12:]] and rows["old"][-3:] == ["40.0", "d", str(old)]
    assert rows["lora"][1] == "adapter" and rows["lora"][-1] == str(adapter)
    assert out.splitlines()[-1].startswith("total: 3 entries (2 engines, 1 adapter), ")
    assert "sources/: 1000 B" in out
    assert cli.main(["cache", "prune", "--older-than", "30", "--cache-dir", str(cache.root)]) == 0
    out = capsys.readouterr().out
    assert f"removed {old} (engine, built " in out and "freed " in out and "in 2 folders" in out
    assert not old.exists() and new.is_dir()
