"""Writing the files users keep (reports, baselines, saved outputs): atomically, and without losing
an earlier file that a new one replaces."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from importlib import resources
from pathlib import Path


def fixtures_dir() -> Path:
    """The suites' data (fixtures/): inside the installed package (a wheel), or at a checkout's root."""
    package = Path(str(resources.files("pytest_triton_llm")))
    return next(d for d in (package / "fixtures", package.parent / "fixtures") if d.is_dir())


def keep_previous(path: Path) -> Path | None:
    """Move an existing `path` aside as <stem>.<its mtime><suffix>; returns where it went."""
    if not path.exists():
        return None
    stamp = _dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"{path.stem}.{stamp}{path.suffix}")
    os.replace(path, backup)
    return backup


def json_value(value):
    """What json cannot write itself, as it should read: numpy scalars and arrays as numbers and lists (not their
    text), anything else as its text."""
    tolist = getattr(value, "tolist", None)  # a numpy scalar's tolist() is the Python number
    return tolist() if callable(tolist) else str(value)


def plain(document):
    """`document` in JSON's own types only: what a worker hands pytest-xdist's controller (execnet refuses numpy's)."""
    return json.loads(json.dumps(document, default=json_value))


def write_json(path: Path, document, **dump_options) -> None:
    """A reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh, indent=2, default=json_value, **dump_options)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_document(path: str | Path, kind: str, schema: int, option: str, writer_option: str, error: type[Exception]) -> dict:
    """A file this plugin wrote (its "kind" and "schema" checked), or one clear `error` naming the option."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{option} {path}: no such file (write one with {writer_option})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{option} {path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != kind or data.get("schema") != schema:
        raise error(f"{option} {path}: not a {kind} file (schema {schema})")
    return data
