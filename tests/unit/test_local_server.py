"""Which tritonserver the local runtime starts, and the version guard that runs before any build."""

from pathlib import Path

import pytest

from pytest_triton_llm.stack.compat import load_compat
from pytest_triton_llm.stack.runtimes.discovery import FoundServer, ServerNotFound, find_tritonserver
from pytest_triton_llm.stack.runtimes.tritonserver_wheel import locate
from pytest_triton_llm.stack.runtimes.version_guard import VersionMismatch, check_versions


def install(prefix: Path) -> Path:
    """A tritonserver laid out as in NGC images: <prefix>/bin/tritonserver, <prefix>/backends."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "backends" / "python").mkdir(parents=True)
    binary = prefix / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return binary


def test_the_option_wins_then_the_variable_then_the_image_then_the_wheel(tmp_path):
    pytest.importorskip("pytriton", reason="the reference extra (nvidia-pytriton) is not installed")
    option, variable, image = install(tmp_path / "opt"), install(tmp_path / "env"), install(tmp_path / "ngc")
    env = {"TRITONSERVER": str(variable), "TRITON_SERVER_VERSION": "2.50.0"}
    found = find_tritonserver(str(option), env, ngc_binary=image)
    assert (found.binary, found.origin, found.backends) == (option, "--triton-binary", tmp_path / "opt" / "backends")
    assert found.declared_version is None  # the image's TRITON_SERVER_VERSION is not about this binary
    assert find_tritonserver(None, env, ngc_binary=image).binary == variable
    found = find_tritonserver(None, {"TRITON_SERVER_VERSION": "2.50.0"}, ngc_binary=image)
    assert (found.binary, found.declared_version, found.origin) == (image, "2.50.0", "the serving image's")
    wheel = find_tritonserver(None, {}, ngc_binary=tmp_path / "absent")
    assert wheel.wheel is not None and wheel.binary == locate().binary and wheel.declared_version == "2.51.0"


def test_the_wheels_own_binary_named_by_the_option_is_served_as_the_wheel():
    pytest.importorskip("pytriton", reason="the reference extra (nvidia-pytriton) is not installed")
    # its python backend has no stub of this Python inside the wheel: it must be prepared like the default's
    found = find_tritonserver(str(locate().binary), {})
    assert found.wheel is not None and found.declared_version == "2.51.0"
    assert found.origin == f"nvidia-pytriton {found.wheel.wheel_version} (--triton-binary)"


def test_a_bad_path_or_layout_says_what_is_wrong(tmp_path):
    with pytest.raises(ServerNotFound, match=r"--triton-binary: /nope/tritonserver is not an executable file"):
        find_tritonserver("/nope/tritonserver", {})
    binary = install(tmp_path / "p")
    (tmp_path / "p" / "backends" / "python").rmdir()
    (tmp_path / "p" / "backends").rmdir()
    with pytest.raises(ServerNotFound, match=r"TRITONSERVER: no backends directory at .*/p/backends"):
        find_tritonserver(None, {"TRITONSERVER": str(binary)})


def server(version):
    return FoundServer(Path("/opt/tritonserver/bin/tritonserver"), "the serving image's", version, Path("/b"))


COMPAT = load_compat()
IMAGE_24_09 = COMPAT.entry("24.09")


def test_a_requested_image_must_match_the_server_and_tensorrt_llm_found_here():
    assert check_versions(COMPAT, server("2.50.0"), ("0.13.0", "/site/tensorrt_llm"), IMAGE_24_09) is IMAGE_24_09
    with pytest.raises(VersionMismatch) as raised:
        check_versions(COMPAT, server("2.50.0"), ("0.14.0", "/site/tensorrt_llm"), IMAGE_24_09)
    assert str(raised.value).startswith(
        "--triton-image 24.09-trtllm ships TensorRT-LLM 0.13.0 (compat.toml), but tensorrt_llm 0.14.0 is "
        "installed here (/site/tensorrt_llm)"
    )
    with pytest.raises(
        VersionMismatch,
        match=r"ships Triton 2\.50\.0 \(compat\.toml\), but the tritonserver found is "
        r"Triton 2\.51\.0",
    ):
        check_versions(COMPAT, server("2.51.0"), None, IMAGE_24_09)


def test_without_a_request_the_server_version_names_the_image_and_tensorrt_llm_must_agree():
    assert check_versions(COMPAT, server("2.51.0"), None, None).tag == "24.10"
    assert check_versions(COMPAT, server("2.51.0"), ("0.14.0", "/t"), None).tag == "24.10"
    assert check_versions(COMPAT, server(None), ("0.14.0", "/t"), None) is None  # known once started
    with pytest.raises(
        VersionMismatch,
        match=r"tensorrt_llm 0\.13\.0 is installed here \(/t\), but the tritonserver "
        r"found is Triton 2\.51\.0 .*ships with TensorRT-LLM 0\.14\.0 \(image 24\.10-trtllm",
    ):
        check_versions(COMPAT, server("2.51.0"), ("0.13.0", "/t"), None)
