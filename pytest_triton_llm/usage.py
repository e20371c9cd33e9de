"""OptionError: a command-line option the plugin refuses, reported as one line with exit code 4."""

from __future__ import annotations

from .errors import TritonLLMError


class OptionError(TritonLLMError, ValueError):
    pass
