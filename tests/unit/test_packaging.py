"""What the wheel holds: every package of the plugin, the suites and their fixtures (mapped from the repository's
root); `pytest-triton-llm run` points pytest at them."""

from pathlib import Path

from pytest_triton_llm.cli.main import suites_argv
from pytest_triton_llm.common.schema import load_toml

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_plugin_is_listed_for_the_wheel():
    setuptools = load_toml(ROOT / "pyproject.toml")["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pytest_triton_llm").rglob("__init__.py")}
    mapped = {name for name, folder in setuptools["package-dir"].items() if (ROOT / folder).is_dir()}
    assert found | mapped == set(setuptools["packages"])
    assert setuptools["package-dir"] == {"pytest_triton_llm.suites": "suites", "pytest_triton_llm.fixtures": "fixtures"}


def test_run_uses_the_packaged_lock_only_where_none_is_given_or_beside(tmp_path, capsys):
    argv = suites_argv(["-m", "functional"], tmp_path)
    assert argv[:3] == [str(ROOT / "suites"), "--rootdir", str(tmp_path)]  # a checkout: suites/ beside the package
    packaged = Path(argv[argv.index("--engines-lock") + 1])
    assert packaged == ROOT / "fixtures" / "engines.lock" and argv[-2:] == ["-m", "functional"]
    assert f"no ./engines.lock: the packaged {packaged}" in capsys.readouterr().err
    assert suites_argv(["--engines-lock", "my.lock"], tmp_path).count("--engines-lock") == 1
    (tmp_path / "engines.lock").write_text("version = 1\n")
    assert "--engines-lock" not in suites_argv([], tmp_path)  # ./engines.lock: pytest's own default applies


def test_the_default_lock_at_the_root_is_the_packaged_one():
    assert (ROOT / "engines.lock").resolve() == (ROOT / "fixtures" / "engines.lock").resolve()
