"""The commit a perf run was made at: what the history shows as changed when a regression begins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CI_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "GIT_COMMIT")  # GitHub Actions, GitLab CI, Jenkins


def current_commit(cwd: Path | None = None) -> str | None:
    """The CI's commit variable, else `git rev-parse --short HEAD` here, else None (not a checkout, or no git)."""
    for name in CI_VARIABLES:
        if os.environ.get(name):
            return os.environ[name][:12]
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
