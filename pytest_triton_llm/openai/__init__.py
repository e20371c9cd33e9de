"""The OpenAI endpoint side (`/v1`): its client (client.py), the server families' cited contract (contract.py,
openai_families.toml), the target a session tests (target.py), its load engine target and request bodies (load.py),
the migration gate's pairs (migration.py), the fault proxy (fault_proxy.py), and the servers the harness starts for
it: llama-cpp-python's (llama_cpp.py) and the project's trtllm-serve stand-in (trtllm_serve.py)."""
