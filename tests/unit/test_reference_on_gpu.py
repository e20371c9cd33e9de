"""The reference backend on CUDA: a tiny random Llama saved as a reference engine loads on the first visible GPU
and decodes, greedy and with penalties and sampling, the same tokens as on the CPU."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
transformers = pytest.importorskip("transformers")

from generation import GenerationRequest, ReferenceEngine, Sampling  # noqa: E402  (model dir on sys.path: conftest)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU: torch sees no CUDA device")
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,  # peaked logits: no greedy ties
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-engine")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    build = {"max_batch_size": 4, "max_input_len": 64, "max_output_len": 64, "max_seq_len": 128}
    (path / "engine.json").write_text(json.dumps({"dtype": "float32", "build_config": build}))
    return path


def requests():
    return [
        GenerationRequest([5, 6, 7, 8], 12, end_id=-1),
        GenerationRequest([9, 3], 12, end_id=-1, sampling=Sampling(top_k=5, temperature=0.8, seed=3, repetition_penalty=1.3)),
    ]


def test_the_engine_loads_on_the_gpu_and_decodes_as_on_the_cpu(engine_dir, monkeypatch):
    gpu = ReferenceEngine(engine_dir)
    assert gpu.device.type == "cuda" and gpu.gpu_bytes() > 0
    assert gpu.describe().startswith("cuda:0 (") and gpu.describe().endswith("torch.float32")
    on_gpu = [s.tokens for s in gpu.generate_static(requests())]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = ReferenceEngine(engine_dir)
    assert cpu.device.type == "cpu"
    assert on_gpu == [s.tokens for s in cpu.generate_static(requests())]
    assert all(len(tokens) == 12 for tokens in on_gpu)
