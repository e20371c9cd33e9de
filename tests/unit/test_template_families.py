"""Template families per Triton version: every mapped version renders, and the version-specific bits of
the tensorrt_llm model (backend parameters, tensors that come and go between releases) are as upstream has them."""

import re
from pathlib import Path

import pytest

from pytest_triton_llm.stack.compat import load_compat
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.lock import Deployment, DeploymentRef, Engine, Lora, Source
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.repository import MODELS, template_family, template_text, template_values
from pytest_triton_llm.common.schema import load_toml

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_triton_llm" / "stack" / "repository"
FAMILIES = load_toml(PACKAGE / "families.toml")["families"]
MAPPED = sorted(FAMILIES, key=lambda v: tuple(int(p) for p in v.split(".")))
ENGINE_DIR = "/engines/tiny"  # where a container would mount the engine
EXECUTOR_WORKER = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
# what the plugin's python pre/postprocessing models return (stand_ins/triton_models/{pre,post}processing)
PREPROCESSING_OUTPUTS = {
    "INPUT_ID",
    "REQUEST_INPUT_LEN",
    "DECODER_INPUT_ID",
    "REQUEST_DECODER_INPUT_LEN",
    "BAD_WORDS_IDS",
    "STOP_WORDS_IDS",
    "EMBEDDING_BIAS",
    "REQUEST_OUTPUT_LEN",
    "OUT_END_ID",
    "OUT_PAD_ID",
    "OUT_PROMPT_TABLE_EXTRA_IDS",
}
POSTPROCESSING_OUTPUTS = {"OUTPUT"}


def make_ref(backend: str = "tensorrtllm", batching: str = "inflight", lora: bool = False) -> DeploymentRef:
    options = Deployment(batching=batching, decoupled=batching == "inflight", max_queue_delay_us=500)
    engine = Engine(
        backend=backend,
        source=Source(file="tiny.gguf", sha256="0" * 64, pypi="x==1"),
        dtype="float16" if backend == "tensorrtllm" else "float32",
        max_batch_size=8,
        max_input_len=256,
        max_output_len=64,
        lora=Lora(max_rank=4, target_modules=("attn_q", "attn_v")) if lora else None,
        deployments={batching: options},
    )
    return DeploymentRef("tiny", engine, batching, options)


def render(tmp_path: Path, triton: str, ref: DeploymentRef | None = None) -> dict[str, model_config_pb2.ModelConfig]:
    ref = ref or make_ref()
    built = BuiltEngine("tiny", tmp_path / "cache" / "tiny", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, built, tmp_path / "repo", triton, ENGINE_DIR)
    configs = {}
    for model in MODELS:
        text = (repo / model / "config.pbtxt").read_text()
        assert "${" not in text
        configs[model] = text_format.Parse(text, model_config_pb2.ModelConfig())
    return configs


def params(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def tensors(items) -> dict:
    return {t.name: t for t in items}


def dtype(tensor) -> str:
    return model_config_pb2.DataType.Name(tensor.data_type)


# -- every family ------------------------------------------------------------------------------------


def test_every_triton_minor_from_24_04_to_the_newest_compat_image_has_a_family():
    newest = list(load_compat().images.values())[-1]
    last = int(newest.triton.split(".")[1])
    assert [f"2.{m}" for m in range(45, last + 1)] == [v for v in MAPPED if 45 <= int(v.split(".")[1]) <= last]
    for version in MAPPED:
        family = template_family(f"{version}.0")
        assert re.fullmatch(r"trtllm-\d+\.\d+", family)
        for model in MODELS:
            assert (PACKAGE / "templates" / family / model / "config.pbtxt").is_file()
    assert template_family("2.45.0") == "trtllm-0.9"
    assert template_family("2.50.0") == "trtllm-0.13"
    assert template_family("2.51.0") == "trtllm-0.14"
    assert template_family("2.61.0") == template_family("2.62.0") == template_family("2.63.0") == "trtllm-1.0"
    assert template_family("2.64.0") == template_family("2.71.0") == "trtllm-1.1"


@pytest.mark.parametrize("family", sorted(set(FAMILIES.values())))
def test_placeholders_without_a_value_are_only_on_optional_parameter_lines(family, tmp_path):
    """A placeholder that template_values leaves unset drops its line: that must never be a tensor or a setting."""
    values = template_values(make_ref(lora=True), tmp_path, family, "tensorrtllm")
    for model in MODELS:
        for line in template_text(family, model).splitlines():
            unset = [k for k in re.findall(r"\$\{(\w+)\}", line) if values[k] is None]
            if line.lstrip().startswith("#"):
                assert "${" not in line, f"{family}/{model}: placeholder in a comment: {line}"
            elif unset:
                assert line.startswith("parameters"), f"{family}/{model}: {unset} unset on {line!r}"


@pytest.mark.parametrize("backend", ["tensorrtllm", "reference"])
@pytest.mark.parametrize("version", MAPPED)
def test_every_mapped_version_renders_a_consistent_ensemble(version, backend, tmp_path):
    batching = "inflight" if backend == "tensorrtllm" else "v1"
    configs = render(tmp_path, f"{version}.0", make_ref(backend, batching))
    for model in MODELS:
        assert configs[model].name == model
    trt = configs["tensorrt_llm"]
    assert trt.backend == ("tensorrtllm" if backend == "tensorrtllm" else "python")
    assert trt.model_transaction_policy.decoupled == (batching == "inflight")
    assert params(trt)["gpt_model_type"] == {"inflight": "inflight_fused_batching", "v1": "V1"}[batching]
    assert params(trt)["gpt_model_path"] == ENGINE_DIR

    # the ensemble wires tensors that exist, with matching dtypes, and only ones the plugin's models produce
    ensemble = configs["ensemble"]
    produced = {t.name: dtype(t) for t in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        model = configs[step.model_name]
        inputs, outputs = tensors(model.input), tensors(model.output)
        for key, tensor in step.input_map.items():
            assert key in inputs, f"{step.model_name} has no input {key}"
            assert produced[tensor] == dtype(inputs[key]), f"{tensor} -> {step.model_name}.{key}"
        for key, tensor in step.output_map.items():
            assert key in outputs, f"{step.model_name} has no output {key}"
            produced[tensor] = dtype(outputs[key])
        if step.model_name == "preprocessing":
            assert set(step.output_map) <= PREPROCESSING_OUTPUTS
        if step.model_name == "postprocessing":
            assert set(step.output_map) == POSTPROCESSING_OUTPUTS
    for out in ensemble.output:
        assert produced[out.name] == dtype(out), out.name
    assert len({t.name for t in ensemble.output}) == len(ensemble.output)


# -- version-specific bits of the tensorrt_llm model for a TensorRT-LLM engine ---------------------------


def test_triton_2_45_tensorrtllm_backend_v0_9(tmp_path):
    configs = render(tmp_path, "2.45.0")
    trt, p = configs["tensorrt_llm"], params(configs["tensorrt_llm"])
    inputs, outputs = tensors(trt.input), tensors(trt.output)
    assert trt.backend == "tensorrtllm"  # v0.9.0 hard-codes it; the template fills it
    assert trt.model_transaction_policy.decoupled
    assert p["gpt_model_type"] == "inflight_fused_batching" and p["gpt_model_path"] == ENGINE_DIR
    assert p["exclude_input_in_output"] == "true"
    assert p["worker_path"] == "/opt/tritonserver/backends/tensorrtllm/triton_tensorrtllm_worker"
    assert "executor_worker_path" not in p
    assert not trt.dynamic_batching.HasField("default_queue_policy")  # max_queue_size came in v0.12
    assert trt.dynamic_batching.max_queue_delay_microseconds == 500
    assert inputs["lora_task_id"].optional and dtype(inputs["lora_task_id"]) == "TYPE_UINT64"
    assert not inputs["request_output_len"].HasField("reshape")
    assert {"min_length", "random_seed", "stop", "streaming"} <= set(inputs)
    for later in (
        "num_return_sequences",
        "decoder_input_ids",
        "prompt_table_extra_ids",
        "exclude_input_in_output",
        "draft_acceptance_threshold",
        "min_tokens",
        "seed",
    ):
        assert later not in inputs
    assert set(outputs) == {
        "output_ids",
        "sequence_length",
        "cum_log_probs",
        "output_log_probs",
        "context_logits",
        "generation_logits",
    }
    # log probs and logits reach the ensemble straight from tensorrt_llm (upstream: through postprocessing)
    step = {s.model_name: s for s in configs["ensemble"].ensemble_scheduling.step}
    assert step["tensorrt_llm"].output_map["cum_log_probs"] == "cum_log_probs"
    assert set(step["postprocessing"].input_map) == {"TOKENS_BATCH", "SEQUENCE_LENGTH"}
    assert {t.name for t in configs["ensemble"].input} >= {"text_input", "max_tokens", "min_length", "random_seed"}


def test_triton_2_50_tensorrtllm_backend_v0_13(tmp_path):
    configs = render(tmp_path, "2.50.0", make_ref(batching="v1"))
    trt, p = configs["tensorrt_llm"], params(configs["tensorrt_llm"])
    inputs, outputs = tensors(trt.input), tensors(trt.output)
    assert trt.backend == "tensorrtllm"
    assert not trt.model_transaction_policy.decoupled
    assert p["gpt_model_type"] == "V1" and p["gpt_model_path"] == ENGINE_DIR
    assert p["executor_worker_path"] == EXECUTOR_WORKER and "worker_path" not in p
    assert trt.dynamic_batching.default_queue_policy.max_queue_size == 0
    assert "encoder_model_path" not in p and "participant_ids" not in p  # unset: left out
    assert inputs["lora_task_id"].optional
    assert {"prompt_table_extra_ids", "decoder_input_ids", "draft_acceptance_threshold", "min_length"} <= set(inputs)
    for later in ("num_return_sequences", "exclude_input_in_output", "context_phase_params", "encoder_input_features"):
        assert later not in inputs
    assert "batch_index" in outputs and "sequence_index" not in outputs
    assert "num_return_sequences" not in {t.name for t in configs["ensemble"].input}


def test_triton_2_62_tensorrtllm_backend_v1_0(tmp_path):
    configs = render(tmp_path, "2.62.0", make_ref(lora=True))
    trt, p = configs["tensorrt_llm"], params(configs["tensorrt_llm"])
    inputs, outputs = tensors(trt.input), tensors(trt.output)
    assert trt.backend == "tensorrtllm"
    assert trt.model_transaction_policy.decoupled
    assert p["gpt_model_type"] == "inflight_fused_batching" and p["gpt_model_path"] == ENGINE_DIR
    assert p["executor_worker_path"] == EXECUTOR_WORKER and "worker_path" not in p
    assert p["tokenizer_dir"] == ENGINE_DIR  # read by the backend since v0.19 (guided decoding)
    assert p["lora_cache_max_adapter_size"] == p["lora_cache_optimal_adapter_size"] == "4"
    assert inputs["input_ids"].optional  # encoder-decoder models may send encoder_input_features instead
    assert dtype(inputs["encoder_input_features"]) == "TYPE_FP16"
    assert dtype(outputs["context_logits"]) == dtype(outputs["generation_logits"]) == "TYPE_FP32"
    assert dtype(inputs["prompt_embedding_table"]) == "TYPE_FP16"
    assert inputs["num_return_sequences"].optional and inputs["lora_task_id"].optional
    # renamed after v0.19.0: min_length -> min_tokens, random_seed -> seed (tensor and ensemble)
    assert {"min_tokens", "seed", "return_perf_metrics", "guided_decoding_guide"} <= set(inputs)
    assert not {"min_length", "random_seed", "return_num_input_tokens"} & set(inputs)  # the last: TensorRT-LLM 1.2
    assert {"kv_cache_reused_blocks", "arrival_time_ns"} <= set(outputs) and "num_input_tokens" not in outputs
    ensemble_inputs = {t.name for t in configs["ensemble"].input}
    assert {"min_tokens", "seed", "num_return_sequences", "lora_task_id"} <= ensemble_inputs
    assert not {"min_length", "random_seed"} & ensemble_inputs
    assert configs["preprocessing"].dynamic_batching.max_queue_delay_microseconds == 0


def test_the_stand_in_serves_an_old_family_with_its_own_model(tmp_path):
    ref = make_ref("reference", "v1")
    built = BuiltEngine("tiny", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of(ref.engine.backend).render(ref, built, tmp_path / "repo", "2.45.0", None)
    config = text_format.Parse((repo / "tensorrt_llm" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.backend == "python"
    assert params(config)["gpt_model_path"] == str(tmp_path / "engine")
    assert params(config)["stand_in_family"] == "trtllm-0.9"  # it answers as v0.9.0 does where versions differ
    assert (repo / "tensorrt_llm" / "1" / "model.py").is_file()
    assert (repo / "preprocessing" / "1" / "model.py").is_file()


def test_triton_2_71_tensorrt_llm_1_2_the_newest_image(tmp_path):
    configs = render(tmp_path, "2.71.0", make_ref(lora=True))
    trt, p = configs["tensorrt_llm"], params(configs["tensorrt_llm"])
    inputs, outputs = tensors(trt.input), tensors(trt.output)
    assert trt.backend == "tensorrtllm" and trt.model_transaction_policy.decoupled
    assert p["gpt_model_type"] == "inflight_fused_batching" and p["gpt_model_path"] == ENGINE_DIR
    assert p["executor_worker_path"] == EXECUTOR_WORKER and p["tokenizer_dir"] == ENGINE_DIR
    assert "enable_trt_overlap" not in p  # unset: left out
    # TensorRT-LLM 1.1 added token counts on request
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        assert inputs[name].optional and dtype(inputs[name]) == "TYPE_BOOL"
    assert dtype(outputs["num_input_tokens"]) == dtype(outputs["num_output_tokens"]) == "TYPE_INT32"
    assert {"min_tokens", "seed", "lora_task_id"} <= set(inputs) and not {"min_length", "random_seed"} & set(inputs)
    ensemble = configs["ensemble"]
    assert {"return_num_input_tokens", "return_num_output_tokens"} <= {t.name for t in ensemble.input}
    assert {"num_input_tokens", "num_output_tokens"} <= {t.name for t in ensemble.output}
