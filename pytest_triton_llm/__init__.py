"""pytest-triton-llm: conformance and e2e suites for LLMs served by Triton + TensorRT-LLM."""

from importlib import metadata

try:
    __version__ = metadata.version("pytest-triton-llm")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
