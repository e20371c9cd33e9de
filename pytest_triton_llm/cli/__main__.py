"""`python -m pytest_triton_llm.cli`: the `pytest-triton-llm` command."""

import sys

from .main import main

sys.exit(main())
