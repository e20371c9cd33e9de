"""`pytest-triton-llm`: commands beside the pytest plugin."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .engines.base import BuildError
from .lock import LockError
from .matrix import ReportError, render_matrix, reports_in
from .repository.fill import TemplateError
from .runtimes import RuntimeUnavailable
from .runtimes.server import ServerStartError
from .serve import add_arguments, serve
from .usage import OptionError

# what `serve` reports as one line and exit 2: a user's input or this host, never a traceback
SERVE_ERRORS = (LockError, OptionError, RuntimeUnavailable, BuildError, TemplateError, ServerStartError)


def main(argv: list[str] | None = None) -> int:
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
    add_arguments(commands.add_parser(
        "serve", help="build or reuse the engine, render and serve one deployment as the fixtures do, until Ctrl-C "
        "or SIGTERM"))  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            return serve(args)
        except SERVE_ERRORS as exc:
            print(f"pytest-triton-llm serve: error: {exc}", file=sys.stderr)
            return 2
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


if __name__ == "__main__":
    sys.exit(main())
