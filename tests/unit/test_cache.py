import json
import multiprocessing
import time
from pathlib import Path

import pytest

from pytest_triton_llm.cache import MANIFEST, EngineCache
from pytest_triton_llm.lock import load_lock
from pytest_triton_llm.progress import Progress

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
    procs = [ctx.Process(target=_build_in_process, args=(str(tmp_path / "cache"), str(tmp_path / "count"), barrier))
             for _ in range(2)]  # fmt: skip
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
