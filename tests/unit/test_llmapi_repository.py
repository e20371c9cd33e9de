"""The llmapi repository as rendered for NGC 25.10 and 26.07 (family llmapi-1.0) and the embedded 2.51 (newest)."""

from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.engines import backend_of, check_lock
from pytest_triton_llm.stack.lock import LockError, load_lock, speculation_pairs
from pytest_triton_llm.stack.repository.llmapi import llmapi_family

ROOT = Path(__file__).resolve().parents[2]


def _render(tmp_path: Path, triton: str, backend: str = "reference") -> Path:
    ref = load_lock(ROOT / "engines.lock").deployments()["smollm2-135m:llmapi"]
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    return backend_of(backend).render(ref, engine, tmp_path / triton / "repo", triton, "/engines/smollm2")


@pytest.mark.parametrize(
    "triton, family", [("2.62.0", "llmapi-1.0"), ("2.71.0", "llmapi-1.0"), ("2.51.0", "llmapi-1.3"), ("2.58.0", "llmapi-0.19")]
)
def test_the_llmapi_family_follows_the_images_tensorrt_llm(triton, family):
    assert llmapi_family(triton) == family


@pytest.mark.parametrize("triton", ["2.62.0", "2.71.0"])  # NGC 25.10 and 26.07
def test_rendered_llmapi_config_and_model_yaml_are_pinned(tmp_path, triton):
    repo = _render(tmp_path, triton)
    assert sorted(p.name for p in repo.iterdir()) == ["tensorrt_llm"]
    config = text_format.Parse((repo / "tensorrt_llm" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert (config.name, config.backend, config.max_batch_size, config.model_transaction_policy.decoupled) == (
        "tensorrt_llm",
        "python",
        0,
        True,
    )
    assert [t.name for t in config.input][:3] == ["text_input", "streaming", "sampling_param_best_of"]
    assert "lora_path" not in {t.name for t in config.input}  # LoRA inputs came after 1.2
    assert "kv_cache_reused_block" in {t.name for t in config.output}
    assert yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text()) == {
        "model": "/engines/smollm2",
        "backend": "pytorch",
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "triton_config": {"max_batch_size": 0, "decoupled": True},
        "dtype": "float32",
        "max_batch_size": 16,
        "max_input_len": 1024,
        "max_seq_len": 1280,
        # the engine's [lora] table as the LLM API's LoraConfig: adapters then come per request by lora_path
        "lora_config": {"max_lora_rank": 8, "lora_target_modules": ["attn_q", "attn_k", "attn_v"]},
    }
    # the reference stand-in's code, with the peft reader it loads lora_path adapters with
    assert {"model.py", "lora_convert.py"} <= {p.name for p in (repo / "tensorrt_llm" / "1").iterdir()}


def test_the_llmapi_backend_links_the_images_own_model_code(tmp_path):
    repo = _render(tmp_path, "2.71.0", backend="llmapi")
    version_dir = repo / "tensorrt_llm" / "1"
    assert {p.name: str(p.readlink()) for p in version_dir.iterdir() if p.is_symlink()} == {
        "model.py": "/app/all_models/llmapi/tensorrt_llm/1/model.py",
        "helpers.py": "/app/all_models/llmapi/tensorrt_llm/1/helpers.py",
    }


def _lock(tmp_path, extra: str) -> Path:
    text = (ROOT / "engines.lock").read_text() + extra
    (tmp_path / "engines.lock").write_text(text)
    return tmp_path / "engines.lock"


def test_an_unknown_llmapi_argument_is_one_error_naming_the_arguments_file(tmp_path):
    table = "\n[engines.smollm2-135m.llmapi]\nkv_cache_config = { enable_block_reuse = true }\nno_such_argument = 1\n"
    path = _lock(tmp_path, table)
    with pytest.raises(LockError, match=r"field 'llmapi.no_such_argument': not an LLM API argument .*llmapi_arguments.toml"):
        check_lock(load_lock(path))


def test_an_llmapi_deployment_must_batch_in_flight(tmp_path):
    path = _lock(tmp_path, '\n[engines.smollm2-135m.deployments.llmapi-v1]\nlayout = "llmapi"\nbatching = "v1"\n')
    with pytest.raises(LockError, match="the llmapi model batches in flight"):
        load_lock(path)


def test_a_deployments_llmapi_table_goes_over_the_engines_and_pairs_it_with_a_twin(tmp_path):
    spec = '{ decoding_type = "NGram", max_draft_len = 4 }'
    extra = (
        f'\n[engines.smollm2-135m.deployments.llmapi-ngram]\nlayout = "llmapi"\nbatching = "inflight"\ndecoupled = true\n'
        f"[engines.smollm2-135m.deployments.llmapi-ngram.llmapi]\nspeculative_config = {spec}\n"
    )
    refs = load_lock(_lock(tmp_path, extra)).deployments()
    engine = BuiltEngine("smollm2-135m", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of("reference").render(refs["smollm2-135m:llmapi-ngram"], engine, tmp_path / "repo", "2.71.0", "/e")
    model_yaml = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 4}
    assert "ngram.py" in {p.name for p in (repo / "tensorrt_llm" / "1").iterdir()}  # the stand-in's drafter beside it
    assert "speculative_config" not in model_yaml_of(refs["smollm2-135m:llmapi"], tmp_path, engine)
    pairs = speculation_pairs(list(refs.values()))
    assert [(a.name, b.name) for a, b in pairs] == [("llmapi-ngram", "llmapi")]


def model_yaml_of(ref, tmp_path, engine) -> dict:
    repo = backend_of("reference").render(ref, engine, tmp_path / "plain", "2.71.0", "/e")
    return yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())


def test_a_deployments_llmapi_table_is_checked_and_refused_on_the_engine_ensemble(tmp_path):
    extra = "\n[engines.smollm2-135m.deployments.llmapi.llmapi]\nno_such_argument = 1\n"
    with pytest.raises(LockError, match=r"field 'deployments.llmapi.llmapi.no_such_argument': not an LLM API argument"):
        check_lock(load_lock(_lock(tmp_path, extra)))
    extra = "\n[engines.smollm2-135m.deployments.inflight.llmapi]\nmax_num_tokens = 64\n"
    with pytest.raises(LockError, match="field 'deployments.inflight.llmapi': LLM API arguments go into an llmapi"):
        load_lock(_lock(tmp_path, extra))
