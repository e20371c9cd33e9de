"""CHANGELOG.md moves with the version: its newest section is the version pyproject.toml declares."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_triton_llm.common.schema import load_toml

ROOT = Path(__file__).resolve().parents[2]

HEADING = re.compile(r"^## (\d+\.\d+\.\d+\S*) - (Unreleased|\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def test_the_newest_changelog_section_is_the_version_of_pyproject():
    sections = HEADING.findall((ROOT / "CHANGELOG.md").read_text())
    assert sections, "CHANGELOG.md has no '## X.Y.Z - YYYY-MM-DD' (or '- Unreleased') section"
    assert sections[0][0] == load_toml(ROOT / "pyproject.toml")["project"]["version"]


def test_only_the_newest_section_may_be_unreleased():
    dates = [date for _, date in HEADING.findall((ROOT / "CHANGELOG.md").read_text())]
    assert "Unreleased" not in dates[1:], dates
