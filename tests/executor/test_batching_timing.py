"""The dynamic batcher's timing behaviour, observed from outside through tritonclient.

Tolerances are generous (the CI machine is shared): each test asserts an ordering or a batch
shape that only the documented rule produces, with time margins several times the expected
scheduling jitter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from poolpilot.sandbox.executor import ExecutorProcess, running_executor, write_emulated_model


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutorProcess]:
    root = tmp_path_factory.mktemp("timing") / "models"
    write_emulated_model(
        root, "delay20", latency_ms=(1, 0), dynamic_batching={"max_queue_delay_microseconds": 20000}
    )
    write_emulated_model(
        root, "nodelay_single", latency_ms=(1, 0), dynamic_batching={"max_queue_delay_microseconds": 20000}
    )
    write_emulated_model(
        root,
        "preferred",
        latency_ms=(1, 0),
        dynamic_batching={"preferred_batch_size": [4], "max_queue_delay_microseconds": 3_000_000},
    )
    write_emulated_model(
        root,
        "prio",
        latency_ms=(150, 0),
        max_batch_size=1,
        dynamic_batching={"priority_levels": 2, "default_priority_level": 2},
    )
    write_emulated_model(
        root,
        "timeout",
        latency_ms=(300, 0),
        max_batch_size=1,
        dynamic_batching={
            "default_queue_policy": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": 10_000_000,
                "allow_timeout_override": True,
            }
        },
    )
    write_emulated_model(
        root,
        "bounded",
        latency_ms=(300, 0),
        max_batch_size=1,
        dynamic_batching={"default_queue_policy": {"max_queue_size": 1}},
    )
    with running_executor(root) as proc:
        yield proc


def _inp(rows: int = 1) -> aioclient.InferInput:
    inp = aioclient.InferInput("INPUT0", [rows, 4], "FP32")
    inp.set_data_from_numpy(np.full((rows, 4), rows, dtype=np.float32))
    return inp


def _stats(url: str, model: str) -> dict[str, object]:
    client = httpclient.InferenceServerClient(url)
    try:
        stats: dict[str, object] = client.get_inference_statistics(model)["model_stats"][0]
        return stats
    finally:
        client.close()


def _batch_sizes(stats: dict[str, object]) -> dict[int, int]:
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}  # type: ignore[attr-defined]


async def test_concurrent_requests_within_the_delay_run_as_one_batch(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    try:
        await client.infer("delay20", [_inp()])  # warm the connection path
        before = _batch_sizes(_stats(executor.url, "delay20"))
        await asyncio.gather(*(client.infer("delay20", [_inp()]) for _ in range(4)))
    finally:
        await client.close()
    after = _batch_sizes(_stats(executor.url, "delay20"))
    new = {size: after.get(size, 0) - before.get(size, 0) for size in after}
    assert new.get(4) == 1, f"expected one batch of 4, got new batches {new}"


async def test_a_lone_request_waits_for_the_delay(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    try:
        start = time.monotonic()
        await client.infer("nodelay_single", [_inp()])
        elapsed = time.monotonic() - start
    finally:
        await client.close()
    stats = _stats(executor.url, "nodelay_single")
    queue_ns = stats["inference_stats"]["queue"]["ns"]  # type: ignore[index]
    assert queue_ns >= 19_000_000  # the oldest request waited max_queue_delay (20 ms)
    assert elapsed >= 0.019
    assert elapsed < 1.0


async def test_preferred_size_dispatches_at_once(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    try:
        start = time.monotonic()
        await asyncio.gather(*(client.infer("preferred", [_inp()]) for _ in range(4)))
        elapsed = time.monotonic() - start
    finally:
        await client.close()
    # The delay is 3 s; a batch of the preferred size 4 must not wait for it.
    assert elapsed < 1.5
    assert _batch_sizes(_stats(executor.url, "preferred")).get(4) == 1


async def test_priority_one_overtakes_priority_two(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    done: list[str] = []

    async def send(tag: str, priority: int) -> None:
        await client.infer("prio", [_inp()], priority=priority)
        done.append(tag)

    try:
        blocker = asyncio.create_task(send("blocker", 2))
        await asyncio.sleep(0.05)  # blocker now runs on the only instance (150 ms)
        low = asyncio.create_task(send("low", 2))
        await asyncio.sleep(0.03)
        high = asyncio.create_task(send("high", 1))
        await asyncio.gather(blocker, low, high)
    finally:
        await client.close()
    assert done == ["blocker", "high", "low"]


async def test_request_past_its_timeout_is_rejected(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    try:
        blocker = asyncio.create_task(client.infer("timeout", [_inp()]))
        await asyncio.sleep(0.05)
        with pytest.raises(InferenceServerException, match="Request timeout expired"):
            await client.infer("timeout", [_inp()], timeout=50_000)  # 50 ms < 300 ms blocker
        await blocker
        # Without an override the default 10 s timeout applies and the request succeeds.
        await client.infer("timeout", [_inp()])
    finally:
        await client.close()


async def test_full_queue_answers_503(executor: ExecutorProcess) -> None:
    client = aioclient.InferenceServerClient(executor.url)
    try:
        running = asyncio.create_task(client.infer("bounded", [_inp()]))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(client.infer("bounded", [_inp()]))
        await asyncio.sleep(0.05)
        with pytest.raises(InferenceServerException, match="Exceeds maximum queue size") as err:
            await client.infer("bounded", [_inp()])
        assert err.value.status() == "503"
        await asyncio.gather(running, queued)
    finally:
        await client.close()


@pytest.mark.parametrize(("interference", "overlap"), [("0", True), ("1", False)])
def test_instances_share_the_gpu_as_the_simulator_does(
    tmp_path: Path, interference: str, overlap: bool
) -> None:
    """Two instances run two executions at once; the second, started while the first runs, takes
    (1 + emulated_instance_interference) times its time (`GpuCurve.shared_ms`, the simulator's rule)."""
    root = tmp_path / "models"
    write_emulated_model(
        root, "two", latency_ms=(300, 0), max_batch_size=1, instance_count=2, dynamic_batching={},
        extra_parameters={"emulated_instance_interference": interference},
    )  # fmt: skip

    async def run(url: str) -> float:
        client = aioclient.InferenceServerClient(url)
        try:
            start = time.monotonic()
            await asyncio.gather(*(client.infer("two", [_inp()]) for _ in range(2)))
            return time.monotonic() - start
        finally:
            await client.close()

    with running_executor(root) as proc:
        elapsed = asyncio.run(run(proc.url))
    if overlap:  # no interference: two 300 ms batches overlap (≈0.3 s); one instance would need ≥ 0.6 s
        assert elapsed < 0.55
    else:  # interference 1: the second execution takes 2 × 300 ms
        assert elapsed >= 0.59


def test_token_aware_emulated_latency(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "tok" / "1").mkdir(parents=True)
    (root / "tok" / "config.pbtxt").write_text(
        """
backend: "python"
max_batch_size: 8
input [ { name: "TOKENS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { }
parameters { key: "emulated_batch_latency_ms" value: { string_value: "1,0" } }
parameters { key: "emulated_token_ms_per_1k" value: { string_value: "2000" } }
parameters { key: "emulated_token_ref" value: { string_value: "0" } }
"""
    )

    def infer(client: httpclient.InferenceServerClient, tokens: int) -> float:
        inp = httpclient.InferInput("TOKENS", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[tokens]], dtype=np.int32))
        start = time.monotonic()
        out = client.infer("tok", [inp]).as_numpy("OUT")
        assert out.shape == (1, 1) and out.dtype == np.float32  # different dtype: zeros of the output shape
        return time.monotonic() - start

    with running_executor(root) as proc:
        client = httpclient.InferenceServerClient(proc.url)
        short = infer(client, 1)
        long = infer(client, 150)  # 1 + 2000 * 150 / 1000 ms of emulated compute
        stats = client.get_inference_statistics("tok")["model_stats"][0]
        client.close()
    assert long >= 0.3
    assert long > short + 0.2
    assert stats["inference_stats"]["compute_infer"]["ns"] >= 300_000_000
