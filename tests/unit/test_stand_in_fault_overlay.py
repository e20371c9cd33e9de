"""A stand-in fault is an overlay on a rendered repository (repository/stand_in.add_fault): the parameter that switches
it on lands in the config of every model the stand-in's code serves, and nowhere else; the serving path renders clean."""

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pytest_triton_llm.stack.repository import STAND_IN
from pytest_triton_llm.stack.repository.stand_in import FAULT_PARAMETER, add_fault


def config(path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_the_fault_parameter_goes_into_the_stand_ins_models_only_and_keeps_their_own(tmp_path):
    for model in ("tensorrt_llm", "preprocessing", "ensemble"):
        (tmp_path / model).mkdir()
        (tmp_path / model / "config.pbtxt").write_text(
            f'name: "{model}"\nparameters {{ key: "keep" value {{ string_value: "me" }} }}\n'
        )
    code = {"tensorrt_llm": STAND_IN, "preprocessing": "upstream v0.14.0", "ensemble": "none", "gone": STAND_IN}
    assert add_fault(tmp_path, "end_id_ignored", code) == ["tensorrt_llm"]
    faulted = config(tmp_path / "tensorrt_llm" / "config.pbtxt")
    assert faulted.parameters[FAULT_PARAMETER].string_value == "end_id_ignored"
    assert faulted.parameters["keep"].string_value == "me"
    for model in ("preprocessing", "ensemble"):
        assert FAULT_PARAMETER not in config(tmp_path / model / "config.pbtxt").parameters
