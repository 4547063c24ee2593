"""Prometheus agrees with the executor about the batch sizes it really ran.

PoolPilot reads the average dynamic batch size as
``sum(rate(nv_inference_count)) / sum(rate(nv_inference_exec_count))`` (triton.md §3.6). Here a real
Prometheus scrapes a real executor under open-loop load, and that ratio is compared with the batch
sizes recorded by the statistics extension (``batch_stats``, read through ``tritonclient``).
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import prometheus_client.parser
import pytest
import tritonclient.http.aio as triton_aio

from poolpilot import loadgen
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.prometheus import PrometheusServer

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

MODEL = "emu"
SCRAPE_S = 0.5


def _batch_stats_mean(stats: dict[str, object]) -> tuple[float, int, dict[int, int]]:
    """(mean batch size, executions, {batch_size: executions}) from the statistics extension."""
    entry = stats["model_stats"][0]  # type: ignore[index]
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in entry["batch_stats"]}
    executions = sum(sizes.values())
    mean = sum(size * n for size, n in sizes.items()) / executions
    return mean, executions, sizes


async def test_rate_ratio_matches_batch_stats(
    tmp_path: Path,
    executor_process,
    prometheus,
) -> None:
    repo = tmp_path / "models"
    # 3 ms + 0.5 ms per item, a 4 ms batching window: at 250 req/s batches of several form.
    write_emulated_model(repo, MODEL, latency_ms=(3.0, 0.5), max_batch_size=16, max_queue_delay_us=4000)
    proc: ExecutorProcess = executor_process(repo, [MODEL])
    prom: PrometheusServer = prometheus({"executor": [proc.metrics_target]}, scrape_interval_s=SCRAPE_S)
    await asyncio.to_thread(prom.wait_for_targets_up)

    t_start = time.time()
    schedule = loadgen_schedule.synthetic("constant", base_rps=250, duration_s=6.0, seed=2)
    report = await loadgen.run(loadgen.LoadgenConfig(urls=(proc.url,), model=MODEL), schedule)
    assert report.succeeded == report.sent == len(schedule)
    await prom.await_scrapes(3)

    async with triton_aio.InferenceServerClient(proc.url) as client:
        stats = await client.get_inference_statistics(MODEL)
    true_mean, executions, sizes = _batch_stats_mean(stats)
    entry = stats["model_stats"][0]
    assert int(entry["inference_count"]) == report.succeeded
    assert int(entry["execution_count"]) == executions
    assert len(sizes) > 1 and true_mean > 1.5, f"the load did not exercise batching: {sizes}"

    window_s = math.ceil(time.time() - t_start) + 2
    ratio_query = (
        f'sum(rate(nv_inference_count{{model="{MODEL}"}}[{window_s}s]))'
        f' / sum(rate(nv_inference_exec_count{{model="{MODEL}"}}[{window_s}s]))'
    )
    prom_mean = await prom.aquery_value(ratio_query)
    assert prom_mean == pytest.approx(true_mean, rel=0.03)

    # The raw counters Prometheus holds are the executor's own totals.
    assert await prom.aquery_value(f'sum(nv_inference_exec_count{{model="{MODEL}"}})') == executions
    assert await prom.aquery_value(f'sum(nv_inference_count{{model="{MODEL}"}})') == report.succeeded


def test_metrics_page_parses_with_prometheus_client(tmp_path: Path, executor_process) -> None:
    """The page Prometheus scrapes is valid text exposition with Triton's families and labels."""
    import urllib.request

    repo = tmp_path / "models"
    write_emulated_model(repo, MODEL, latency_ms=(1.0, 0.1), max_queue_delay_us=0)
    proc: ExecutorProcess = executor_process(repo, [MODEL])
    with urllib.request.urlopen(f"http://{proc.metrics_target}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in prometheus_client.parser.text_string_to_metric_families(text)}
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == "counter"
        labels = {s.labels.get("model") for s in families[name].samples}
        assert MODEL in labels
