"""Upstream's own python models for tensorrtllm deployments: pinned per TensorRT-LLM version, taken from the image, a
checkout (--trtllm-models) or GitHub at the commit, checked by sha256, never the project's stand-in."""

import io
import shutil
import urllib.error
from pathlib import Path

import pytest

from pytest_triton_llm.stack.cache import BuiltEngine
from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.engines import backend_of
from pytest_triton_llm.stack.engines.base import RenderSite
from pytest_triton_llm.stack.lock import Deployment, DeploymentRef, Engine, Source
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.stack.repository import model_code as rendered_code
from pytest_triton_llm.stack.repository import upstream
from pytest_triton_llm.stack.repository.stand_in import STAND_IN_PARAMETER
from ..third_party import UPSTREAM, needs_upstream

ROOT = Path(__file__).resolve().parents[2]
V0_14 = UPSTREAM
pytestmark = needs_upstream
ORIGIN = "upstream triton-inference-server/tensorrtllm_backend v0.14.0 (9958c21167e1)"


def test_every_image_of_the_compat_matrix_has_its_tensorrt_llm_versions_models_pinned():
    known = upstream.sources()
    missing = sorted({e.tensorrt_llm for e in load_compat().images.values()} - set(known))
    assert missing == []
    # up to 0.19 the files are tensorrtllm_backend's, read where they were made: every one has its sha256
    assert all(known[v].pinned for v in ("0.7.0", "0.9.0", "0.13.0", "0.14.0", "0.17.0", "0.19.0"))


def test_a_checkout_given_by_trtllm_models_is_checked_and_copied_and_says_where_it_came_from(tmp_path):
    code = upstream.model_code("0.14.0", tmp_path / "cache", Progress(), local_dir=str(V0_14))
    assert sorted(code) == ["postprocessing", "preprocessing", "tensorrt_llm_bls"]
    origin = code["tensorrt_llm_bls"](tmp_path / "bls")
    assert origin == f"{ORIGIN}, from --trtllm-models {V0_14}"
    assert sorted(p.relative_to(tmp_path / "bls").as_posix() for p in (tmp_path / "bls").rglob("*.py")) == [
        "lib/decode.py",
        "lib/triton_decoder.py",
        "model.py",
    ]
    upstream_file = V0_14 / "all_models" / "inflight_batcher_llm" / "tensorrt_llm_bls" / "1" / "model.py"
    assert (tmp_path / "bls" / "model.py").read_bytes() == upstream_file.read_bytes()


def test_a_modified_copy_is_refused_in_one_line_naming_the_file(tmp_path):
    copy = tmp_path / "backend"
    shutil.copytree(V0_14, copy)
    with (copy / "all_models" / "inflight_batcher_llm" / "postprocessing" / "1" / "model.py").open("a") as fh:
        fh.write("# changed\n")
    with pytest.raises(upstream.UpstreamModelsError) as caught:
        upstream.model_code("0.14.0", tmp_path / "cache", Progress(), local_dir=str(copy))
    message = str(caught.value)
    assert "\n" not in message and "postprocessing/1/model.py has sha256" in message
    assert "is not that tag's file" in message


def _files_of(directory: Path):
    """urlopen as GitHub's raw host would answer for the pinned commit, served from an unmodified extract."""

    def urlopen(url, timeout):
        path = url.split("/all_models/inflight_batcher_llm/", 1)[1]
        return io.BytesIO((directory / "all_models" / "inflight_batcher_llm" / path).read_bytes())

    return urlopen


def test_without_a_checkout_the_pinned_files_are_fetched_once_into_the_engine_cache(tmp_path, monkeypatch):
    calls = []
    serve = _files_of(V0_14)
    monkeypatch.setattr(upstream.urllib.request, "urlopen", lambda url, timeout: calls.append(url) or serve(url, timeout))
    code = upstream.model_code("0.14.0", tmp_path / "cache", Progress())
    assert code["preprocessing"](tmp_path / "pre").startswith(f"{ORIGIN}, fetched into {tmp_path / 'cache' / 'upstream'}")
    assert len(calls) == 5 and all("/9958c21167e1a8e6bbddafc09b284904aaf22ab1/" in url for url in calls)
    upstream.model_code("0.14.0", tmp_path / "cache", Progress())
    assert len(calls) == 5  # the second time from the cache, checked again


def test_a_host_without_github_is_told_how_to_give_the_files_in_one_line(tmp_path, monkeypatch):
    def offline(url, timeout):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(upstream.urllib.request, "urlopen", offline)
    with pytest.raises(upstream.UpstreamModelsError) as caught:
        upstream.model_code("0.14.0", tmp_path / "cache", Progress())
    message = str(caught.value)
    assert "\n" not in message and message.endswith(
        "git clone --depth 1 --branch v0.14.0 https://github.com/triton-inference-server/tensorrtllm_backend.git and pass "
        "--trtllm-models with its path"
    )
    assert not (tmp_path / "cache" / "upstream").exists() or not any((tmp_path / "cache" / "upstream").iterdir())


def test_an_image_that_ships_the_models_gets_links_resolved_inside_its_container(tmp_path):
    code = upstream.model_code("1.2.1", tmp_path / "cache", Progress(), image_dir="/app/all_models/inflight_batcher_llm")
    origin = code["tensorrt_llm_bls"](tmp_path / "bls")
    assert origin.startswith("the image's /app/all_models/inflight_batcher_llm/tensorrt_llm_bls (upstream NVIDIA/TensorRT-LLM")
    assert (tmp_path / "bls" / "lib" / "decode.py").readlink() == Path(
        "/app/all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py"
    )


def test_a_rendered_tensorrtllm_repository_serves_upstreams_models_and_says_so(tmp_path):
    options = Deployment(batching="inflight", decoupled=True)
    engine = Engine(
        backend="tensorrtllm",
        source=Source(file="w.safetensors", sha256="0" * 64, path="/ckpt"),
        dtype="float16",
        max_batch_size=8,
        max_input_len=256,
        max_output_len=64,
        deployments={"i": options},
    )
    ref = DeploymentRef("tiny", engine, "i", options)
    built = BuiltEngine("tiny", tmp_path / "engine", {"digest": "0" * 64}, True, 0.0)
    site = RenderSite(trtllm_models=str(V0_14))
    repo = backend_of("tensorrtllm").render(ref, built, tmp_path / "repo", "2.51.0", None, site)
    assert rendered_code(repo) == dict.fromkeys(
        ("preprocessing", "postprocessing", "tensorrt_llm_bls"), f"{ORIGIN}, from --trtllm-models {V0_14}"
    )
    assert not any(STAND_IN_PARAMETER in p.read_text() for p in repo.glob("*/config.pbtxt"))
    assert not list((repo / "tensorrt_llm" / "1").glob("*.py"))  # the C++ backend: no python code at all
