"""--triton-url and its companions: endpoints, TLS, headers (never shown), refusals."""

import json

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.lock import load_lock
from pytest_triton_llm.common.progress import Progress
from pytest_triton_llm.stack.repository.user import fill_like_upstream
from pytest_triton_llm.stack.runtimes import RuntimeUnavailable
from pytest_triton_llm.stack.runtimes.remote import RemoteRuntime, remote_options
from pytest_triton_llm.common.usage import OptionError
from ..third_party import UPSTREAM, needs_upstream


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
    e = remote_options("grpc://t:8001", None, None, ["Authorization: Bearer s3cr3t", "X-Team:  ml "], None, None, False).endpoints
    assert e.header_dict() == {"authorization": "Bearer s3cr3t", "x-team": "ml"}
    assert e.grpc_metadata() == (("authorization", "Bearer s3cr3t"), ("x-team", "ml"))
    assert "s3cr3t" not in repr(e)


@pytest.mark.parametrize(
    "url, headers, message",
    [
        ("http://t:8001", [], "--triton-url http://...: give grpc:// or grpcs:// (TLS)"),
        ("grpc://me:pw@t:8001", [], "--triton-url: no credentials in the URL; send them with --triton-header 'NAME: VALUE'"),
        ("grpc://t:8001", ["Bearer s3cr3t"], "--triton-header number 1: expected 'NAME: VALUE'"),
    ],
)
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


class FakeServer:
    """A Triton server's HTTP answers for discovery (repository index, model configs and metadata), from configs as
    rendered: the remote runtime's own code reads them, nothing of it is stubbed."""

    def __init__(self, configs: dict):
        self.configs = {m: text_format.Parse(text, model_config_pb2.ModelConfig()) for m, text in configs.items()}

    def get(self, path: str) -> bytes:
        parts = path.strip("/").split("/")  # v2/models/<model>[/config]
        config = self.configs[parts[2]]
        if parts[-1] == "config":
            return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)).encode()
        return json.dumps({"name": parts[2], "inputs": [{"name": i.name} for i in config.input]}).encode()

    def post(self, path: str, body: bytes) -> bytes:
        return json.dumps([{"name": m, "state": "READY"} for m in self.configs]).encode()


def remote_runtime(monkeypatch, tmp_path, configs: dict):
    runtime = RemoteRuntime(
        remote_options("grpc://t:8001", None, None, [], None, str(tmp_path), False),
        {"version": "2.51.0"},
        Progress(lambda _: None),
    )
    (tmp_path / "tokenizer.json").write_text("{}")  # --tokenizer: a directory holding one
    server = FakeServer(configs)
    monkeypatch.setattr(runtime, "_get", server.get)
    monkeypatch.setattr(runtime, "_post", server.post)
    return runtime


def rendered(tmp_path, backend: str, batching: str = "inflight", layout: str | None = None) -> dict:
    """The project's repository for a deployment, as its configs would be served (engine dir unreadable remotely)."""
    from pytest_triton_llm.stack.cache import BuiltEngine
    from pytest_triton_llm.stack.engines import backend_of
    from pytest_triton_llm.stack.lock import Deployment, DeploymentRef, Engine, Source

    options = Deployment(batching=batching, decoupled=batching == "inflight", layout=layout)
    engine = Engine(
        backend=backend,
        source=Source(file="w.gguf", sha256="0" * 64, pypi="x==1"),
        dtype="float32",
        max_batch_size=4,
        max_input_len=64,
        max_output_len=16,
        deployments={"d": options},
    )
    ref = DeploymentRef("tiny", engine, "d", options)
    out = tmp_path / f"repo-{backend}-{batching}-{layout}"
    repo = backend_of(backend).render(
        ref, BuiltEngine("tiny", tmp_path / "nowhere", {"digest": "0" * 64}, True, 0.0), out, "2.51.0", "/engines/tiny"
    )
    return {p.parent.name: p.read_text() for p in repo.glob("*/config.pbtxt")}


def upstream_python_tensorrt_llm() -> str:
    """Upstream's own tensorrt_llm config of v0.14.0 on its python backend (TensorRT-LLM's python model.py), filled as
    a user fills it."""
    values = {
        "triton_backend": "python",
        "triton_max_batch_size": "4",
        "decoupled_mode": "true",
        "batching_strategy": "inflight_fused_batching",
        "engine_dir": "/engines/x",
        "max_queue_delay_microseconds": "0",
        "max_beam_width": "1",
        "exclude_input_in_output": "true",
        "encoder_input_features_data_type": "TYPE_FP16",
        "logits_datatype": "TYPE_FP32",
        "prompt_embedding_table_data_type": "TYPE_FP16",
    }
    text = fill_like_upstream(
        (UPSTREAM / "all_models" / "inflight_batcher_llm" / "tensorrt_llm" / "config.pbtxt").read_text(), values
    )
    return "\n".join(line for line in text.splitlines() if "${" not in line)


@needs_upstream
def test_a_python_backend_tensorrt_llm_without_the_stand_ins_parameter_is_tensorrt_llm_not_the_stand_in(monkeypatch, tmp_path):
    runtime = remote_runtime(monkeypatch, tmp_path, {"tensorrt_llm": upstream_python_tensorrt_llm()})
    [found] = runtime._discover(limits_needed=False)
    assert found.ref.engine.backend == "tensorrtllm" and found.ref.layout == "inflight_batcher_llm"
    assert (found.ref.options.batching, found.ref.options.decoupled) == ("inflight", True)


def test_the_stand_in_is_known_by_the_parameter_it_publishes(monkeypatch, tmp_path):
    runtime = remote_runtime(monkeypatch, tmp_path, rendered(tmp_path, "reference"))
    [found] = runtime._discover(limits_needed=False)
    assert found.ref.engine.backend == "reference" and found.ref.engine.entry_models == ("ensemble", "tensorrt_llm_bls")


def test_an_llmapi_server_is_known_by_its_contract_and_tested_as_llmapi(monkeypatch, tmp_path):
    configs = rendered(tmp_path, "llmapi", layout="llmapi")
    runtime = remote_runtime(monkeypatch, tmp_path, configs)
    [found] = runtime._discover(limits_needed=False)
    assert (found.ref.layout, found.ref.engine.backend, found.ref.id) == ("llmapi", "llmapi", "remote:llmapi")
    assert found.ref.engine.entry_models == ("tensorrt_llm",)


@needs_upstream
def test_a_tensorrt_llm_without_gpt_model_type_is_refused_not_taken_for_v1(monkeypatch, tmp_path):
    text = "\n".join(line for line in upstream_python_tensorrt_llm().splitlines())
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    del config.parameters["gpt_model_type"]
    runtime = remote_runtime(monkeypatch, tmp_path, {"tensorrt_llm": text_format.MessageToString(config)})
    with pytest.raises(RuntimeUnavailable, match="tensorrt_llm has gpt_model_type None, not one of"):
        runtime._discover(limits_needed=False)


@pytest.mark.parametrize("batching, decoupled, error", [("inflight", True, None), ("v1", False, "v1 decoupled=False")])
def test_a_lock_deployment_pinned_to_the_url_gives_the_limits_the_server_does_not_show(
    tmp_path, monkeypatch, batching, decoupled, error
):
    (tmp_path / "my.lock").write_text(LOCK.format(zeros="0" * 64))
    lock = load_lock(tmp_path / "my.lock")
    runtime = remote_runtime(monkeypatch, tmp_path, rendered(tmp_path, "reference", batching))
    with pytest.raises(RuntimeUnavailable, match="limits"):  # unpinned: the engine directory is not readable here
        runtime.deployments(None, [])
    if error is None:
        [ref] = runtime.deployments(lock, [])
        assert ref.id == "tiny:prod" and ref.engine.max_input_len == 64  # the lock's recipe gives the limits
    else:
        expected = "tiny:prod pins url = grpc://t:8001 as inflight_batcher_llm inflight decoupled=True, but the server serves"
        with pytest.raises(RuntimeUnavailable, match=f"{expected} inflight_batcher_llm {error}"):
            runtime.deployments(lock, [])
