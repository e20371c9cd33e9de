"""The `pytest-triton-llm` command (main.py) and what its subcommands do: serve a deployment by hand (serve.py), the
compat matrix of reports (matrix.py), the engine cache's listing and pruning (cache.py); `faults` is faults/campaign."""

from .main import main

__all__ = ["main"]
