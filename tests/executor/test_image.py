"""The production executor image, tested as far as it can be without Docker or a GPU.

What a user of the image would check: the model computes a fixed function and batching does not
change it; the Python-backend ``execute`` answers every request of a dynamic batch, in order, with
its own rows; the shipped ``config.pbtxt`` files pass the same Triton rules the executor enforces;
the Dockerfiles pin their base image and start Triton the way PoolPilot needs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # torch is a declared dependency of the executor extra

from poolpilot.executor import pb_utils  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "executor_image"
POOLNET_DIR = IMAGE / "model_repository" / "poolnet"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def poolnet() -> ModuleType:
    return _load(POOLNET_DIR / "1" / "poolnet.py", "poolnet_under_test")


@pytest.fixture()
def model_py(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``model.py`` imported with our pb_utils stand-in as ``triton_python_backend_utils``."""
    monkeypatch.setitem(sys.modules, pb_utils.MODULE_NAME, pb_utils)
    return _load(POOLNET_DIR / "1" / "model.py", "poolnet_model_py_under_test")


def _config_json() -> dict[str, Any]:
    from poolpilot.triton import config as triton_config

    text = (POOLNET_DIR / "config.pbtxt").read_text()
    return triton_config.config_from_pbtxt(text, model_name="poolnet")


def _initialized(model_py: ModuleType, cfg: dict[str, Any]) -> Any:
    model = model_py.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_kind": "GPU",  # as the config asks; falls back to CPU here
            "model_instance_device_id": "0",
            "model_repository": str(POOLNET_DIR),
            "model_version": "1",
            "model_name": "poolnet",
        }
    )
    return model


def _request(array: np.ndarray, request_id: str = "") -> pb_utils.InferenceRequest:
    return pb_utils.InferenceRequest(inputs=[pb_utils.Tensor("INPUT0", array)], request_id=request_id)


# ---- the pb_utils stand-in (what model.py relies on) ---------------------------------------------


def test_pb_utils_tensors_round_trip_through_dlpack() -> None:
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    t = pb_utils.Tensor("INPUT0", x)
    as_torch = torch.from_dlpack(t.to_dlpack())
    assert as_torch.shape == (2, 16) and t.is_cpu()
    back = pb_utils.Tensor.from_dlpack("OUTPUT0", as_torch * 2)
    assert back.name() == "OUTPUT0"
    np.testing.assert_array_equal(back.as_numpy(), x * 2)
    with pytest.raises(pb_utils.TritonModelException, match="contiguous"):
        pb_utils.Tensor.from_dlpack("T", torch.zeros(4, 4).t())
    with pytest.raises(pb_utils.TritonModelException, match=r"np\.object_"):
        pb_utils.Tensor("S", np.array(["a"]))


def test_pb_utils_request_response_and_config_helpers() -> None:
    req = pb_utils.InferenceRequest(
        inputs=[pb_utils.Tensor("INPUT0", np.zeros((1, 16), np.float32))],
        request_id="r1",
        parameters={"priority": 1},
    )
    assert json.loads(req.parameters()) == {"priority": 1}  # a JSON string, as in Triton
    assert req.request_id() == "r1"
    assert pb_utils.get_input_tensor_by_name(req, "INPUT0") is not None
    assert pb_utils.get_input_tensor_by_name(req, "NOPE") is None
    err = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    resp = pb_utils.InferenceResponse(output_tensors=[], error=err)
    assert resp.has_error() and resp.error() is err and err.code() == 3
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(output_tensors="OUTPUT0")  # type: ignore[arg-type]
    cfg = {"input": [{"name": "INPUT0", "data_type": "TYPE_FP32"}], "output": [{"name": "OUTPUT0"}]}
    assert pb_utils.get_input_config_by_name(cfg, "INPUT0") == cfg["input"][0]
    assert pb_utils.get_output_config_by_name(cfg, "X") is None
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    with pytest.raises(KeyError, match="TYPE_FP33"):
        pb_utils.triton_string_to_numpy("TYPE_FP33")


# ---- the model module ---------------------------------------------------------------------------


def test_same_seed_builds_same_network_and_other_seed_differs(poolnet: ModuleType) -> None:
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    a = poolnet.forward_batch(poolnet.build(7), x)
    b = poolnet.forward_batch(poolnet.build(7), x)
    c = poolnet.forward_batch(poolnet.build(8), x)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_batched_forward_equals_row_by_row(poolnet: ModuleType) -> None:
    model = poolnet.build()
    x = np.random.default_rng(2).standard_normal((37, 16)).astype(np.float32)
    batched = poolnet.forward_batch(model, x)
    rows = np.concatenate([poolnet.forward_batch(model, x[i : i + 1]) for i in range(len(x))])
    assert batched.shape == (37, 16) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, rows, rtol=1e-5, atol=1e-6)


def test_forward_is_not_identity(poolnet: ModuleType) -> None:
    x = np.ones((2, 16), dtype=np.float32)
    y = poolnet.forward_batch(poolnet.build(), x)
    assert np.all(np.isfinite(y))
    assert np.abs(y - x).max() > 1e-3


def test_forward_rejects_wrong_width(poolnet: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"\[batch, 16\]"):
        poolnet.forward_batch(poolnet.build(), np.zeros((2, 15), dtype=np.float32))


# ---- the Python-backend model -------------------------------------------------------------------


def test_execute_answers_each_request_of_a_batch_in_order(model_py: ModuleType, poolnet: ModuleType) -> None:
    model = _initialized(model_py, _config_json())
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((b, 16)).astype(np.float32) for b in (1, 5, 2, 8)]
    responses = model.execute([_request(x, f"r{i}") for i, x in enumerate(inputs)])

    assert len(responses) == len(inputs)
    reference = poolnet.build()
    for x, response in zip(inputs, responses, strict=True):
        assert not response.has_error()
        out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        assert out is not None
        assert out.as_numpy().shape == x.shape
        assert out.as_numpy().dtype == np.float32
        np.testing.assert_allclose(out.as_numpy(), poolnet.forward_batch(reference, x), rtol=1e-5, atol=1e-6)


def test_execute_runs_one_forward_pass_per_batch(model_py: ModuleType) -> None:
    model = _initialized(model_py, _config_json())
    calls: list[int] = []
    original = model.model.forward

    def counting_forward(x: Any) -> Any:
        calls.append(int(x.shape[0]))
        return original(x)

    model.model.forward = counting_forward
    model.execute([_request(np.zeros((b, 16), dtype=np.float32)) for b in (3, 1, 4)])
    assert calls == [8]


def test_execute_fails_only_the_bad_request(model_py: ModuleType) -> None:
    model = _initialized(model_py, _config_json())
    good = np.ones((2, 16), dtype=np.float32)
    no_input = pb_utils.InferenceRequest(inputs=[pb_utils.Tensor("OTHER", good)])
    wrong_width = _request(np.ones((2, 3), dtype=np.float32))
    responses = model.execute([_request(good), no_input, wrong_width, _request(good)])

    assert [r.has_error() for r in responses] == [False, True, True, False]
    assert responses[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert "INPUT0" in responses[1].error().message()
    assert "[2, 3]" in responses[2].error().message()
    assert np.array_equal(
        responses[0].output_tensors()[0].as_numpy(), responses[3].output_tensors()[0].as_numpy()
    )


def test_initialize_honours_seed_parameter(model_py: ModuleType, poolnet: ModuleType) -> None:
    cfg = _config_json()
    cfg["parameters"] = {"poolnet_seed": {"string_value": "99"}}
    model = _initialized(model_py, cfg)
    x = np.ones((1, 16), dtype=np.float32)
    out = model.execute([_request(x)])[0].output_tensors()[0].as_numpy()
    np.testing.assert_allclose(out, poolnet.forward_batch(poolnet.build(99), x), rtol=1e-6)


# ---- the shipped model configurations -------------------------------------------------------------


def test_poolnet_config_passes_triton_rules() -> None:
    cfg = _config_json()  # parse + normalise + validate, as the executor does at load
    assert cfg["name"] == "poolnet"
    assert cfg["backend"] == "python"
    assert cfg["max_batch_size"] == 64
    assert [i["name"] for i in cfg["input"]] == ["INPUT0"]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0"]
    assert [int(d) for d in cfg["input"][0]["dims"]] == [16]
    # Triton's normalisation fills preferred sizes with [max_batch_size] (triton.md §1.2).
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [64]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] > 0
    assert cfg["instance_group"][0]["kind"] == "KIND_GPU"


def test_poolnet_config_round_trips_as_a_load_override() -> None:
    """PoolPilot's update path: GET config → edit batching → POST it back (triton.md §2.2)."""
    from poolpilot.triton import config as triton_config

    cfg = _config_json()
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 750
    again = triton_config.config_from_override(json.dumps(cfg), model_name="poolnet")
    assert again["dynamic_batching"]["max_queue_delay_microseconds"] == 750
    assert again["input"] == cfg["input"]


def test_emulated_config_passes_triton_rules_and_declares_curve() -> None:
    from poolpilot.triton import config as triton_config

    path = IMAGE / "emulated_repository" / "llm_emulated" / "config.pbtxt"
    cfg = triton_config.config_from_pbtxt(path.read_text(), model_name="llm_emulated")
    from poolpilot.executor.backends import EmulatedBackend
    from poolpilot.sim.params import SimParams

    # The emulated GPU is the simulator's default one: same curve, token term included.
    assert EmulatedBackend(cfg).curve == SimParams().gpu_curve
    assert (path.parent / "1").is_dir()  # Triton needs a version directory


# ---- the Dockerfiles ----------------------------------------------------------------------------


def _cmd(dockerfile: Path) -> list[str]:
    text = dockerfile.read_text().replace("\\\n", " ")
    match = re.search(r"^CMD\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"{dockerfile.name}: no exec-form CMD"
    cmd: list[str] = json.loads(match.group(1))
    return cmd


def _flags(cmd: list[str]) -> list[str]:
    """Normalise `--flag=value` and `--flag value` into `--flag=value` items."""
    out: list[str] = []
    i = 0
    while i < len(cmd):
        item = cmd[i]
        if item.startswith("--") and "=" not in item and i + 1 < len(cmd) and not cmd[i + 1].startswith("--"):
            out.append(f"{item}={cmd[i + 1]}")
            i += 2
        else:
            out.append(item)
            i += 1
    return out


def test_triton_dockerfile_pins_base_and_starts_explicit_mode() -> None:
    dockerfile = IMAGE / "Dockerfile"
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.MULTILINE)
    assert froms, "no FROM line"
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-py3", froms[0]), froms[0]

    cmd = _cmd(dockerfile)
    flags = _flags(cmd)
    assert cmd[0] == "tritonserver"
    assert "--model-control-mode=explicit" in flags
    assert "--load-model=poolnet" in flags
    assert "--model-repository=/models" in flags
    assert "--metrics-config=summary_latencies=true" in flags
    assert "--metrics-config=histogram_latencies=true" in flags
    assert re.search(r"^COPY\s+model_repository/\s+/models/", dockerfile.read_text(), re.MULTILINE)
    assert re.search(r"pip install .*torch", dockerfile.read_text())


def test_cpu_dockerfile_uses_same_flags_as_triton_image() -> None:
    triton_flags = set(_flags(_cmd(IMAGE / "Dockerfile")))
    cpu_cmd = _cmd(IMAGE / "Dockerfile.cpu")
    assert cpu_cmd[0] == "poolpilot-executor"
    cpu_flags = set(_flags(cpu_cmd))
    for flag in ("--model-control-mode=explicit", "--load-model=poolnet", "--model-repository=/models"):
        assert flag in cpu_flags and flag in triton_flags
    froms = re.findall(r"^FROM\s+(\S+)", (IMAGE / "Dockerfile.cpu").read_text(), re.MULTILINE)
    assert all(":" in f and not f.endswith(":latest") for f in froms)


def test_cpu_image_command_is_accepted_by_the_executor_cli() -> None:
    """The CPU image's CMD must parse with the real ``poolpilot-executor`` flags and metrics settings."""
    import argparse

    from poolpilot.executor import cli
    from poolpilot.executor.metrics import MetricsSettings

    parser = argparse.ArgumentParser(prog="poolpilot-executor")
    cli.add_arguments(parser)
    args = parser.parse_args(_cmd(IMAGE / "Dockerfile.cpu")[1:])
    assert args.model_control_mode == "explicit"
    assert args.load_model == ["poolnet"]
    assert args.host == "0.0.0.0"  # reachable from outside the container
    assert MetricsSettings.parse(args.metrics_config).summary_latencies


def test_cpu_executor_serves_the_image_repository(executor_process, poolnet: ModuleType) -> None:
    """The CPU executor runs the very model.py the image ships, answering with PoolNet's outputs."""
    import tritonclient.http as triton_http

    proc = executor_process(IMAGE / "model_repository", ["poolnet"])
    client = triton_http.InferenceServerClient(proc.url)
    try:
        x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
        inp = triton_http.InferInput("INPUT0", [3, 16], "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("poolnet", [inp])
        out = result.as_numpy("OUTPUT0")
    finally:
        client.close()
    np.testing.assert_allclose(out, poolnet.forward_batch(poolnet.build(), x), rtol=1e-5, atol=1e-6)
