from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines.tensorrtllm.commands import trtllm_build_options
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.repository import MODELS, template_family
from pytest_triton_llm.stack.repository.fill import TemplateError, fill
from pytest_triton_llm.common.schema import load_toml

ROOT = Path(__file__).resolve().parents[2]
TRITON = "2.51.0"
NEWEST_IMAGE = list(load_compat().images.values())[-1]


@pytest.fixture
def rendered(tmp_path):
    ref = load_lock(ROOT / "engines.lock").deployments()["smollm2-135m:v1"]
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    return ref, backend_of(ref.engine.backend).render(ref, engine, tmp_path / "repo", TRITON, None)


def parse(repo: Path, model: str) -> model_config_pb2.ModelConfig:
    text = (repo / model / "config.pbtxt").read_text()
    assert "${" not in text
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_every_rendered_config_parses_into_model_config(rendered):
    _, repo = rendered
    for model in MODELS:
        assert parse(repo, model).name == model
        assert (repo / model / "1").is_dir()


def test_reference_tensorrt_llm_config_carries_the_deployment(rendered, tmp_path):
    ref, repo = rendered
    config = parse(repo, "tensorrt_llm")
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert config.backend == "python"
    assert config.max_batch_size == ref.engine.max_batch_size == 16
    assert not config.model_transaction_policy.decoupled
    assert config.dynamic_batching.max_queue_delay_microseconds == ref.options.max_queue_delay_us
    assert params["gpt_model_type"] == "V1"
    assert params["gpt_model_path"] == str(tmp_path / "engine")
    assert params["exclude_input_in_output"] == "true"
    assert "medusa_choices" not in params and "lora_cache_host_memory_bytes" not in params  # unset: left out
    # the lock's lora section sizes the LoRA cache
    assert params["lora_cache_optimal_adapter_size"] == params["lora_cache_max_adapter_size"] == "8"
    assert {p.name for p in (repo / "tensorrt_llm" / "1").iterdir()} >= {"model.py", "generation.py", "hf_tokenizer.py"}


def test_a_deployments_kv_cache_size_fills_max_tokens_in_paged_kv_cache(tmp_path):
    ref = load_lock(ROOT / "fixtures" / "engines.variants.lock").deployments()["smollm2-135m:inflight-guided"]
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, engine, tmp_path / "repo", TRITON, None)
    params = {k: v.string_value for k, v in parse(repo, "tensorrt_llm").parameters.items()}
    assert params["max_tokens_in_paged_kv_cache"] == str(ref.options.kv_cache_max_tokens) == "1280"
    assert (repo / "tensorrt_llm" / "1" / "retention.py").is_file()


def test_a_draft_engine_is_served_by_tensorrt_llm_draft_as_upstreams_draft_target_docs_wire_it(tmp_path):
    """tensorrt_llm's config under the name tensorrt_llm_draft, its engine the draft's directory, its code the
    stand-in's; the BLS names it as its draft model. The target keeps its own engine."""
    ref = load_lock(ROOT / "fixtures" / "engines.variants.lock").deployments()["smollm2-135m:inflight-guided"]
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, engine, tmp_path / "repo", TRITON, None)
    draft, target = parse(repo, "tensorrt_llm_draft"), parse(repo, "tensorrt_llm")
    assert draft.name == "tensorrt_llm_draft" and target.name == "tensorrt_llm"
    params = {model: {k: v.string_value for k, v in c.parameters.items()} for model, c in (("d", draft), ("t", target))}
    assert params["d"]["gpt_model_path"] == str(tmp_path / "engine" / "draft")
    assert params["t"]["gpt_model_path"] == str(tmp_path / "engine")
    assert {k: v for k, v in params["d"].items() if k != "gpt_model_path"} == {
        k: v for k, v in params["t"].items() if k != "gpt_model_path"
    }
    assert [i.name for i in draft.input] == [i.name for i in target.input]
    bls = {k: v.string_value for k, v in parse(repo, "tensorrt_llm_bls").parameters.items()}
    assert bls["tensorrt_llm_draft_model_name"] == "tensorrt_llm_draft"
    code = [(repo / model / "1" / "model.py").read_bytes() for model in ("tensorrt_llm_draft", "tensorrt_llm")]
    assert code[0] == code[1]


def test_python_models_get_their_code_and_the_ensemble_none(rendered):
    _, repo = rendered
    assert (repo / "preprocessing" / "1" / "model.py").is_file()
    assert (repo / "preprocessing" / "1" / "words.py").is_file()
    assert (repo / "postprocessing" / "1" / "model.py").is_file()
    assert list((repo / "ensemble" / "1").iterdir()) == []
    assert parse(repo, "ensemble").platform == "ensemble"


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm"])
def test_rendered_tensors_match_the_transcribed_upstream_contract(rendered, model):
    _, repo = rendered
    contract = load_toml(ROOT / "fixtures" / "contracts" / f"{template_family(TRITON)}.toml")[model]
    config = parse(repo, model)
    inputs = {t.name: t for t in config.input}
    outputs = {t.name: t for t in config.output}
    assert sorted(inputs) == sorted(contract["inputs"])
    for name, spec in contract["inputs"].items():
        assert model_config_pb2.DataType.Name(inputs[name].data_type) == spec["dtype"]
        assert list(inputs[name].dims) == spec["dims"]
        assert inputs[name].optional == spec.get("optional", False)
    assert sorted(outputs) == sorted(contract["outputs"])


def test_fill_is_strict_about_placeholders():
    assert fill("a: ${x}\nb: ${y}\n", {"x": 1, "y": None}) == "a: 1\n"
    assert fill("flag: ${f}", {"f": True}) == "flag: true\n"
    with pytest.raises(TemplateError, match="no value for placeholder"):
        fill("a: ${missing}", {})


def test_an_unfilled_string_parameter_stays_as_upstreams_fill_template_leaves_it_only_where_asked():
    template = 'parameters { key: "visual_model_path" value: { string_value: "${visual_model_path}" } }\nmax_batch_size: ${n}\n'
    assert fill(template, {"visual_model_path": None, "n": 4}) == "max_batch_size: 4\n"  # the stand-in's: dropped
    kept = fill(template, {"visual_model_path": None, "n": 4}, keep_unfilled=True)  # upstream's python models
    assert kept == 'parameters { key: "visual_model_path" value: { string_value: "${visual_model_path}" } }\nmax_batch_size: 4\n'
    # a number cannot stay a placeholder: its line goes either way
    assert fill("max_batch_size: ${n}\n", {"n": None}, keep_unfilled=True) == "\n"


def test_unknown_triton_version_has_no_templates():
    with pytest.raises(TemplateError, match="no model templates for Triton 1.0.0"):
        template_family("1.0.0")


def test_lora_section_renders_into_trtllm_build_options_and_cache_parameters(tmp_path):
    text = (
        (ROOT / "engines.lock")
        .read_text()
        .replace(
            'target_modules = ["attn_q", "attn_k", "attn_v"]',
            'target_modules = ["attn_q", "attn_v", "attn_dense"]\ncache_host_memory_bytes = 1048576',
        )
        .replace("max_rank = 8 ", "max_rank = 16 ")
    )
    (tmp_path / "engines.lock").write_text(text)
    ref = load_lock(tmp_path / "engines.lock").deployments()["smollm2-135m:inflight"]
    options = trtllm_build_options(ref.engine, NEWEST_IMAGE)
    assert options[options.index("--lora_plugin") :] == [
        "--lora_plugin",
        "float32",
        "--lora_target_modules",
        "attn_q",
        "attn_v",
        "attn_dense",
        "--max_lora_rank",
        "16",
        "--max_prompt_embedding_table_size",  # engines.lock's, for the prompt-table checks
        "64",
        "--speculative_decoding_mode",  # engines.lock's max_draft_len, for the draft-token checks
        "draft_tokens_external",
        "--max_draft_len",
        "4",
        "--gather_context_logits",  # engines.lock's, for the logits checks
        "--gather_generation_logits",
    ]
    assert options[: options.index("--gpt_attention_plugin")] == [
        "--max_batch_size",
        "16",
        "--max_input_len",
        "1024",
        "--max_seq_len",
        "1280",
    ]
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, engine, tmp_path / "repo", TRITON, None)
    config = parse(repo, "tensorrt_llm")
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["lora_cache_max_adapter_size"] == params["lora_cache_optimal_adapter_size"] == "16"
    assert params["lora_cache_host_memory_bytes"] == "1048576"
    assert config.model_transaction_policy.decoupled and params["gpt_model_type"] == "inflight_fused_batching"


def test_an_engine_without_lora_gets_no_lora_options(tmp_path):
    text = (ROOT / "engines.lock").read_text()
    start = text.index("[engines.smollm2-135m.lora]")
    (tmp_path / "engines.lock").write_text(text[:start] + text[text.index("[engines.smollm2-135m.deployments.v1]") :])
    engine = load_lock(tmp_path / "engines.lock").engines["smollm2-135m"]
    assert "--lora_plugin" not in trtllm_build_options(engine, NEWEST_IMAGE)
    ref = load_lock(tmp_path / "engines.lock").deployments()["smollm2-135m:v1"]
    repo = backend_of(ref.engine.backend).render(
        ref, BuiltEngine("e", tmp_path / "e", {"digest": "0" * 64}, True, 0.0), tmp_path / "r", TRITON, None
    )
    assert not [k for k in parse(repo, "tensorrt_llm").parameters if k.startswith("lora_")]
