"""Benchmark of executor overhead (prints figures; not a test).

    python3 -m poolpilot.executor.bench [--seconds 5] [--compute-ms 5]

What it measures, against one `poolpilot-executor` process serving an emulated model whose every
execution takes exactly `--compute-ms` (A = compute, B = 0) with enough instances that requests
never queue for an instance and `max_queue_delay` 0:
1. capacity: requests/s completed with `--concurrency` closed-loop clients (tritonclient aio);
2. at 50 % and 90 % of that rate, open-loop (requests leave on a fixed schedule whatever the
   responses do): client-observed p50/p99 latency and the ADDED p99 = p99 − compute time, i.e.
   everything that is not the emulated GPU (HTTP, JSON/binary coding, scheduling, the client).
The client runs in this process on the same machine, so its own cost is included: the figures are
an upper bound on the executor's overhead. Because a shared machine makes latencies noisy, it also
prints the executor's CPU time per inference (from /proc, Linux) and the rate one dedicated core
could sustain at that cost, with the load average at the time.
Goal (issue 4): ≥ 1,000 inferences/s, added p99 ≤ 5 ms at 50 %.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http.aio as aioclient
from prometheus_client.parser import text_string_to_metric_families

from poolpilot.executor.testing import running_executor, write_emulated_model

MODEL = "bench"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_p99_us(metrics_url: str) -> float:
    """The executor's own p99 (nv_inference_request_summary_us, received → response ready)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "nv_inference_request_summary_us":
            for sample in family.samples:
                if sample.labels.get("quantile") == "0.99":
                    return float(sample.value)
    raise RuntimeError("nv_inference_request_summary_us{quantile=0.99} not found")


def _inp() -> aioclient.InferInput:
    inp = aioclient.InferInput("INPUT0", [1, 16], "FP32")
    inp.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return inp


async def _closed_loop(url: str, concurrency: int, seconds: float) -> float:
    client = aioclient.InferenceServerClient(url, conn_limit=concurrency)
    done = 0
    stop_at = time.monotonic() + seconds
    inp = _inp()

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            await client.infer(MODEL, [inp])
            done += 1

    start = time.monotonic()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return done / (time.monotonic() - start)


async def _open_loop(url: str, rate: float, seconds: float) -> tuple[list[float], int, float]:
    """Latencies (s) of requests sent every 1/rate s; returns (latencies, failures, achieved send rate)."""
    client = aioclient.InferenceServerClient(url, conn_limit=1000)
    latencies: list[float] = []
    failures = 0
    inp = _inp()
    tasks: list[asyncio.Task[None]] = []

    async def one(scheduled: float) -> None:
        nonlocal failures
        try:
            await client.infer(MODEL, [inp])
            latencies.append(
                time.monotonic() - scheduled
            )  # from the planned send time: no coordinated omission
        except Exception:
            failures += 1

    n = int(rate * seconds)
    start = time.monotonic()
    try:
        for i in range(n):
            scheduled = start + i / rate
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(scheduled)))
        sent_rate = n / (time.monotonic() - start)
        await asyncio.gather(*tasks)
    finally:
        await client.close()
    return latencies, failures, sent_rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m poolpilot.executor.bench", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--compute-ms", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--instances", type=int, default=256)
    args = parser.parse_args(argv)
    compute_s = args.compute_ms / 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        write_emulated_model(
            root,
            MODEL,
            latency_ms=(args.compute_ms, 0.0),
            max_batch_size=64,
            dims=(16,),
            dynamic_batching={"max_queue_delay_microseconds": 0},
            instance_count=args.instances,
        )
        with running_executor(root) as proc:
            asyncio.run(_closed_loop(proc.url, 8, 1.0))  # warm up
            cpu0 = _cpu_seconds(proc.process.pid)
            capacity = asyncio.run(_closed_loop(proc.url, args.concurrency, args.seconds))
            cpu_per_inference = (_cpu_seconds(proc.process.pid) - cpu0) / (capacity * args.seconds)
        print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(
            f"capacity: {capacity:.0f} inferences/s (closed loop, {args.concurrency} clients, "
            f"{args.compute_ms} ms emulated compute, client in the same machine)"
        )
        print(
            f"executor CPU: {cpu_per_inference * 1e6:.0f} us per inference "
            f"=> {1 / cpu_per_inference:.0f} inferences/s on one dedicated core"
        )
        for fraction in (0.5, 0.9):
            rate = capacity * fraction
            # A fresh executor per phase so its 60 s summary window holds only this phase.
            with running_executor(root, extra_args=["--metrics-config", "summary_latencies=true"]) as proc:
                lat, failures, sent = asyncio.run(_open_loop(proc.url, rate, args.seconds))
                server_p99_us = _server_p99_us(proc.metrics_url)
            arr = np.sort(np.array(lat))
            p50, p99 = (float(np.quantile(arr, q)) for q in (0.5, 0.99))
            print(
                f"open loop at {fraction:.0%} ({rate:.0f}/s target, {sent:.0f}/s sent): "
                f"client p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
                f"added p99 {(p99 - compute_s) * 1e3:.2f} ms over {args.compute_ms} ms compute; "
                f"server-side p99 {server_p99_us / 1e3:.2f} ms "
                f"(added {(server_p99_us / 1e6 - compute_s) * 1e3:.2f} ms); failures {failures}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
