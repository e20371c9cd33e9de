"""Stand-in tensorrt_llm: the distribution's metadata is what the harness reads; importing it does nothing."""

__version__ = "0.14.0"
