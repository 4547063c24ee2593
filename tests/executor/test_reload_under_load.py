"""Reload under load: five batching changes in a row while the load generator sends a steady stream.

What PoolPilot relies on (triton.md §2.3, §3.4): a `load` with a config override reloads the model in
the background while the old one keeps serving, so no request fails, and the Prometheus counters keep
counting across reloads (no reset), so `rate()` over them stays meaningful. Everything is real:
executor subprocess, `tritonclient` for the reloads, the load generator, and Prometheus scraping.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from pathlib import Path

import pytest
import tritonclient.http.aio as triton_aio

from poolpilot import loadgen
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.prometheus import PrometheusServer

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

MODEL = "llm"
DELAYS_US = (500, 4000, 1000, 8000, 0)  # five changes, each a different max_queue_delay_microseconds
SCRAPE_S = 0.5


async def _reload_five_times(client: triton_aio.InferenceServerClient, applied: list[int]) -> None:
    for delay_us in DELAYS_US:
        await asyncio.sleep(0.8)
        cfg = await client.get_model_config(MODEL)
        assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] != delay_us
        cfg["dynamic_batching"]["max_queue_delay_microseconds"] = delay_us
        await client.load_model(MODEL, config=json.dumps(cfg))
        now = await client.get_model_config(MODEL)
        applied.append(int(now["dynamic_batching"]["max_queue_delay_microseconds"]))
        assert await client.is_model_ready(MODEL)
    await asyncio.sleep(0.8)


async def test_five_batching_changes_under_load_fail_no_request_and_counters_keep_counting(
    tmp_path: Path,
    executor_process,
    prometheus,
) -> None:
    repo = tmp_path / "models"
    write_emulated_model(repo, MODEL, latency_ms=(4.0, 0.5), max_batch_size=16, max_queue_delay_us=2000)
    proc: ExecutorProcess = executor_process(repo, [MODEL])
    prom: PrometheusServer = prometheus({"executor": [proc.metrics_target]}, scrape_interval_s=SCRAPE_S)
    await asyncio.to_thread(prom.wait_for_targets_up)

    success_query = f'sum(nv_inference_request_success{{model="{MODEL}"}})'
    before = await prom.aquery_value(success_query)
    before = 0.0 if math.isnan(before) else before  # a fresh executor: absent or 0
    t_start = time.time()

    # A steady open-loop stream (100 req/s, Poisson) for as long as the reloads take.
    schedule = loadgen_schedule.synthetic("constant", base_rps=100, duration_s=60, seed=11)
    stop = asyncio.Event()
    config = loadgen.LoadgenConfig(urls=(proc.url,), model=MODEL, request_timeout_s=20)
    load = asyncio.create_task(loadgen.run(config, schedule, stop=stop))
    applied: list[int] = []
    async with triton_aio.InferenceServerClient(proc.url, conn_timeout=60) as client:
        try:
            await _reload_five_times(client, applied)
        finally:
            stop.set()
    report = await load
    t_end = time.time()

    assert applied == list(DELAYS_US)  # each change really took effect
    assert report.sent > 300  # ≥ 3 s of steady load around the reloads
    assert report.statuses == {"success": report.sent}, f"failed requests during reloads: {report.statuses}"

    await prom.await_scrapes(3)
    # Counters never went down while the model reloaded five times...
    series = await asyncio.to_thread(
        prom.query_range, success_query, start=t_start, end=time.time(), step_s=SCRAPE_S
    )
    assert len(series) == 1
    values = [float(v) for _, v in series[0]["values"]]
    assert len(values) >= (t_end - t_start) / SCRAPE_S * 0.8
    assert all(b >= a for a, b in itertools.pairwise(values)), values
    window_s = math.ceil(time.time() - t_start) + 2
    resets = await prom.aquery_value(
        f'sum(resets(nv_inference_request_success{{model="{MODEL}"}}[{window_s}s]))'
    )
    assert resets == 0
    # ...and the executor counted exactly the successes the client saw, none as failures.
    after = await prom.aquery_value(success_query)
    assert after - before == report.succeeded
    failures = await prom.aquery_value(f'sum(nv_inference_request_failure{{model="{MODEL}"}})')
    assert math.isnan(failures) or failures == 0
    inferences = await prom.aquery_value(f'sum(nv_inference_count{{model="{MODEL}"}})')
    assert inferences == report.succeeded  # batch size 1 per request
