"""Reading a python-backend model's parameters and optional inputs, shared by every model here."""

from __future__ import annotations

import json

import triton_python_backend_utils as pb_utils

_TRUE = ("1", "true", "t", "y", "yes", "on")


def model_parameters(args: dict) -> dict[str, str]:
    """config.pbtxt `parameters` as name -> string value; an empty one, or an unfilled `${...}` placeholder, is
    unset (as tensorrtllm_backend reads them)."""
    config = json.loads(args["model_config"])
    values = {k: (v.get("string_value") or "").strip() for k, v in config.get("parameters", {}).items()}
    return {k: v for k, v in values.items() if v and not v.startswith("${")}


def flag(text: str | None, default: bool) -> bool:
    """A boolean parameter; unset or an unfilled `${...}` placeholder gives `default`."""
    if text is None or text.startswith("${") or not text.strip():
        return default
    return text.strip().lower() in _TRUE


def optional_input(request, name: str):
    """The input as numpy, or None when the request did not send it."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()
