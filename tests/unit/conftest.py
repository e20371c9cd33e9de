"""Unit tests import the python-backend models' modules by bare name, as the Triton stub does
(it puts the model's version directory on sys.path)."""

import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "pytest_triton_llm" / "reference_backend" / "models"
for directory in (MODELS / "tensorrt_llm", MODELS / "preprocessing", MODELS / "common"):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
