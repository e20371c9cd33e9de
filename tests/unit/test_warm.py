"""Warm servers' bookkeeping (stack/runtimes/warm.py): what makes two repositories the same server, and which slot a
session takes. The servers themselves: tests/integration/test_warm_servers.py."""

import json
import os
import shutil

import pytest

from pytest_triton_llm.host.processes import process_start_time
from pytest_triton_llm.stack.runtimes import warm
from pytest_triton_llm.common.usage import OptionError
from pytest_triton_llm.plugin.options import keep_warm

ENV = {"OMP_NUM_THREADS": "2", "PATH": "/usr/bin"}


def repository(root):
    (root / "tensorrt_llm" / "1").mkdir(parents=True)
    (root / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\n')
    (root / "tensorrt_llm" / "1" / "model.py").write_text("print('stand-in')\n")
    return root


def test_the_same_files_anywhere_are_the_same_server_and_any_change_or_rebuild_is_another(tmp_path):
    one = repository(tmp_path / "a" / "model_repository")
    two = shutil.copytree(one, tmp_path / "b" / "model_repository")
    (two / "tensorrt_llm" / "1" / "__pycache__").mkdir()
    (two / "tensorrt_llm" / "1" / "__pycache__" / "model.pyc").write_bytes(b"compiled")  # the server's, not ours
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"digest": "1", "built_at": "then"}')
    digest = warm.repository_digest(one, "/bin/tritonserver", None, manifest, ENV)
    assert warm.repository_digest(two, "/bin/tritonserver", None, manifest, {**ENV, "PATH": "/other"}) == digest
    assert warm.repository_digest(two, "/bin/tritonserver", None, manifest, {**ENV, "OMP_NUM_THREADS": "1"}) != digest
    assert warm.repository_digest(two, "/other/tritonserver", None, manifest, ENV) != digest
    manifest.write_text('{"digest": "1", "built_at": "now"}')  # the engine rebuilt where it was
    assert warm.repository_digest(two, "/bin/tritonserver", None, manifest, ENV) != digest
    manifest.write_text('{"digest": "1", "built_at": "then"}')
    (two / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\nparameters {}\n')
    assert warm.repository_digest(two, "/bin/tritonserver", None, manifest, ENV) != digest


def me() -> dict:
    return {"pid": os.getpid(), "start": process_start_time(os.getpid())}


def lease(slot, keeper: dict, held: dict | None) -> None:
    slot.mkdir(parents=True)
    (slot / warm.LEASE).write_text(json.dumps({"keeper": keeper, "endpoints": {}, "since": "then", "deployment": "d"}))
    if held is not None:
        (slot / warm.HOLDER).write_text(json.dumps(held))


def test_a_session_takes_an_idle_slot_never_a_held_one_and_starts_over_a_dead_keeper(tmp_path):
    gone = {"pid": os.getpid(), "start": "not this process"}
    lease(tmp_path / "d-0", me(), held=me())  # held by a running session
    lease(tmp_path / "d-1", me(), held=gone)  # its session died: free
    assert warm._free_slot(tmp_path, "d") == (tmp_path / "d-1", json.loads((tmp_path / "d-1" / warm.LEASE).read_text()))
    (tmp_path / "d-1" / warm.HOLDER).write_text(json.dumps(me()))
    assert warm._free_slot(tmp_path, "d") == (tmp_path / "d-2", None)  # every live server held: a new slot
    lease(tmp_path / "e-0", gone, held=None)  # its keeper is gone: started over in place
    assert warm._free_slot(tmp_path, "e") == (tmp_path / "e-0", None)
    lease(tmp_path / "e-1", me(), held=None)  # ... unless a later slot's server is free
    assert warm._free_slot(tmp_path, "e")[0] == tmp_path / "e-1"


def test_a_server_being_stopped_is_neither_taken_nor_started_over_in_its_slot(tmp_path):
    lease(tmp_path / "d-0", me(), held=None)
    withdrawn = json.loads((tmp_path / "d-0" / warm.LEASE).read_text())
    (tmp_path / "d-0" / warm.LEASE).write_text(json.dumps({**withdrawn, "withdrawn": True}))
    assert warm._free_slot(tmp_path, "d") == (tmp_path / "d-1", None)


def test_a_fault_is_switched_on_for_its_holder_and_off_when_it_lets_go_or_a_dead_holders_slot_is_taken(tmp_path):
    slot = tmp_path / "d-0"
    lease(slot, me(), held=me())
    warm.switch_fault(slot, "end_id_ignored")
    first = (slot / warm.FAULT).stat().st_ino
    warm.switch_fault(slot, "bos_doubled")  # replaced, never rewritten: a reader sees one name or the other
    assert (slot / warm.FAULT).read_text() == "bos_doubled" and (slot / warm.FAULT).stat().st_ino != first
    warm.Lease(slot, me()).stop()
    assert not (slot / warm.FAULT).exists() and not (slot / warm.HOLDER).exists()
    warm.switch_fault(slot, "bos_doubled")  # a holder that died with its fault on ...
    warm.switch_fault(slot, None)  # ... is switched off by the next taker (warm.take), before it is served
    assert not (slot / warm.FAULT).exists()


@pytest.mark.parametrize(("given", "env", "seconds"), [(None, None, 0.0), (None, "90", 90.0), (30.0, "90", 30.0)])
def test_keep_warm_comes_from_the_option_then_the_environment(monkeypatch, given, env, seconds):
    monkeypatch.delenv("TRITON_LLM_KEEP_WARM", raising=False)
    if env is not None:
        monkeypatch.setenv("TRITON_LLM_KEEP_WARM", env)
    assert keep_warm(given) == seconds


@pytest.mark.parametrize("env", ["-1", "soon"])
def test_a_bad_keep_warm_says_what_to_give(monkeypatch, env):
    monkeypatch.setenv("TRITON_LLM_KEEP_WARM", env)
    with pytest.raises(OptionError, match="give seconds >= 0"):
        keep_warm(None)
