"""Every template family against its contract file (fixtures/contracts/<family>.toml, transcribed from upstream's
config.pbtxt at that tag, never from these templates), and the client's inputs against what each served family
declares: Triton refuses an input a model does not declare."""

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.lock import Deployment, DeploymentRef, Engine, Lora, Source
from pytest_triton_llm.stack.repository import template_family
from pytest_triton_llm.common.schema import load_toml
from pytest_triton_llm.triton.tensor_contract import RequestError, Sampling, core_inputs, ensemble_inputs

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = sorted(set(load_toml(ROOT / "pytest_triton_llm" / "stack" / "repository" / "families.toml")["families"].values()))
CONTRACTS = ROOT / "fixtures" / "contracts"


def rendered(tmp_path: Path, triton_version: str) -> dict[str, model_config_pb2.ModelConfig]:
    options = Deployment(batching="inflight", decoupled=True)
    engine = Engine(
        backend="tensorrtllm",
        source=Source(file="w.safetensors", sha256="0" * 64, path="/ckpt"),
        dtype="float16",
        max_batch_size=8,
        max_input_len=256,
        max_output_len=64,
        lora=Lora(max_rank=8, target_modules=("attn_q",)),
        deployments={"inflight": options},
    )
    ref = DeploymentRef("tiny", engine, "inflight", options)
    built = BuiltEngine("tiny", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    repo = backend_of("tensorrtllm").render(ref, built, tmp_path / "repo", triton_version, None)
    return {
        m: text_format.Parse((repo / m / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        for m in ("ensemble", "tensorrt_llm", "tensorrt_llm_bls")
    }


def version_of(family: str) -> str:
    families = load_toml(ROOT / "pytest_triton_llm" / "stack" / "repository" / "families.toml")["families"]
    return next(f"{v}.0" for v, f in families.items() if f == family)


def tensors(entries) -> dict[str, dict]:
    """name -> dtype, dims and (inputs) optional, as the config declares them."""
    return {
        t.name: {"dtype": model_config_pb2.DataType.Name(t.data_type), "dims": list(t.dims)}
        | ({"optional": t.optional} if isinstance(t, model_config_pb2.ModelInput) else {})
        for t in entries
    }


def test_every_family_has_a_contract_file():
    assert sorted(p.stem for p in CONTRACTS.glob("trtllm-*.toml")) == FAMILIES
    templates = CONTRACTS.parent.parent / "pytest_triton_llm" / "stack" / "repository" / "templates"
    llmapi = sorted(p.name for p in templates.glob("llmapi-*"))
    assert sorted(p.stem for p in CONTRACTS.glob("llmapi-*.toml")) == llmapi


@pytest.mark.parametrize("family", FAMILIES)
def test_the_templates_declare_exactly_the_contract_of_their_upstream_tag(tmp_path, family):
    contract = load_toml(CONTRACTS / f"{family}.toml")
    configs = rendered(tmp_path, version_of(family))
    for model in ("ensemble", "tensorrt_llm", "tensorrt_llm_bls"):
        declared_in, declared_out = tensors(configs[model].input), tensors(configs[model].output)
        expected_in = {
            n: {"dtype": s["dtype"], "dims": s["dims"], "optional": s.get("optional", False)}
            for n, s in contract[model]["inputs"].items()
        }
        assert declared_in == expected_in, f"{family} {model} inputs"
        expected_out = {n: {"dtype": s["dtype"], "dims": s["dims"]} for n, s in contract[model]["outputs"].items()}
        assert declared_out == expected_out, f"{family} {model} outputs"


EVERY_OPTION = {
    "end_id": 2,
    "pad_id": 2,
    "sampling": Sampling(
        top_k=5,
        top_p=0.9,
        temperature=0.7,
        random_seed=3,
        min_length=2,
        repetition_penalty=1.1,
        presence_penalty=0.1,
        frequency_penalty=0.1,
    ),
    "return_log_probs": True,
}


@pytest.mark.parametrize("tag, renamed", [("24.04", False), ("24.10", False), ("25.10", True), ("26.07", True)])
def test_the_clients_inputs_are_exactly_names_the_served_family_declares(tmp_path, tag, renamed):
    configs = rendered(tmp_path, load_compat().entry(tag).triton)
    ensemble, core, bls = ({t.name for t in configs[m].input} for m in ("ensemble", "tensorrt_llm", "tensorrt_llm_bls"))
    text = ensemble_inputs("hi", 8, stop_words=["x"], bad_words=["y"], stream=True, declared=ensemble, **EVERY_OPTION)
    assert set(ensemble_inputs("hi", 8, stop_words=["x"], stream=True, declared=bls, **EVERY_OPTION)) <= bls
    ids = core_inputs(
        [1, 2],
        8,
        stop_words_ids=[[3]],
        bad_words_ids=[[4]],
        streaming=True,
        lora_task_id=7,
        lora_weights=np.zeros((1, 2, 4)),
        lora_config=np.zeros((1, 2, 3)),
        declared=core,
        **EVERY_OPTION,
    )
    assert set(text) <= ensemble and set(ids) <= core
    new, old = ("min_tokens", "seed"), ("min_length", "random_seed")
    assert set(new if renamed else old) <= set(text) & set(ids)
    assert not set(old if renamed else new) & (set(text) | set(ids))
    if "exclude_input_in_output" in core:  # tensorrt_llm takes it per request from backend v0.14 (image 24.10)
        assert "exclude_input_in_output" in core_inputs([1], 8, exclude_input_in_output=True, declared=core)
    else:
        with pytest.raises(RequestError, match="declares no input 'exclude_input_in_output'"):
            core_inputs([1], 8, exclude_input_in_output=True, declared=core)
    assert template_family(load_compat().entry(tag).triton) in FAMILIES


def test_every_family_whose_core_model_takes_the_stop_signal_says_how_it_answers_one_for_an_unknown_request():
    for family in FAMILIES:
        contract = load_toml(CONTRACTS / f"{family}.toml")
        if "stop" in contract["tensorrt_llm"]["inputs"]:
            answer = contract["answers"]["stop_of_an_unknown_request"]
            assert answer == {"empty_final": True} or set(answer) == {"error"}, (family, answer)
