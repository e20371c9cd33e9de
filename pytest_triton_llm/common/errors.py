"""TritonLLMError: the one base of every problem a user fixes in their setup, reported as one line with exit code 4."""

from __future__ import annotations


class TritonLLMError(Exception):
    """A lock, an option, a data file, a missing daemon, GPU or tritonserver, a source that cannot be had or is not what
    it was pinned to, a server that does not start: the message is one line naming what to fix. The plugin catches it
    in one place (plugin.py) and ends the session once with pytest's usage-error exit code, never a traceback per test.
    What the served stack answers (GenerationError and friends) is not one: that is a test's verdict."""
