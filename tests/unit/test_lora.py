"""LoRA conversion (peft -> TensorRT-LLM tensors) and the reference model's per-row application,
checked against peft itself on a tiny random Llama."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from lora import LoraSupport  # noqa: E402  (model dir on sys.path: conftest)
from served_contract import RequestError  # noqa: E402

from pytest_triton_llm.lora.convert import MODULE_IDS, peft_to_trtllm  # noqa: E402
from pytest_triton_llm.lora.recipes import AdapterRecipe, load_recipes  # noqa: E402

RANK, ALPHA = 4, 8


def tiny_llama(seed=0):
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def peft_adapter(tmp_path_factory):
    """A saved peft adapter on q/v with non-zero lora_B, and the peft model's logits."""
    model = peft.get_peft_model(
        tiny_llama(), peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj"], init_lora_weights="gaussian")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape) * 0.5)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    ids = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits
    return out, ids, logits


def test_conversion_has_hf_lora_converts_layout(peft_adapter):
    out, _, _ = peft_adapter
    weights, config = peft_to_trtllm(out)
    assert weights.dtype == np.float16 and config.dtype == np.int32
    # one row per (layer, module), ordered by layer then module id: [module id, layer, rank]
    assert config[0].tolist() == [
        [MODULE_IDS["attn_q"], 0, RANK],
        [MODULE_IDS["attn_v"], 0, RANK],
        [MODULE_IDS["attn_q"], 1, RANK],
        [MODULE_IDS["attn_v"], 1, RANK],
    ]
    # q: A [4, 32] then B [32, 4]; v: A [4, 32] then B [16, 4] (2 kv heads of 8), padded to the longest row
    assert weights.shape == (1, 4, RANK * 32 + 32 * RANK)
    assert not weights[0, 1, RANK * 32 + 16 * RANK :].any()


def test_reference_lora_reproduces_peft_per_batch_row(peft_adapter):
    out, ids, peft_logits = peft_adapter
    weights, config = peft_to_trtllm(out, dtype="float32")
    base = tiny_llama()
    lora = LoraSupport(base, {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_k", "attn_v"]})
    adapter = lora.resolve(7, weights[0], config[0])
    with torch.inference_mode():
        lora.rows = [None, None]
        base_logits = base(input_ids=ids).logits
        lora.rows = [adapter, None]  # the adapter on row 0 only, the base model on row 1
        mixed = base(input_ids=ids).logits
    assert torch.allclose(mixed[0], peft_logits[0], atol=1e-4)
    assert torch.allclose(mixed[1], base_logits[1])
    assert not torch.allclose(base_logits[0], peft_logits[0], atol=1e-2), "the adapter must change the output"


def test_task_ids_follow_tensorrt_llm_semantics(peft_adapter):
    out, _, _ = peft_adapter
    weights, config = peft_to_trtllm(out)
    lora = LoraSupport(tiny_llama(), {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_v"]})
    first = lora.resolve(1, weights[0], config[0])
    assert lora.resolve(1, None, None) is first  # the id alone after registration
    assert lora.resolve(None, None, None) is None  # no LoRA at all
    with pytest.raises(RequestError, match="LoRA task 2 not found in cache. Please send LoRA weights with request"):
        lora.resolve(2, None, None)
    with pytest.raises(RequestError, match="must be sent together"):
        lora.resolve(3, weights[0], None)
    with pytest.raises(RequestError, match="need a lora_task_id"):
        lora.resolve(None, weights[0], config[0])
    bad = config[0].copy()
    bad[0, 2] = 16
    with pytest.raises(RequestError, match=r"LoRA rank 16 is outside 1..8"):
        lora.resolve(4, weights[0], bad)


def test_the_oldest_adapter_is_evicted_when_the_cache_is_full(peft_adapter):
    out, _, _ = peft_adapter
    weights, config = peft_to_trtllm(out)
    probe = LoraSupport(tiny_llama(), {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_v"]})
    size = probe.parse(0, weights[0], config[0]).nbytes
    lora = LoraSupport(tiny_llama(), {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_v"]}, cache_bytes=2 * size)
    for task in (1, 2, 3):
        lora.resolve(task, weights[0], config[0])
    assert lora.cached_task_ids() == [2, 3]


def test_adapter_recipes_load_and_validate(tmp_path):
    recipes = load_recipes(__import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures" / "lora_adapters.toml")
    assert {r.engine for r in recipes.values()} == {"smollm2-135m"} and len(recipes) >= 3
    assert all(isinstance(r, AdapterRecipe) and r.b_std > 0 for r in recipes.values())
    (tmp_path / "bad.toml").write_text(
        '[adapters.x]\nengine = "e"\nrank = "8"\nalpha = 1\ntarget_modules = []\nseed = 1\nb_std = 0.1\n'
    )
    with pytest.raises(ValueError, match="adapter 'x': field 'rank': expected integer"):
        load_recipes(tmp_path / "bad.toml")
