"""Reading a python-backend model's parameters and optional inputs, shared by every model here."""

from __future__ import annotations

import json

import triton_python_backend_utils as pb_utils
from tensor_contract import config_parameters, flag  # noqa: F401 (flag: read by the models through this module)


def model_parameters(args: dict) -> dict[str, str]:
    """config.pbtxt `parameters` as name -> string value (tensor_contract.config_parameters)."""
    return config_parameters(json.loads(args["model_config"]))


def optional_input(request, name: str):
    """The input as numpy, or None when the request did not send it."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def each_answered(requests, answer) -> list:
    """`answer(request)` for each request; a ValueError becomes that request's error response, in its words."""
    responses = []
    for request in requests:
        try:
            responses.append(answer(request))
        except ValueError as exc:
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
    return responses
