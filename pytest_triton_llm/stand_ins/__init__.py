"""The project's stand-ins for upstream's serving code, never imported by the harness (a checked import contract):
triton_models/<name>/*.py are copied into `<repository>/<name>/1/` and run inside Triton's python backend stub with the
TensorRT-LLM ensemble's contract (the reference backend), so they import only numpy, torch, transformers and their
siblings; trtllm_serve/ answers as trtllm-serve's OpenAI server does, started by openai/trtllm_serve.py.
"""
