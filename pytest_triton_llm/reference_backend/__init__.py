"""The reference backend: Triton python-backend models with the TensorRT-LLM ensemble's contract.

`models/<name>/*.py` are copied into `<repository>/<name>/1/` and run inside the Triton
python backend stub, so they import only numpy, torch, transformers and their siblings.
"""
