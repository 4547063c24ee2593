"""The /metrics page: Triton's names, types and labels, parseable by prometheus_client, and consistent
with what the executor really ran (statistics extension)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from poolpilot.executor.metrics import MetricsSettings
from poolpilot.sandbox.executor import ExecutorProcess, running_executor, write_emulated_model

COUNTERS = [
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
]


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutorProcess]:
    root = tmp_path_factory.mktemp("metrics") / "models"
    write_emulated_model(
        root,
        "m",
        latency_ms=(20, 0.5),
        max_batch_size=8,
        dynamic_batching={"max_queue_delay_microseconds": 5000},
    )
    write_emulated_model(
        root,
        "t",
        latency_ms=(200, 0),
        max_batch_size=1,
        dynamic_batching={
            "default_queue_policy": {
                "default_timeout_microseconds": 10_000_000,
                "allow_timeout_override": True,
            }
        },
    )
    with running_executor(
        root, extra_args=["--metrics-config", "summary_latencies=true", "--metrics-interval-ms", "200"]
    ) as proc:
        yield proc


def _families(executor: ExecutorProcess) -> dict[str, Metric]:
    with urllib.request.urlopen(executor.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Metric], name: str, **labels: str) -> float:
    for sample in families[name].samples:
        # prometheus_client's parser reports counter samples as `<name>_total`.
        if sample.name in (name, f"{name}_total") and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    raise KeyError(f"{name}{labels}")


async def _load(url: str, model: str, n: int, concurrency: int) -> None:
    client = aioclient.InferenceServerClient(url)
    inp = aioclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await client.infer(model, [inp])

    try:
        await asyncio.gather(*(one() for _ in range(n)))
    finally:
        await client.close()


def test_names_types_and_labels(executor: ExecutorProcess) -> None:
    asyncio.run(_load(executor.url, "m", 20, 5))
    with urllib.request.urlopen(executor.metrics_url, timeout=10) as resp:
        raw = resp.read().decode()
    assert '\nnv_inference_count{model="m",version="1"} ' in raw  # Triton's names: no `_total` suffix
    # (PoolPilot's own token counter is the one `_total`: it is not Triton's, see test_token_counter.py)
    assert not re.search(r"^(?!poolpilot_)\w+_total[{ ]", raw, re.MULTILINE)
    families = _families(executor)
    for name in COUNTERS:
        assert families[name].type == "counter", name
        labels = families[name].samples[0].labels
        assert labels["model"] in ("m", "t") and labels["version"] == "1"
    assert {s.labels["reason"] for s in families["nv_inference_request_failure"].samples} >= {
        "REJECTED",
        "OTHER",
    }
    assert families["nv_inference_pending_request_count"].type == "gauge"
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"):
        assert families[name].type == "gauge"
        assert families[name].samples[0].labels["gpu_uuid"].startswith("GPU-")
    assert _value(families, "nv_inference_request_success", model="m") >= 20
    summary = families["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    quantiles = {s.labels["quantile"] for s in summary.samples if "quantile" in s.labels}
    assert {"0.5", "0.9", "0.99"} <= quantiles
    p99 = _value(families, "nv_inference_request_summary_us", model="m", quantile="0.99")
    p50 = _value(families, "nv_inference_request_summary_us", model="m", quantile="0.5")
    assert 20_000 <= p50 <= p99  # every request includes at least the 20 ms emulated compute
    assert "nv_inference_queue_summary_us" in families


def test_count_over_exec_count_matches_the_batches_run(executor: ExecutorProcess) -> None:
    before = _families(executor)
    asyncio.run(_load(executor.url, "m", 64, 16))
    after = _families(executor)
    d_inf = _value(after, "nv_inference_count", model="m") - _value(before, "nv_inference_count", model="m")
    d_exec = _value(after, "nv_inference_exec_count", model="m") - _value(
        before, "nv_inference_exec_count", model="m"
    )
    assert d_inf == 64
    client = httpclient.InferenceServerClient(executor.url)
    stats = client.get_inference_statistics("m")["model_stats"][0]
    client.close()
    executions = sum(b["compute_infer"]["count"] for b in stats["batch_stats"])
    inferences = sum(b["batch_size"] * b["compute_infer"]["count"] for b in stats["batch_stats"])
    assert executions == stats["execution_count"]
    assert inferences == stats["inference_count"]
    # Model lifetime: Prometheus and the statistics extension agree on the average batch size.
    total_inf = _value(after, "nv_inference_count", model="m")
    total_exec = _value(after, "nv_inference_exec_count", model="m")
    assert total_inf / total_exec == pytest.approx(inferences / executions)
    assert d_inf / d_exec > 1.5  # 16 concurrent clients with a 5 ms delay do form batches


def test_gpu_utilization_reflects_busy_time(executor: ExecutorProcess) -> None:
    """nv_gpu_utilization tracks the fraction of time the emulated GPU computes — compared with the busy
    time the executor itself reports (compute counter), so a loaded test machine (a slower client, a
    busier GPU or an idler one) moves both together instead of failing an absolute threshold."""

    async def busy_window() -> tuple[float, float]:
        before = await asyncio.to_thread(_families, executor)
        t0 = time.monotonic()
        task = asyncio.create_task(_load(executor.url, "m", 150, 4))
        samples = []
        while not task.done():
            await asyncio.sleep(0.25)
            if not task.done():
                fams = await asyncio.to_thread(_families, executor)
                samples.append(_value(fams, "nv_gpu_utilization"))
        await task
        after = await asyncio.to_thread(_families, executor)
        elapsed_s = time.monotonic() - t0

        def delta(name: str) -> float:
            return _value(after, name, model="m") - _value(before, name, model="m")

        # Triton adds a batch's compute time once per request in it (triton.md §3): per batch it is the
        # per-request sum times executions / inferences. One instance runs one batch at a time.
        per_request_s = delta("nv_inference_compute_infer_duration_us") / 1e6
        inferences = delta("nv_inference_count")
        busy_s = per_request_s * delta("nv_inference_exec_count") / inferences if inferences else 0.0
        return sum(samples) / max(len(samples), 1), busy_s / elapsed_s

    for _attempt in range(3):  # a starved load generator cannot keep the GPU busy: measure again
        utilization, busy = asyncio.run(busy_window())
        if busy >= 0.3:
            break
    assert busy >= 0.3, f"the load never kept the emulated GPU busy (busy fraction {busy:.2f})"
    assert abs(utilization - busy) <= 0.25, (utilization, busy)

    deadline = time.monotonic() + 5.0
    while (idle := _value(_families(executor), "nv_gpu_utilization")) >= 0.05 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert idle < 0.05  # idle again once a whole interval passed without work


def test_timeout_rejections_count_as_rejected_failures(executor: ExecutorProcess) -> None:
    before = _value(_families(executor), "nv_inference_request_failure", model="t", reason="REJECTED")

    async def run() -> None:
        client = aioclient.InferenceServerClient(executor.url)
        inp = aioclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        try:
            blocker = asyncio.create_task(client.infer("t", [inp]))
            await asyncio.sleep(0.05)
            with pytest.raises(InferenceServerException, match="Request timeout expired"):
                await client.infer("t", [inp], timeout=10_000)
            await blocker
        finally:
            await client.close()

    asyncio.run(run())
    after = _value(_families(executor), "nv_inference_request_failure", model="t", reason="REJECTED")
    assert after == before + 1


def test_counters_survive_a_full_reload_while_statistics_reset(executor: ExecutorProcess) -> None:
    asyncio.run(_load(executor.url, "m", 10, 2))
    before = _value(_families(executor), "nv_inference_count", model="m")
    client = httpclient.InferenceServerClient(executor.url)
    cfg = client.get_model_config("m")
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 1000
    client.load_model("m", config=json.dumps(cfg))
    assert client.get_inference_statistics("m")["model_stats"][0]["inference_count"] == 0
    client.close()
    asyncio.run(_load(executor.url, "m", 10, 2))
    assert _value(_families(executor), "nv_inference_count", model="m") == before + 10


def test_summaries_are_off_by_default(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_emulated_model(root, "m", dynamic_batching={})
    with running_executor(root) as proc:
        asyncio.run(_load(proc.url, "m", 3, 1))
        families = _families(proc)
    assert "nv_inference_request_summary_us" not in families
    assert _value(families, "nv_inference_request_success", model="m") == 3


def test_metrics_config_flags_parse_like_tritonserver() -> None:
    settings = MetricsSettings.parse(
        ["summary_latencies=true", "summary_quantiles=0.5:0.05,0.99:0.001", "counter_latencies=false"]
    )
    assert settings.summary_latencies and not settings.counter_latencies
    assert settings.quantiles == ((0.5, 0.05), (0.99, 0.001))
    assert MetricsSettings.parse(["histogram_latencies=true"]).ignored == ("histogram_latencies=true",)
    with pytest.raises(ValueError, match="summary_latencies must be true or false"):
        MetricsSettings.parse(["summary_latencies=yes"])
    with pytest.raises(ValueError, match="unsupported key 'no_such_key'"):
        MetricsSettings.parse(["no_such_key=1"])
