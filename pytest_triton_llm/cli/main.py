"""`pytest-triton-llm`: commands beside the pytest plugin."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .cache import CacheAdminError, list_cache, prune, render_listing, render_pruned
from ..common.errors import TritonLLMError
from ..faults.campaign import add_arguments as add_campaign_arguments, campaign, out_dir
from ..openai.tracker_campaign import campaign as openai_tracker_campaign
from .matrix import ReportError, render_matrix, reports_in
from .perf_history import add_arguments as add_perf_history_arguments, perf_history
from ..plugin.options import DEFAULT_CACHE, DEFAULT_LOCK
from ..properties.coverage import cells, render
from ..properties.matrix import PropertiesError, load_properties
from ..stack.runtimes import warm
from .serve import (
    add_arguments,
    add_llama_cpp_arguments,
    add_trtllm_stand_in_arguments,
    serve,
    serve_llama_cpp,
    serve_trtllm_stand_in,
)


def _add_cache_commands(commands) -> None:
    cache = commands.add_parser("cache", help="list the engine cache, or prune entries built long ago")
    actions = cache.add_subparsers(dest="cache_command", required=True)
    listing = actions.add_parser("list", help="engines and adapters in the cache: size, when built, path")
    prune_ = actions.add_parser("prune", help="remove entries built more than --older-than DAYS ago, never one in use")
    prune_.add_argument(
        "--older-than", type=float, metavar="DAYS", help="required: remove engines and adapters built more than DAYS ago"
    )
    prune_.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    warm_ = actions.add_parser("warm", help="servers left warm by --triton-keep-warm: deployment, endpoint, since when")
    warm_.add_argument("--stop", action="store_true", help="stop them (a session holding one loses its server)")
    for action in (listing, prune_, warm_):
        action.add_argument(
            "--cache-dir",
            "--engines-cache",
            dest="cache_dir",
            metavar="DIR",
            default=DEFAULT_CACHE,
            help=f"the engine cache (default: {DEFAULT_CACHE}, as the plugin's --engines-cache)",
        )


def _cache(args: argparse.Namespace) -> int:
    try:
        if args.cache_command == "list":
            sys.stdout.write(render_listing(list_cache(args.cache_dir)))
        elif args.cache_command == "warm":
            sys.stdout.write(warm.render_slots(Path(args.cache_dir).expanduser(), args.stop))
        else:
            sys.stdout.write(render_pruned(prune(args.cache_dir, args.older_than, args.dry_run)))
    except CacheAdminError as exc:
        print(f"pytest-triton-llm cache: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _matrix(args: argparse.Namespace) -> int:
    try:
        paths, notes = reports_in(args.reports)
        for note in notes:
            print(f"pytest-triton-llm: {note}", file=sys.stderr)
        table = render_matrix(paths)
    except ReportError as exc:
        print(f"pytest-triton-llm: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(table)
    if args.output:
        args.output.write_text(table)
    return 0


def suites_dir() -> Path:
    """The suites: inside the installed package (a wheel), or beside it (a checkout keeps suites/ at its root)."""
    package = Path(__file__).resolve().parents[1]
    return next(d for d in (package / "suites", package.parent / "suites") if (d / "conftest.py").is_file())


def suites_argv(pytest_args: list[str], cwd: Path) -> list[str]:
    """pytest's arguments for the suites shipped with the plugin: the packaged lock (the embedded default) unless
    --engines-lock is given or ./engines.lock exists, pytest's cache in the working directory, not site-packages."""
    suites = suites_dir()
    argv = [str(suites), "--rootdir", str(cwd)]
    given = any(arg == "--engines-lock" or arg.startswith("--engines-lock=") for arg in pytest_args)
    if not given and not (cwd / DEFAULT_LOCK).exists():
        packaged = suites.parent / "fixtures" / DEFAULT_LOCK
        print(
            f"pytest-triton-llm run: no ./{DEFAULT_LOCK}: the packaged {packaged} (the embedded default)",
            file=sys.stderr,
            flush=True,
        )
        argv += ["--engines-lock", str(packaged)]
    return argv + pytest_args


def _faults(args: argparse.Namespace) -> int:
    """The fault campaign runs the suites from the checkout's root (its engines.lock and pytest settings), else here."""
    suites = suites_dir()
    cwd = suites.parent if (suites.parent / "pyproject.toml").is_file() else Path.cwd()
    if args.catalog == "tracker-openai":
        return openai_tracker_campaign(cwd, out_dir(args), args.only, DEFAULT_CACHE)
    return campaign(args, suites_argv([], cwd) if not args.list else [], cwd)


def _coverage(args: argparse.Namespace) -> int:
    """The property matrix; exit 1 on a missing cell or a checked_by test that does not exist."""
    try:
        properties = load_properties()
    except PropertiesError as exc:
        print(f"pytest-triton-llm coverage: error: {exc}", file=sys.stderr)
        return 2
    report, passed = render(cells(properties), properties, suites_dir().parent, detail=args.detail)
    sys.stdout.write(report)
    return 0 if passed else 1


def run(pytest_args: list[str]) -> int:
    """pytest in this process's place: a fresh interpreter, so pytest rewrites the plugin's asserts as usual."""
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *suites_argv(pytest_args, Path.cwd())])
    return 0  # not reached


SERVERS = {"serve": serve, "serve-llama-cpp": serve_llama_cpp, "serve-trtllm-stand-in": serve_trtllm_stand_in}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # everything after it is pytest's, options included
        return run(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "cache":
        return _cache(args)
    if args.command == "faults":
        return _faults(args)
    if args.command == "coverage":
        return _coverage(args)
    if args.command == "perf-history":
        return perf_history(args)
    if args.command in SERVERS:
        try:
            return SERVERS[args.command](args)
        except TritonLLMError as exc:  # a user's input or this host: one line and exit 2, never a traceback
            print(f"pytest-triton-llm {args.command}: error: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
    return _matrix(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytest-triton-llm")
    commands = parser.add_subparsers(dest="command", required=True)
    matrix = commands.add_parser("matrix", help="markdown table (suites x images) from --triton-llm-report files")
    matrix.add_argument(
        "reports",
        nargs="+",
        type=Path,
        metavar="REPORT.json",
        help="report files, or folders holding them (searched recursively)",
    )
    matrix.add_argument("-o", "--output", type=Path, help="write the table here as well as to stdout")
    add_arguments(
        commands.add_parser(
            "serve", help="build or reuse the engine, render and serve one deployment as the fixtures do, until Ctrl-C or SIGTERM"
        )
    )
    add_llama_cpp_arguments(
        commands.add_parser(
            "serve-llama-cpp",
            help="serve a lock engine's GGUF with llama-cpp-python's OpenAI server on 127.0.0.1 (for --openai-url), until "
            "Ctrl-C or SIGTERM",
        )
    )
    add_trtllm_stand_in_arguments(
        commands.add_parser(
            "serve-trtllm-stand-in",
            help="serve a lock engine's reference checkpoint behind trtllm-serve's OpenAI protocol on 127.0.0.1 (the "
            "project's stand-in, for --openai-url), until Ctrl-C or SIGTERM",
        )
    )
    _add_cache_commands(commands)
    add_campaign_arguments(
        commands.add_parser(
            "faults",
            help="run each stand-in fault of fixtures/faults.toml on its deployment, then clean runs: which tests "
            "catch which fault (fault-table.md, reverse-table.md)",
        )
    )
    coverage = commands.add_parser(
        "coverage",
        help="the property matrix: every input of every served contract x the paths that serve it -> checked, skipped "
        "(why), pending or missing (exit 1 on a missing cell)",
    )
    coverage.add_argument("--detail", action="store_true", help="one row per cell: input, path, property, how it is judged")
    add_perf_history_arguments(
        commands.add_parser(
            "perf-history",
            help="add perf reports to a history (SQLite), find its change points with Apache Otava, plot them, and exit 1 "
            "on a regression among the newest runs",
        )
    )
    commands.add_parser(
        "run",
        help="run the suites shipped with the plugin: `run -m functional`, any pytest options "
        "after it (default lock: ./engines.lock, else the packaged embedded default)",
    )
    return parser
