"""Conformance of poolpilot-executor with Triton's HTTP protocol, driven only through tritonclient.

Each test checks what a user of Triton would check: health codes, metadata, outputs of inference,
the model repository extension (config override, validation errors, reload semantics), and the
statistics extension.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from poolpilot.sandbox.executor import ExecutorProcess, running_executor, write_emulated_model

REPO_ROOT = Path(__file__).resolve().parents[2]
POOLNET_DIR = REPO_ROOT / "executor_image" / "model_repository" / "poolnet"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conformance") / "models"
    write_emulated_model(root, "ident", max_batch_size=8, dynamic_batching={})
    write_emulated_model(
        root, "reload", max_batch_size=8, dynamic_batching={"max_queue_delay_microseconds": 100}
    )
    write_emulated_model(root, "ctl", max_batch_size=8, dynamic_batching={})
    write_emulated_model(root, "persist", max_batch_size=8, dynamic_batching={})
    write_emulated_model(
        root,
        "live",
        latency_ms=(2.0, 0.1),
        max_batch_size=16,
        dynamic_batching={"max_queue_delay_microseconds": 1000},
    )
    write_emulated_model(root, "nobatch", max_batch_size=0)
    write_emulated_model(root, "slowq", latency_ms=(150, 0), max_batch_size=1, dynamic_batching={})
    if POOLNET_DIR.is_dir():
        shutil.copytree(POOLNET_DIR, root / "poolnet")
    return root


@pytest.fixture(scope="module")
def executor(repo: Path) -> Iterator[ExecutorProcess]:
    with running_executor(repo, load=["*"]) as proc:
        yield proc


@pytest.fixture()
def client(executor: ExecutorProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(executor.url, network_timeout=120.0)
    yield c
    c.close()


def _input(array: np.ndarray, name: str = "INPUT0", binary: bool = True) -> httpclient.InferInput:
    inp = httpclient.InferInput(name, list(array.shape), "FP32")
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


# -- health and metadata ------------------------------------------------------------------------


def test_health_and_server_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "triton"
    for ext in (
        "model_repository",
        "statistics",
        "binary_tensor_data",
        "schedule_policy",
        "model_configuration",
    ):
        assert ext in meta["extensions"]


def test_model_metadata_has_batch_dimension(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("ident")
    assert meta["name"] == "ident"
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert client.get_model_metadata("nobatch")["inputs"][0]["shape"] == [4]
    assert client.is_model_ready("ident")
    assert client.is_model_ready("ident", "1")
    assert not client.is_model_ready("ident", "7")
    assert not client.is_model_ready("no_such_model")


# -- inference ------------------------------------------------------------------------------------


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_emulated_model_returns_its_input(
    client: httpclient.InferenceServerClient, binary_in: bool, binary_out: bool
) -> None:
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    result = client.infer(
        "ident",
        [_input(x, binary=binary_in)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)],
        request_id="req-42",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    response = result.get_response()
    assert response["id"] == "req-42"
    assert response["model_name"] == "ident"
    assert response["model_version"] == "1"


def test_all_outputs_returned_when_none_requested(client: httpclient.InferenceServerClient) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    result = client.infer("ident", [_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_model_without_batching_takes_exact_dims(client: httpclient.InferenceServerClient) -> None:
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(client.infer("nobatch", [_input(x)]).as_numpy("OUTPUT0"), x)


@pytest.mark.parametrize(
    ("shape", "message"),
    [((2, 5), "unexpected shape for input 'INPUT0'"), ((9, 4), "batch-size must be <= 8")],
)
def test_bad_input_is_rejected_with_400(
    client: httpclient.InferenceServerClient, shape: tuple[int, int], message: str
) -> None:
    with pytest.raises(InferenceServerException, match=message) as err:
        client.infer("ident", [_input(np.zeros(shape, dtype=np.float32))])
    assert err.value.status() == "400"


def test_wrong_input_name_and_unknown_model(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="unexpected inference input 'X'"):
        client.infer("ident", [_input(np.zeros((1, 4), dtype=np.float32), name="X")])
    with pytest.raises(InferenceServerException, match="unknown model") as err:
        client.infer("nope", [_input(np.zeros((1, 4), dtype=np.float32))])
    assert err.value.status() == "404"


@pytest.mark.skipif(not POOLNET_DIR.is_dir(), reason="executor_image/model_repository/poolnet not present")
def test_python_backend_poolnet_matches_its_own_forward(client: httpclient.InferenceServerClient) -> None:
    spec = importlib.util.spec_from_file_location("poolnet_reference", POOLNET_DIR / "1" / "poolnet.py")
    assert spec is not None and spec.loader is not None
    poolnet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(poolnet)
    features = client.get_model_metadata("poolnet")["inputs"][0]["shape"][1]
    x = np.random.default_rng(7).standard_normal((5, features)).astype(np.float32)
    got = client.infer("poolnet", [_input(x)]).as_numpy("OUTPUT0")
    expected = poolnet.forward_batch(poolnet.build(poolnet.DEFAULT_SEED), x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# -- model repository extension ---------------------------------------------------------------


def test_load_with_config_override_changes_config(client: httpclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("reload")
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [8]  # normalised: [max_batch_size]
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 2000
    client.load_model("reload", config=json.dumps(cfg))
    after = client.get_model_config("reload")
    assert after["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    # Replace, not merge: dropping the preferred sizes makes normalisation refill them.
    del cfg["dynamic_batching"]["preferred_batch_size"]
    cfg["max_batch_size"] = 4
    client.load_model("reload", config=json.dumps(cfg))
    after = client.get_model_config("reload")
    assert after["max_batch_size"] == 4
    assert after["dynamic_batching"]["preferred_batch_size"] == [4]
    x = np.ones((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(client.infer("reload", [_input(x)]).as_numpy("OUTPUT0"), x)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(no_such_field=1), "Invalid config override: "),
        (lambda c: c.update(max_batch_size=2), "dynamic batching preferred size must be <= max batch size"),
        (lambda c: c.update(name="other"), "directory name must equal model name"),
        (
            lambda c: c["dynamic_batching"].update(priority_levels=3),
            r"default priority level must be in range",
        ),
    ],
)
def test_invalid_override_is_rejected_and_old_config_keeps_serving(
    client: httpclient.InferenceServerClient, mutate: Any, message: str
) -> None:
    before = client.get_model_config("ident")
    cfg = json.loads(json.dumps(before))
    mutate(cfg)
    with pytest.raises(InferenceServerException, match=message) as err:
        client.load_model("ident", config=json.dumps(cfg))
    assert err.value.status() == "400"
    assert client.get_model_config("ident") == before
    assert client.is_model_ready("ident")


def test_failed_backend_load_keeps_the_old_model_serving(client: httpclient.InferenceServerClient) -> None:
    before = client.get_model_config("ident")
    cfg = json.loads(json.dumps(before))
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 10  # a real change: full reload
    cfg["parameters"]["emulated_batch_latency_ms"] = {"string_value": "not-a-curve"}
    with pytest.raises(InferenceServerException, match="emulated_batch_latency_ms"):
        client.load_model("ident", config=json.dumps(cfg))
    assert client.get_model_config("ident") == before
    x = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_array_equal(client.infer("ident", [_input(x)]).as_numpy("OUTPUT0"), x)


@pytest.mark.skipif(not POOLNET_DIR.is_dir(), reason="executor_image/model_repository/poolnet not present")
def test_python_backend_model_reloads_with_new_batching(client: httpclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("poolnet")
    x = np.ones((2, cfg["input"][0]["dims"][0]), dtype=np.float32)
    before = client.infer("poolnet", [_input(x)]).as_numpy("OUTPUT0")
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 100
    cfg["instance_group"][0]["count"] = 2
    client.load_model("poolnet", config=json.dumps(cfg))
    after_cfg = client.get_model_config("poolnet")
    assert after_cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert after_cfg["instance_group"][0]["count"] == 2
    np.testing.assert_allclose(client.infer("poolnet", [_input(x)]).as_numpy("OUTPUT0"), before, rtol=1e-6)


def test_config_must_be_a_string_and_parameters_known(client: httpclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("ident")
    with pytest.raises(InferenceServerException, match="attempt to access JSON non-string as string"):
        client.load_model("ident", config=cfg)  # a dict, not a JSON string (Triton #4833)
    with pytest.raises(InferenceServerException, match="Unrecognized load parameter"):
        # tritonclient sends `files` keys verbatim as load parameters.
        client.load_model("ident", config=json.dumps(cfg), files={"not_a_file_key": b"x"})
    with pytest.raises(InferenceServerException, match="must be provided with file override"):
        client.load_model("ident", files={"file:1/model.py": b"print(1)"})


def test_instance_count_change_is_in_place_and_keeps_stats(client: httpclient.InferenceServerClient) -> None:
    x = np.ones((2, 4), dtype=np.float32)
    client.infer("ctl", [_input(x)])
    count_before = client.get_inference_statistics("ctl")["model_stats"][0]["inference_count"]
    assert count_before >= 2
    cfg = client.get_model_config("ctl")
    cfg["instance_group"][0]["count"] = 3
    client.load_model("ctl", config=json.dumps(cfg))
    assert client.get_model_config("ctl")["instance_group"][0]["count"] == 3
    # In-place update: same model object, statistics not reset.
    assert client.get_inference_statistics("ctl")["model_stats"][0]["inference_count"] == count_before
    # A batching change is a full reload: a new model, statistics reset.
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 10
    client.load_model("ctl", config=json.dumps(cfg))
    assert client.get_inference_statistics("ctl")["model_stats"][0]["inference_count"] == 0


def test_override_persists_across_plain_load_until_pbtxt_is_newer(
    client: httpclient.InferenceServerClient, repo: Path
) -> None:
    cfg = client.get_model_config("persist")
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 4321
    client.load_model("persist", config=json.dumps(cfg))
    client.load_model("persist")
    assert client.get_model_config("persist")["dynamic_batching"]["max_queue_delay_microseconds"] == 4321
    pbtxt = repo / "persist" / "config.pbtxt"
    future = time.time() + 5
    os.utime(pbtxt, (future, future))
    client.load_model("persist")
    assert client.get_model_config("persist")["dynamic_batching"]["max_queue_delay_microseconds"] == 0


def test_unload_then_load_and_repository_index(client: httpclient.InferenceServerClient) -> None:
    names = {entry["name"] for entry in client.get_model_repository_index()}
    assert {"ident", "ctl", "reload"} <= names
    client.unload_model("nobatch")
    assert not client.is_model_ready("nobatch")
    entry = next(e for e in client.get_model_repository_index() if e["name"] == "nobatch")
    assert entry["state"] == "UNAVAILABLE"
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.infer("nobatch", [_input(np.zeros(4, dtype=np.float32))])
    client.load_model("nobatch")
    assert client.is_model_ready("nobatch")
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        client.load_model("does_not_exist")
    assert "does_not_exist" not in {entry["name"] for entry in client.get_model_repository_index()}


def test_statistics_extension_reports_batches(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("ident")["model_stats"][0]
    client.infer("ident", [_input(np.ones((3, 4), dtype=np.float32))])
    stats = client.get_inference_statistics("ident")["model_stats"][0]
    assert stats["name"] == "ident" and stats["version"] == "1"
    assert stats["inference_count"] == before["inference_count"] + 3
    assert stats["execution_count"] == before["execution_count"] + 1
    assert stats["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert sizes.get(3, 0) >= 1
    all_models = {s["name"] for s in client.get_inference_statistics()["model_stats"]}
    assert "ident" in all_models and "reload" in all_models


# -- reload under load ---------------------------------------------------------------------------


async def _stream(url: str, stop: asyncio.Event, failures: list[str], successes: list[int]) -> None:
    client = aioclient.InferenceServerClient(url)
    x = np.ones((1, 4), dtype=np.float32)
    inp = aioclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    try:
        while not stop.is_set():
            try:
                result = await client.infer("live", [inp])
                if not np.array_equal(result.as_numpy("OUTPUT0"), x):
                    failures.append("wrong output")
                successes.append(1)
            except InferenceServerException as exc:
                failures.append(str(exc))
    finally:
        await client.close()


def _prometheus_count(executor: ExecutorProcess, model: str) -> float:
    with urllib.request.urlopen(executor.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "nv_inference_count":
            return sum(s.value for s in family.samples if s.labels.get("model") == model)
    return 0.0


async def test_five_batching_changes_under_load_lose_no_request(executor: ExecutorProcess) -> None:
    control = aioclient.InferenceServerClient(executor.url)
    count_before = await asyncio.to_thread(_prometheus_count, executor, "live")
    stop = asyncio.Event()
    failures: list[str] = []
    successes: list[int] = []
    streams = [asyncio.create_task(_stream(executor.url, stop, failures, successes)) for _ in range(8)]
    try:
        await asyncio.sleep(0.3)
        for delay_us in (500, 3000, 0, 8000, 1500):
            cfg = await control.get_model_config("live")
            cfg["dynamic_batching"]["max_queue_delay_microseconds"] = delay_us
            cfg["max_batch_size"] = 8 if delay_us % 1000 == 0 else 16
            cfg["dynamic_batching"]["preferred_batch_size"] = [cfg["max_batch_size"]]
            await control.load_model("live", config=json.dumps(cfg))
            got = await control.get_model_config("live")
            assert got["dynamic_batching"]["max_queue_delay_microseconds"] == delay_us
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.gather(*streams)
        await control.close()
    assert failures == []
    assert len(successes) > 50
    # Prometheus counters kept counting across the five reloads (statistics reset, counters do not).
    count_after = await asyncio.to_thread(_prometheus_count, executor, "live")
    assert count_after - count_before == len(successes)


async def test_queued_and_running_requests_finish_across_a_reload(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    x = np.full((1, 4), 3.0, dtype=np.float32)
    inp = aioclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    try:
        # One instance, 150 ms per request: one runs, two wait in the old model's queue.
        pending = [asyncio.create_task(client.infer("slowq", [inp])) for _ in range(3)]
        await asyncio.sleep(0.05)
        cfg = await client.get_model_config("slowq")
        cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 100
        await client.load_model("slowq", config=json.dumps(cfg))
        results = await asyncio.gather(*pending)
        for result in results:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
        np.testing.assert_array_equal((await client.infer("slowq", [inp])).as_numpy("OUTPUT0"), x)
        stats = await client.get_inference_statistics("slowq")
        # The old model served the three; the new model's fresh statistics hold only the last one.
        assert stats["model_stats"][0]["inference_count"] == 1
    finally:
        await client.close()


# -- control mode none -------------------------------------------------------------------------


def test_model_control_none_loads_everything_and_refuses_load(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_emulated_model(root, "a", dynamic_batching={})
    write_emulated_model(root, "b")
    with running_executor(root, explicit=False) as proc:
        client = httpclient.InferenceServerClient(proc.url)
        assert client.is_model_ready("a") and client.is_model_ready("b")
        with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
            client.load_model("a")
        with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
            client.unload_model("a")
        client.close()


def test_bad_config_on_disk_fails_startup(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_emulated_model(root, "bad", max_batch_size=2, dynamic_batching={"preferred_batch_size": [4]})
    with (
        pytest.raises(RuntimeError, match="preferred size must be <= max batch size"),
        running_executor(root),
    ):
        pass
