"""The user manual's "GPU host with docker" steps (docs/getting-started.md) are the nightly workflow's: every
command of the section is a run line of the workflow's host-containers job, and the job runs nothing else but
checkout, setup-python, the perf history's cache restore and save, and artifact upload."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "getting-started.md"
SECTION = "## GPU host with docker\n"


def guide_steps() -> list[str]:
    text = GUIDE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith(("#", "export "))]


def workflow_run_lines() -> list[str]:
    job = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly-gpu.yml").read_text())["jobs"]["host-containers"]
    return [line.strip() for step in job["steps"] if "run" in step for line in step["run"].splitlines() if line.strip()]


def test_the_guides_gpu_host_steps_are_the_workflows_run_lines_in_order():
    assert guide_steps() == workflow_run_lines()


def test_the_guide_exports_what_the_workflow_job_sets_from_its_matrix():
    text = GUIDE.read_text().split(SECTION, 1)[1]
    exported = text.split("export ", 1)[1].split("#", 1)[0].split()
    job = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly-gpu.yml").read_text())["jobs"]["host-containers"]
    assert sorted(name.split("=")[0] for name in exported) == sorted(job["env"])
