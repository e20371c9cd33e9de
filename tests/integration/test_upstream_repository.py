"""A real user's model repository, served: upstream tensorrtllm_backend v0.14.0's all_models/inflight_batcher_llm
(../shared/upstream, third-party test data), filled from a lock as tools/fill_template.py fills it, on the embedded
Triton 2.51 (the server of NGC 24.10, whose backend is v0.14.0), with only its tensorrt_llm model served by the
reference stand-in, on the tiny engine of random weights (fixtures/engines.tiny.lock). The functional, streaming and
early-stop suites pass against it through its entry models, `ensemble` and `tensorrt_llm_bls`, running upstream's own
preprocessing, postprocessing and BLS code unchanged (the tests that need trained weights skip).

Upstream v0.14.0's tensorrt_llm_bls loads on Python <= 3.10 only (NGC 24.10 runs 3.10): its lib/decode.py gives
dataclass fields the default np.array([]), which Python 3.11 refuses ("mutable default ... is not allowed"). Where
the python backend stub runs a newer Python, the deployments serve every model but that one (the lock's `models`),
and the BLS entry is left out with that reason."""

import json
import sys
from pathlib import Path

import pytest

from ..conftest import TINY_LOCK, run_child
from ..third_party import UPSTREAM_MODELS, needs_upstream

ROOT = Path(__file__).resolve().parents[2]
MODELS = UPSTREAM_MODELS
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(2400),
    needs_upstream,
]


BLS_LOADS = sys.version_info < (3, 11)  # the stub runs this interpreter's Python
# passed tests per entry model, the old bound of both together (40) split as they pass (22 and 38, 2026-12-02)
MIN_PASSED = {"upstream-v1": 15, "upstream-inflight": 25}
ENTRIES = ("ensemble", "tensorrt_llm_bls") if BLS_LOADS else ("ensemble",)
MODELS_SERVED = "" if BLS_LOADS else 'models = ["preprocessing", "tensorrt_llm", "postprocessing", "ensemble"]'


def upstream_lock(tmp_path: Path) -> Path:
    """fixtures/engines.tiny.lock (its dummy config by absolute path) with deployments of upstream's repository: what
    is proved here is upstream's code serving, not the answers, which the default's own runs judge."""
    config = TINY_LOCK.parent / "dummy"
    engines = TINY_LOCK.read_text().replace('config = "dummy/', f'config = "{config}/')
    deployments = f"""
[engines.tiny.deployments.upstream-v1]
batching = "v1"
repository = "{MODELS}"
{MODELS_SERVED}

[engines.tiny.deployments.upstream-inflight]
batching = "inflight"
decoupled = true
repository = "{MODELS}"
{MODELS_SERVED}
"""
    lock = tmp_path / "upstream.lock"
    lock.write_text(engines + deployments)
    return lock


# Each deployment in a session of its own: under xdist the two run on two workers instead of one after the other
# (together they were Quickstart 2's longest test, 415 s on a 2-core machine, 2026-12-02).
@pytest.mark.parametrize("deployment", ["upstream-v1", "upstream-inflight"])
def test_upstreams_own_repository_passes_the_suites_through_its_entry_models(tmp_path, deployment):
    report = tmp_path / "report.json"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "suites"),
        "-m",
        "(functional or streaming or early_stop) and not properties",
        "--engines-lock",
        str(upstream_lock(tmp_path)),
        "--deployment",
        f"tiny:{deployment}",
        "--triton-llm-report",
        str(report),
        "-p",
        "no:cacheprovider",
        "-q",
        f"--basetemp={tmp_path / 'basetemp'}",
    ]
    done = run_child(argv, cwd=ROOT, timeout=2300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    tests = json.loads(report.read_text())["tests"]
    outcomes = {t["nodeid"].split("::")[-1]: t["outcome"] for t in tests}
    assert "failed" not in outcomes.values() and "error" not in outcomes.values()
    for entry in ENTRIES:
        ran = [n for n, o in outcomes.items() if f"tiny:{deployment}-{entry}]" in n and o == "passed"]
        assert len(ran) >= 10, f"{deployment} through {entry}: {ran}"
    assert sum(o == "passed" for o in outcomes.values()) >= MIN_PASSED[deployment] * len(ENTRIES), outcomes
    assert BLS_LOADS or not [n for n, o in outcomes.items() if "tensorrt_llm_bls" in n and o == "passed"]
