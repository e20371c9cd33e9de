"""Moved to pytest_triton_llm.triton.client (0.1.0): this name stays for one release, then goes."""

import warnings

from .triton.client import *  # noqa: F403 - the whole public surface, as it was
from .triton.client import Generation, GenerationError, LLMClient  # noqa: F401 - the names users imported

warnings.warn(
    "pytest_triton_llm.client moved to pytest_triton_llm.triton.client; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
