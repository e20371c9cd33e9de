"""--triton-url and its companions: endpoints, TLS, headers (never shown), refusals."""

import pytest

from pytest_triton_llm.runtimes.remote import remote_options
from pytest_triton_llm.usage import OptionError


def test_http_and_metrics_default_to_the_same_host_on_triton_s_ports():
    remote = remote_options("grpc://triton.ml.svc:31001", None, None, [], None, None, False)
    e = remote.endpoints
    assert (e.grpc, e.http, e.metrics) == ("triton.ml.svc:31001", "triton.ml.svc:8000", "triton.ml.svc:8002")
    assert e.http_url("/v2") == "http://triton.ml.svc:8000/v2" and e.metrics_url() == "http://triton.ml.svc:8002/metrics"
    assert remote.url == "grpc://triton.ml.svc:31001"


def test_grpcs_means_tls_and_https_by_default_and_a_bare_host_port_means_grpc():
    e = remote_options("grpcs://t:443", None, None, [], None, None, False).endpoints
    assert e.grpc_tls and e.http_tls and e.http_url("/v2") == "https://t:8000/v2"
    assert not remote_options("t:8001", None, None, [], None, None, False).endpoints.grpc_tls


def test_headers_are_sent_but_never_shown():
    e = remote_options("grpc://t:8001", None, None, ["Authorization: Bearer s3cr3t", "X-Team:  ml "], None, None,
                       False).endpoints  # fmt: skip
    assert e.header_dict() == {"authorization": "Bearer s3cr3t", "x-team": "ml"}
    assert e.grpc_metadata() == (("authorization", "Bearer s3cr3t"), ("x-team", "ml"))
    assert "s3cr3t" not in repr(e)


@pytest.mark.parametrize("url, headers, message", [
    ("http://t:8001", [], "--triton-url http://...: give grpc:// or grpcs:// (TLS)"),
    ("grpc://me:pw@t:8001", [], "--triton-url: no credentials in the URL; send them with --triton-header 'NAME: VALUE'"),
    ("grpc://t:8001", ["Bearer s3cr3t"], "--triton-header number 1: expected 'NAME: VALUE'"),
])  # fmt: skip
def test_refusals_say_what_to_fix_without_echoing_a_secret(url, headers, message):
    with pytest.raises(OptionError) as caught:
        remote_options(url, None, None, headers, None, None, False)
    assert str(caught.value) == message


LOCK = """version = 1
[engines.tiny]
backend = "reference"
dtype = "float32"
max_batch_size = 4
max_input_len = 64
max_output_len = 16
[engines.tiny.source]
path = "/w"
file = "w.gguf"
sha256 = "{zeros}"
[engines.tiny.deployments.prod]
batching = "inflight"
decoupled = true
url = "grpc://t:8001"
"""


def served_as(batching: str, decoupled: bool):
    from pathlib import Path

    from pytest_triton_llm.lock import Deployment, DeploymentRef
    from pytest_triton_llm.runtimes.remote import Discovered, ServedEngine

    engine = ServedEngine("tensorrtllm", 4, 64, 16, entry_models=("ensemble",))
    ref = DeploymentRef("remote", engine, batching, Deployment(batching=batching, decoupled=decoupled))
    return [Discovered(ref, Path("/tok"), None)]


@pytest.mark.parametrize("batching, decoupled, error", [("inflight", True, None), ("inflight", False, "inflight decoupled=False"),
                                                         ("v1", False, "v1 decoupled=False")])  # fmt: skip
def test_a_lock_deployment_pinned_to_the_url_is_checked_against_what_the_server_serves(tmp_path, monkeypatch, batching,
                                                                                       decoupled, error):  # fmt: skip
    from pytest_triton_llm.lock import load_lock
    from pytest_triton_llm.progress import Progress
    from pytest_triton_llm.runtimes import RuntimeUnavailable
    from pytest_triton_llm.runtimes.remote import RemoteRuntime

    (tmp_path / "my.lock").write_text(LOCK.format(zeros="0" * 64))
    runtime = RemoteRuntime(remote_options("grpc://t:8001", None, None, [], None, None, False), {"version": "2.51.0"},
                            Progress(lambda _: None))  # fmt: skip
    monkeypatch.setattr(runtime, "_discover", lambda: served_as(batching, decoupled))
    lock = load_lock(tmp_path / "my.lock")
    if error is None:
        assert [r.id for r in runtime.deployments(lock, [])] == ["tiny:prod"]  # the lock's recipe gives the limits
        return
    with pytest.raises(RuntimeUnavailable, match=f"tiny:prod pins url = grpc://t:8001 as inflight decoupled=True, but "
                                                 f"the server serves {error}"):  # fmt: skip
        runtime.deployments(lock, [])
