"""Unit tests import the python-backend models' modules by bare name, as the Triton stub does
(it puts the model's version directory on sys.path, where the renderer copies the shared harness
modules too: tensor_contract and hf_tokenizer)."""

import sys
from pathlib import Path

from pytest_triton_llm.triton import hf_tokenizer
from pytest_triton_llm.triton import tensor_contract

MODELS = Path(__file__).resolve().parents[2] / "pytest_triton_llm" / "stand_ins" / "triton_models"
for directory in (MODELS / "tensorrt_llm", MODELS / "preprocessing", MODELS / "common", MODELS / "tensorrt_llm_bls"):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
sys.modules.setdefault("tensor_contract", tensor_contract)
sys.modules.setdefault("hf_tokenizer", hf_tokenizer)
