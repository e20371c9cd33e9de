"""Talking to Triton: the LLM client (client.py: gRPC, HTTP and `generate`), the tensor contract of the engine ensemble
(tensor_contract.py) and of the llmapi model (llmapi_contract.py), streams (streaming.py), the load engine
(load.py) and TensorRT-LLM's metric families (server_metrics.py). The stand-in copies the two contracts' shared
halves beside its models (stack/repository/stand_in.py)."""
