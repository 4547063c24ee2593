"""`PrometheusSource` against a real Prometheus scraping a real Triton-protocol executor under load.

The scrape job attaches the target labels `namespace` and `pool`, as the documented relabelling of
the pod label `poolpilot.io/pool` does in a cluster. The truth the signals are checked against is
the executor's own statistics extension (read through tritonclient) and the load generator's report.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http.aio as triton_aio

from poolpilot import loadgen
from poolpilot.backends.metrics import queries
from poolpilot.backends.metrics.base import PoolKey
from poolpilot.backends.metrics.prometheus import PrometheusSource
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.prometheus import PrometheusServer
from poolpilot.settings import LatencySource, PrometheusSettings

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

MODEL = "emu"
SCRAPE_S = 0.5


async def test_signals_of_a_pool_under_load(
    tmp_path: Path,
    executor_process: Any,
    labelled_prometheus: Any,
) -> None:
    repo = tmp_path / "models"
    write_emulated_model(repo, MODEL, latency_ms=(3.0, 0.5), max_batch_size=16, max_queue_delay_us=4000)
    proc: ExecutorProcess = executor_process(repo, [MODEL])
    prom: PrometheusServer = await asyncio.to_thread(
        labelled_prometheus,
        {"triton": [proc.metrics_target]},
        labels={"namespace": "team-a", "pool": "chat"},
        scrape_interval_s=SCRAPE_S,
    )
    await asyncio.to_thread(prom.wait_for_targets_up)
    t_start = time.time()
    schedule = loadgen_schedule.synthetic("constant", base_rps=200, duration_s=6.0, seed=3)
    report = await loadgen.run(loadgen.LoadgenConfig(urls=(proc.url,), model=MODEL), schedule)
    assert report.succeeded == report.sent == len(schedule)
    await prom.await_scrapes(3)
    async with triton_aio.InferenceServerClient(proc.url) as client:
        stats = await client.get_inference_statistics(MODEL)

    window_s = math.ceil(time.time() - t_start) + 2
    source = PrometheusSource(PrometheusSettings(url=prom.url, window_s=window_s))
    chat = PoolKey("team-a", "chat", MODEL, latency_quantile=0.99)
    silent = PoolKey("team-b", "silent", MODEL)
    try:
        signals = await source.fetch([chat, silent])
    finally:
        await source.close()

    entry = stats["model_stats"][0]
    true_batch = int(entry["inference_count"]) / int(entry["execution_count"])
    s = signals[chat]
    assert s.avg_batch_size == pytest.approx(true_batch, rel=0.05)
    assert s.avg_batch_size > 1.2, "the load did not exercise batching"
    # Latency: server-side p99 of a model whose smallest batch takes 3 ms, under the client's p99.
    assert 3.0 <= s.p99_ms <= report.latency_p99_ms * 1.1
    assert s.request_rate_per_s > 0 and s.inference_rate_per_s > 0
    # The window spans the 6 s of load and some idle time: the mean rate is diluted, while the rate the
    # inferences arrived at is the load's (200 req/s of one inference each).
    assert s.inference_rate_seen_per_s >= s.inference_rate_per_s
    assert s.inference_rate_seen_per_s == pytest.approx(200.0, rel=0.3)
    # The mean queue per request, against the executor's own statistics over the same requests (the window
    # spans all of them). Not a fixed bound: how long requests queue depends on how busy the machine is
    # (a CI run with another process on the CPU read 26 ms behind a 4 ms batching window).
    queue = entry["inference_stats"]["queue"]
    true_queue_us = int(queue["ns"]) / int(queue["count"]) / 1000.0
    assert true_queue_us > 0
    assert s.queue_time_us == pytest.approx(true_queue_us, rel=0.1)
    assert s.compute_us_per_exec >= 3000 * 0.9
    assert 0 <= s.age_s < 10
    assert 0 < s.gpu_utilization <= 1  # the executor emulates nv_gpu_utilization from its busy time

    # Triton's summary is each pod's own quantile (the query reads the worst): the policy counts its
    # requests per pod. A histogram source reads one quantile over the pool.
    assert s.p99_per_pod
    pooled_source = PrometheusSource(
        PrometheusSettings(url=prom.url, window_s=window_s, latency_source=LatencySource.HISTOGRAM)
    )
    try:
        pooled = (await pooled_source.fetch([chat]))[chat]
    finally:
        await pooled_source.close()
    assert not pooled.p99_per_pod
    # The windows the readings span travel with them: the policy counts a p99's requests over its window.
    # Triton's summary keeps its own 60 s whatever the query's; a histogram spans the query's window.
    assert (s.p99_window_s, s.rate_window_s) == (60.0, window_s)
    assert (pooled.p99_window_s, pooled.rate_window_s) == (window_s, window_s)
    assert pooled.request_rate_per_s == pytest.approx(s.request_rate_per_s, rel=0.2)

    assert math.isinf(signals[silent].age_s) and math.isnan(signals[silent].p99_ms)
    # One batch of queries answered both pools.
    assert source.queries_sent == len(queries.build_queries(PrometheusSettings(), {0.99}))
