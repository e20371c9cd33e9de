"""The exact commands a tensorrtllm engine build runs, per image (TensorRT-LLM version)."""

import dataclasses
import typing

import pytest

from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines.tensorrtllm.commands import BuildPaths, UnsupportedRecipe, build_commands, load_architectures
from pytest_triton_llm.stack.lock import Engine, Lora, Source

SOURCE = Source(file="model.safetensors", sha256="0" * 64, path="/models/llama")
ENGINE = Engine(backend="tensorrtllm", source=SOURCE, dtype="float16", max_batch_size=8, max_input_len=2048, max_output_len=512)
LORA = Lora(max_rank=8, target_modules=("attn_q", "attn_k", "attn_v"))
PATHS = BuildPaths(examples="/app/examples")
NEWEST = list(load_compat().images)[-1]


def commands(tag, **changes):
    return build_commands(dataclasses.replace(ENGINE, **changes), load_compat().entry(tag), PATHS)


def test_24_01_uses_the_llama_build_script_with_bare_switches():
    assert commands("24.01", tp_size=2) == [
        [
            "python3",
            "/app/examples/llama/build.py",
            "--model_dir",
            "/checkpoint",
            "--dtype",
            "float16",
            "--use_gpt_attention_plugin",
            "float16",
            "--use_gemm_plugin",
            "float16",
            "--remove_input_padding",
            "--paged_kv_cache",
            "--enable_context_fmha",
            "--use_inflight_batching",
            "--max_batch_size",
            "8",
            "--max_input_len",
            "2048",
            "--max_output_len",
            "512",
            "--world_size",
            "2",
            "--tp_size",
            "2",
            "--pp_size",
            "1",
            "--output_dir",
            "/engine",
        ]
    ]


def test_24_04_converts_then_builds_with_max_output_len_and_paged_kv_cache():
    convert, build = commands("24.04", lora=LORA)
    assert convert == [
        "python3",
        "/app/examples/llama/convert_checkpoint.py",
        "--model_dir",
        "/checkpoint",
        "--output_dir",
        "/work",
        "--dtype",
        "float16",
        "--tp_size",
        "1",
        "--pp_size",
        "1",
    ]
    assert build == [
        "trtllm-build",
        "--checkpoint_dir",
        "/work",
        "--output_dir",
        "/engine",
        "--max_batch_size",
        "8",
        "--max_input_len",
        "2048",
        "--max_output_len",
        "512",
        "--gpt_attention_plugin",
        "float16",
        "--gemm_plugin",
        "float16",
        "--remove_input_padding",
        "enable",
        "--context_fmha",
        "enable",
        "--paged_kv_cache",
        "enable",
        "--lora_plugin",
        "float16",
        "--lora_target_modules",
        "attn_q",
        "attn_k",
        "attn_v",
        "--max_lora_rank",
        "8",
    ]


def test_24_09_builds_with_max_seq_len_and_kv_cache_type():
    _, build = commands("24.09", tp_size=2, pp_size=2)
    assert build[5:] == [
        "--max_batch_size",
        "8",
        "--max_input_len",
        "2048",
        "--max_seq_len",
        "2560",
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
    ]
    assert commands("24.09", tp_size=2, pp_size=2)[0][-4:] == ["--tp_size", "2", "--pp_size", "2"]


def test_the_newest_image_finds_llama_under_models_core_and_quantizes_with_quantize_py():
    convert, _ = commands(NEWEST)
    assert convert[1] == "/app/examples/models/core/llama/convert_checkpoint.py"
    quantize, build = commands(NEWEST, quantization="int4_awq")
    assert quantize == [
        "python3",
        "/app/examples/quantization/quantize.py",
        "--model_dir",
        "/checkpoint",
        "--dtype",
        "float16",
        "--qformat",
        "int4_awq",
        "--awq_block_size",
        "128",
        "--calib_size",
        "32",
        "--tp_size",
        "1",
        "--pp_size",
        "1",
        "--output_dir",
        "/work",
    ]
    assert build[:5] == ["trtllm-build", "--checkpoint_dir", "/work", "--output_dir", "/engine"]
    fp8, _ = commands("24.09", quantization="fp8")
    assert fp8[fp8.index("--qformat") : fp8.index("--tp_size")] == [
        "--qformat",
        "fp8",
        "--kv_cache_dtype",
        "fp8",
        "--calib_size",
        "512",
    ]


def test_recipes_an_image_cannot_build_are_refused_by_name():
    with pytest.raises(UnsupportedRecipe, match=r"TensorRT-LLM 0\.7\.1 \(image 24\.01\).*24\.04"):
        commands("24.01", lora=LORA)
    with pytest.raises(UnsupportedRecipe, match=r"TensorRT-LLM 0\.8\.0 \(image 24\.02\)"):
        commands("24.02", lora=LORA)
    with pytest.raises(UnsupportedRecipe, match="float16 or bfloat16"):
        commands("24.09", dtype="float32", quantization="fp8")


BUILD_0_9 = [
    "trtllm-build",
    "--checkpoint_dir",
    "/work",
    "--output_dir",
    "/engine",
    "--max_batch_size",
    "8",
    "--max_input_len",
    "2048",
    "--max_output_len",
    "512",
    "--gpt_attention_plugin",
    "float16",
    "--gemm_plugin",
    "float16",
    "--remove_input_padding",
    "enable",
    "--context_fmha",
    "enable",
    "--paged_kv_cache",
    "enable",
]
BUILD_FROM_0_13 = [
    "trtllm-build",
    "--checkpoint_dir",
    "/work",
    "--output_dir",
    "/engine",
    "--max_batch_size",
    "8",
    "--max_input_len",
    "2048",
    "--max_seq_len",
    "2560",
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
]


@pytest.mark.parametrize(
    ("tag", "examples", "build"),
    [
        ("24.04", "/app/examples/", BUILD_0_9),
        ("24.09", "/app/examples/", BUILD_FROM_0_13),
        ("26.07", "/app/examples/models/core/", BUILD_FROM_0_13),
    ],
)
@pytest.mark.parametrize(
    ("architecture", "convert"),
    [
        (
            "llama",
            [
                "llama/convert_checkpoint.py",
                "--model_dir",
                "/checkpoint",
                "--output_dir",
                "/work",
                "--dtype",
                "float16",
                "--tp_size",
                "2",
                "--pp_size",
                "1",
            ],
        ),
        (
            "mistral",
            [
                "llama/convert_checkpoint.py",
                "--model_dir",
                "/checkpoint",
                "--output_dir",
                "/work",
                "--dtype",
                "float16",
                "--tp_size",
                "2",
                "--pp_size",
                "1",
            ],
        ),
        (
            "gpt",
            [
                "gpt/convert_checkpoint.py",
                "--gpt_variant",
                "gpt2",
                "--model_dir",
                "/checkpoint",
                "--output_dir",
                "/work",
                "--dtype",
                "float16",
                "--tp_size",
                "2",
                "--pp_size",
                "1",
            ],
        ),
        (
            "qwen",
            [
                "qwen/convert_checkpoint.py",
                "--model_dir",
                "/checkpoint",
                "--output_dir",
                "/work",
                "--dtype",
                "float16",
                "--tp_size",
                "2",
                "--pp_size",
                "1",
            ],
        ),
        (
            "gemma",
            [
                "gemma/convert_checkpoint.py",
                "--ckpt-type",
                "hf",
                "--model-dir",
                "/checkpoint",
                "--output-model-dir",
                "/work",
                "--dtype",
                "float16",
                "--world-size",
                "2",
            ],
        ),
        (
            "phi",
            [
                "phi/convert_checkpoint.py",
                "--model_dir",
                "/checkpoint",
                "--output_dir",
                "/work",
                "--dtype",
                "float16",
                "--tp_size",
                "2",
                "--pp_size",
                "1",
            ],
        ),
    ],
)
def test_each_architecture_converts_with_its_own_example_then_builds_alike(tag, examples, build, architecture, convert):
    script, *flags = convert
    assert commands(tag, architecture=architecture, tp_size=2) == [["python3", examples + script, *flags], build]


def test_the_examples_moved_under_models_core_in_tensorrt_llm_0_20():
    assert commands("25.05")[0][1] == "/app/examples/llama/convert_checkpoint.py"  # TensorRT-LLM 0.19.0
    assert commands("25.06")[0][1] == "/app/examples/models/core/llama/convert_checkpoint.py"  # TensorRT-LLM 0.20.0


def test_tensorrt_llm_0_7_builds_mistral_as_llama_and_refuses_the_others_naming_the_first_image_that_can():
    assert commands("24.01", architecture="mistral") == commands("24.01")
    refusal = r"^architecture 'gemma': TensorRT-LLM 0\.7\.1 \(image 24\.01\) has no example .* that has one is 24\.04 "
    with pytest.raises(UnsupportedRecipe, match=refusal):
        commands("24.01", architecture="gemma")
    with pytest.raises(UnsupportedRecipe, match=r"'gpt': TensorRT-LLM 0\.8\.0 \(image 24\.02\).* is 24\.04"):
        commands("24.02", architecture="gpt")


def test_architectures_whose_model_is_not_pipeline_parallel_refuse_pp_size():
    for tag, architecture in (("24.09", "gemma"), ("26.07", "phi"), ("24.04", "gpt")):
        with pytest.raises(UnsupportedRecipe, match=f"'{architecture}' cannot be pipeline parallel .*set pp_size = 1"):
            commands(tag, architecture=architecture, pp_size=2)
    assert commands("24.09", architecture="gpt", pp_size=2)[0][-2:] == ["--pp_size", "2"]


def test_every_lock_architecture_has_examples():
    assert set(load_architectures()) == set(typing.get_args(typing.get_type_hints(Engine)["architecture"]))


def test_prompt_tables_are_built_with_trtllm_builds_max_prompt_embedding_table_size_and_refused_before_it():
    _, build = commands("24.09", max_prompt_embedding_table_size=64)
    assert build[-2:] == ["--max_prompt_embedding_table_size", "64"]
    assert "--max_prompt_embedding_table_size" not in commands("24.09")[1]  # 0: no prompt tables, no flag
    with pytest.raises(UnsupportedRecipe, match=r"^TensorRT-LLM 0\.7\.1 \(image 24\.01\) builds with .*from TensorRT-LLM 0\.8"):
        commands("24.01", max_prompt_embedding_table_size=64)
