"""Installed from a wheel, without the checkout: the suites, their fixtures and the default lock ship in it, and
`pytest-triton-llm run` runs the functional suite on the embedded default from a directory that holds nothing.

The wheel goes into a fresh venv with --no-deps; the dependencies come from this environment's site-packages by a
path line in a .pth file (which does not run the editable install's import hook there), so only the wheel's own
files can be imported as pytest_triton_llm."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ..conftest import package_source_copy, run_child

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = run_child(argv, **kwargs)
    assert done.returncode == 0, f"{argv[:5]} exit {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = package_source_copy(tmp / "src")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(source)])
    [wheel] = (tmp / "dist").glob("pytest_triton_llm-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)])
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_wheel_holds_the_suites_their_fixtures_and_the_default_lock(wheel_venv):
    python = str(wheel_venv / "bin" / "python")
    where = run([python, "-c", "import pytest_triton_llm.suites as s; print(s.__file__)"], cwd=wheel_venv).stdout.strip()
    package = Path(where).parents[1]
    assert package.is_relative_to(wheel_venv), where  # the wheel's copy, not the checkout
    assert {p.name for p in (package / "fixtures").iterdir()} >= {
        "engines.lock",
        "prompts.toml",
        "perf_budgets.toml",
        "perf_workloads.toml",
        "lora_adapters.toml",
    }
    assert (package / "fixtures" / "contracts" / "trtllm-0.14.toml").is_file()  # the functional suite's contracts


def test_pytest_triton_llm_run_passes_the_functional_suite_on_the_embedded_default(wheel_venv, tmp_path):
    python = str(wheel_venv / "bin" / "python")
    argv = [
        python,
        "-m",
        "pytest_triton_llm.cli",
        "run",
        "-m",
        "functional and not properties",
        "--deployment",
        "smollm2-135m:v1",
        "-k",
        "not tensorrt_llm_bls",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    done = run_child(argv, cwd=tmp_path, timeout=1100)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"the packaged {wheel_venv}" in done.stderr  # no ./engines.lock here: the wheel's default lock
    summary = done.stdout.strip().splitlines()[-1]
    assert " failed" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 20, summary
