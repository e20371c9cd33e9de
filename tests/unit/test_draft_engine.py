"""The reference backend's draft engine (stack/engines/draft_checkpoint.py): the engine's checkpoint without the lock's
[draft] layers, renumbered, loadable as a model of its own."""

import json

import pytest

from pytest_triton_llm.stack.engines.draft_checkpoint import build, renamed


def test_kept_layers_are_renumbered_and_the_rest_kept_by_name():
    names = ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight",
             "model.layers.2.self_attn.q_proj.weight", "model.layers.10.input_layernorm.weight", "model.norm.weight"]  # fmt: skip
    assert renamed(names, 11, {1, 3, 4, 5, 6, 7, 8, 9}) == {
        "model.embed_tokens.weight": "model.embed_tokens.weight",
        "model.layers.0.mlp.up_proj.weight": "model.layers.0.mlp.up_proj.weight",
        "model.layers.2.self_attn.q_proj.weight": "model.layers.1.self_attn.q_proj.weight",
        "model.layers.10.input_layernorm.weight": "model.layers.2.input_layernorm.weight",
        "model.norm.weight": "model.norm.weight",
    }


@pytest.fixture
def engine(tmp_path):
    torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    (tmp_path / "engine.json").write_text(json.dumps({"backend": "reference", "build_config": {"max_draft_len": 4}}))
    return tmp_path


def test_the_draft_is_the_engines_model_without_the_dropped_layers(engine):
    import torch
    from transformers import AutoModelForCausalLM

    draft_dir = build(engine, {1, 2})
    target = AutoModelForCausalLM.from_pretrained(engine).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir).eval()
    assert draft.config.num_hidden_layers == 2
    assert torch.equal(draft.model.layers[1].mlp.up_proj.weight, target.model.layers[3].mlp.up_proj.weight)
    built = json.loads((draft_dir / "engine.json").read_text())
    assert "max_draft_len" not in built["build_config"] and built["draft_of"] == {"drop_layers": [1, 2]}
    # the same forward as the target's with those layers skipped
    ids = torch.tensor([[1, 5, 9, 3]])
    target.model.layers = torch.nn.ModuleList([target.model.layers[0], target.model.layers[3]])
    target.config.num_hidden_layers = 2
    for index, layer in enumerate(target.model.layers):
        layer.self_attn.layer_idx = index
    assert torch.allclose(draft(ids).logits, target(ids).logits, atol=1e-6)


def test_a_layer_beyond_the_engines_is_one_line(engine):
    with pytest.raises(SystemExit, match=r"the engine has 4 decoder layers \(0-3\); \[7\] is beyond"):
        build(engine, {1, 7})
