"""Multimodal deployments (issue 47): the lock's [vision] table and layout, the repository rendered from upstream's
multimodal set of tensorrtllm_backend v0.19.0, the served inputs the harness reads for it, which tests run on it,
LLaVA's prompt around an image's ids, and the vision encoder built beside a checkpoint."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.common.schema import load_toml
from pytest_triton_llm.plugin.selection import choices
from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.capabilities import family_inputs
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.stack.repository.fill import TemplateError

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "fixtures" / "engines.multimodal.lock"
FAMILY = "trtllm-0.19"


@pytest.fixture
def ref():
    return load_lock(LOCK).deployments()["smollm2-135m-vision:multimodal"]


def with_lock(tmp_path, text: str):
    path = tmp_path / "engines.lock"
    path.write_text(LOCK.read_text().replace("max_prompt_embedding_table_size = 64 ", text, 1))
    return load_lock(path)


def test_an_image_must_fit_a_requests_share_of_the_prompt_table(tmp_path):
    with pytest.raises(Exception, match=r"an image is 16 prompt-table rows .* give at least 64 .* got 32"):
        with_lock(tmp_path, "max_prompt_embedding_table_size = 32 ")


def test_an_engine_with_a_vision_encoder_serves_multimodal_deployments_only(tmp_path):
    path = tmp_path / "engines.lock"
    path.write_text(LOCK.read_text().replace('layout = "multimodal"\n', ""))
    with pytest.raises(Exception, match="needs an engine with a \\[vision\\] table"):
        load_lock(path)


def parse(repo: Path, model: str) -> model_config_pb2.ModelConfig:
    text = (repo / model / "config.pbtxt").read_text()
    assert "${" not in text
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_the_repository_is_upstreams_multimodal_set(ref, tmp_path):
    engine = BuiltEngine(ref.engine_name, tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, engine, tmp_path / "repo", "2.51.0", None)
    contract = load_toml(ROOT / "fixtures" / "contracts" / "multimodal" / f"{FAMILY}.toml")
    for model in ("ensemble", "multimodal_encoders"):
        assert sorted(t.name for t in parse(repo, model).input) == sorted(contract[model]["inputs"])
    steps = [step.model_name for step in parse(repo, "ensemble").ensemble_scheduling.step]
    assert steps == ["preprocessing", "multimodal_encoders", "tensorrt_llm", "postprocessing"]
    vision = str(tmp_path / "engine" / "vision")
    assert parse(repo, "preprocessing").parameters["multimodal_model_path"].string_value == vision
    assert parse(repo, "multimodal_encoders").parameters["multimodal_model_path"].string_value == vision
    assert parse(repo, "tensorrt_llm_bls").parameters["multimodal_encoders_name"].string_value == "multimodal_encoders"
    assert (repo / "multimodal_encoders" / "1" / "model.py").is_file()


def test_a_family_without_multimodal_templates_is_refused_naming_those_with(ref, tmp_path):
    engine = BuiltEngine(ref.engine_name, tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    older = type(ref)(ref.engine_name, ref.engine, ref.name, type(ref.options)(**{**ref.options.__dict__, "templates": None}))
    with pytest.raises(TemplateError, match="family trtllm-0.14 has no multimodal templates here yet .* trtllm-0.19"):
        backend_of(ref.engine.backend).render(older, engine, tmp_path / "repo", "2.51.0", None)


def test_the_served_inputs_are_the_multimodal_sets():
    text, images = family_inputs(FAMILY), family_inputs(FAMILY, multimodal=True)
    assert "image_input" not in text["ensemble"] and "image_input" in images["ensemble"]
    assert "IMAGE" in images["multimodal_encoders"] and images["tensorrt_llm"] == text["tensorrt_llm"]


def test_text_tests_skip_a_multimodal_deployment_and_image_tests_every_other(ref):
    text_only = load_lock(ROOT / "engines.lock").deployments()["smollm2-135m:inflight"]
    served, _ = choices("triton_llm", [ref, text_only], set(), lambda *args: None)
    assert [c.skip is not None for c in served] == [True, False]
    assert "serves the multimodal suite only" in served[0].skip
    images, _ = choices("triton_llm", [ref, text_only], {"multimodal"}, lambda *args: None)
    assert [c.skip for c in images][0] is None and "only a multimodal deployment" in images[1].skip


def test_llavas_prompt_puts_the_images_ids_after_user(tmp_path):
    from multimodal import LlavaPrompt  # the preprocessing model's module (conftest: model dirs on sys.path)

    (tmp_path / "vision").mkdir()
    (tmp_path / "vision" / "config.json").write_text(json.dumps({"builder_config": {"model_type": "llava"}}))
    (tmp_path / "engine.json").write_text(
        json.dumps({"build_config": {"max_batch_size": 4, "max_prompt_embedding_table_size": 16}})
    )
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 100}))
    encode = {"USER:\n": [1, 2], " ASSISTANT:": [3]}.__getitem__
    params = {"multimodal_model_path": str(tmp_path / "vision"), "gpt_model_path": str(tmp_path)}
    prompt = LlavaPrompt.of(params, encode)
    assert prompt.wrap([7, 8]) == [1, 2, 100, 101, 102, 103, 7, 8, 3]
    assert prompt.wrap([7, 8], offset=True) == [1, 2, 101, 102, 103, 100, 7, 8, 3]  # image_rows_offset_by_one
    assert LlavaPrompt.of({"multimodal_model_path": "${multimodal_model_path}"}, encode) is None


def test_the_vision_encoder_gives_rows_as_long_as_the_models_embeddings(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="the reference backend extra is not installed")
    transformers = pytest.importorskip("transformers")
    from pytest_triton_llm.stack.engines import vision_tower

    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    args = argparse.Namespace(
        engine=str(tmp_path), model_type="llava", image_size=32, patch_size=16, hidden_size=32, layers=2, seed=3, dtype="float32"
    )
    vision = vision_tower.build(args)
    monkeypatch.syspath_prepend(str(ROOT / "pytest_triton_llm" / "stand_ins" / "triton_models" / "multimodal_encoders"))
    from vision_encoder import VisionEncoder

    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float16)
    rows = VisionEncoder(vision).rows(images)
    assert rows.shape == (2 * 4, 32) and rows.dtype == np.float16
    embeddings = transformers.LlamaForCausalLM.from_pretrained(tmp_path).get_input_embeddings().weight
    ratio = float(np.linalg.norm(rows.astype(np.float32), axis=1).mean() / embeddings.detach().norm(dim=-1).mean())
    assert 0.5 < ratio < 2.0, ratio  # scaled on random images; these are others
    with pytest.raises(ValueError, match=r"image_input must be \[images, 3, 32, 32\]"):
        VisionEncoder(vision).rows(images[:, :, :16, :16])
