"""Benchmark (prints figures; not a test): how much load one CPU executor process sustains, and its overhead.

Question: can one ``poolpilot-executor`` process stand in for a Triton pod in fleet experiments?
Goal (issue 4): ≥ 1,000 inferences/s per process, and ≤ 5 ms added p99 at 50 % of that rate.

Method:
1. Start one executor subprocess serving an emulated-curve model (``A + B·batch`` ms per batch; by
   default a cheap curve with several instances so the *executor* — HTTP, batcher, metrics — is the
   limit, not the emulated GPU).
2. Saturation search: open-loop Poisson load (the real load generator, split over ``--loadgen-procs``
   processes so the client is not the bottleneck) at rising rates. A rate is *sustained* when every
   request succeeds, completions keep up (≥ 95 % of offered within the step), and p99 stays under
   ``--p99-limit-ms``. Generator lateness is printed so a client-limited step is visible.
3. At 50 % and 90 % of the sustained rate: end-to-end p99 minus the emulated compute time of the
   batches that really ran (``A + B·mean batch``, from the statistics extension) = added p99.
   Interleaved with the same load against an *ideal* server (aiohttp: parse, sleep the compute
   time, answer; own process, same client), whose added p99 is the floor set by the client, the HTTP
   stack and the machine; the difference is what the executor itself adds. On a shared machine the
   absolute figures swing with other load; the interleaved difference much less.

Run:  python3 bench/executor_overhead.py [--step-s 4] [--rates 250,500,1000,1500,2000,3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http.aio as triton_aio

from poolpilot import loadgen
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.loadgen.schedule import Arrival
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.processes import free_port

MODEL = "bench"
_SUMMARIES = ("--metrics-config", "summary_latencies=true")


@dataclass(frozen=True)
class StepResult:
    offered_rps: float
    sent: int
    ok: int
    statuses: dict[str, int]
    completed_rps: float
    p50_ms: float
    p99_ms: float
    lateness_p99_ms: float
    mean_batch: float
    compute_ms: float
    executor_cpu_cores: float
    executor_cpu_ms_per_request: float

    @property
    def added_p99_ms(self) -> float:
        return self.p99_ms - self.compute_ms


def _worker(args: tuple[str, str, list[float], float, float]) -> dict[str, Any]:
    """One load-generator process: send its share of the schedule open-loop from ``start_at``."""
    url, model, offsets, start_at, timeout_s = args
    schedule = [Arrival(offset_s=o) for o in offsets]

    async def go() -> dict[str, Any]:
        records: list[loadgen.RequestRecord] = []
        config = loadgen.LoadgenConfig(urls=(url,), model=model, request_timeout_s=timeout_s)
        delay = start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        report = await loadgen.run(config, schedule, records=records)
        return {
            "latency_ms": [r.latency_ms for r in records if r.status == "success"],
            "first_send_s": min((r.send_s for r in records), default=0.0),
            "last_done_s": max(
                (r.send_s + r.latency_ms / 1e3 for r in records if r.status == "success"), default=0.0
            ),
            "statuses": report.statuses,
            "lateness_p99_ms": report.lateness_p99_ms,
            "sent": report.sent,
        }

    return asyncio.run(go())


def _ideal_server(port: int, model: str, compute_ms: float) -> None:
    """Baseline: the least a Triton-protocol server can do — parse, wait the compute time, answer.

    Same HTTP stack (aiohttp) and the same client as against the executor, in its own process, so
    ``executor p99 − baseline p99`` is what the executor's batcher, bookkeeping and metrics add.
    """
    import json as json_mod

    from aiohttp import web

    features = 16
    meta = {
        "name": model,
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, features]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, features]}],
    }
    config = {"name": model, "max_batch_size": 64}

    async def get_meta(_: web.Request) -> web.Response:
        return web.json_response(meta)

    async def get_config(_: web.Request) -> web.Response:
        return web.json_response(config)

    async def infer(request: web.Request) -> web.Response:
        body = await request.read()
        header_len = int(request.headers.get("Inference-Header-Content-Length", len(body)))
        json_mod.loads(body[:header_len])
        await asyncio.sleep(compute_ms / 1e3)
        out = {
            "model_name": model,
            "outputs": [
                {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, features], "data": [0.0] * features}
            ],
        }
        return web.json_response(out)

    app = web.Application()
    app.router.add_get(f"/v2/models/{model}", get_meta)
    app.router.add_get(f"/v2/models/{model}/config", get_config)
    app.router.add_post(f"/v2/models/{model}/infer", infer)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


def _wait_ideal(url: str, timeout_s: float = 30.0) -> None:
    import tritonclient.http as triton_http

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client = triton_http.InferenceServerClient(url)
            try:
                client.get_model_metadata(MODEL)
                return
            finally:
                client.close()
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"ideal baseline server on {url} not up after {timeout_s}s")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


async def _counts(url: str) -> tuple[int, int]:
    async with triton_aio.InferenceServerClient(url) as client:
        stats = await client.get_inference_statistics(MODEL)
    entry = stats["model_stats"][0]
    return int(entry["inference_count"]), int(entry["execution_count"])


def _send(pool: Any, url: str, rate_rps: float, seconds: float, k: int) -> tuple[list[dict[str, Any]], int]:
    """Open-loop Poisson load split over ``k`` generator processes; (per-worker results, scheduled)."""
    sched = loadgen_schedule.synthetic("constant", base_rps=rate_rps, duration_s=seconds, seed=int(rate_rps))
    shares = [[a.offset_s for a in sched[i::k]] for i in range(k)]
    start_at = time.time() + 1.5  # let every worker import and connect first
    results: list[dict[str, Any]] = pool.map(_worker, [(url, MODEL, s, start_at, 30.0) for s in shares])
    return results, len(sched)


def baseline_p99_ms(pool: Any, url: str, rate_rps: float, seconds: float, k: int) -> float:
    results, _ = _send(pool, url, rate_rps, seconds, k)
    latency = np.concatenate([np.array(r["latency_ms"]) for r in results])
    return float(np.percentile(latency, 99))


def run_step(
    pool: Any, proc: ExecutorProcess, pid: int, rate_rps: float, seconds: float, args: argparse.Namespace
) -> StepResult:
    inf0, exec0 = asyncio.run(_counts(proc.url))
    cpu0, wall0 = _cpu_seconds(pid), time.time()
    results, scheduled = _send(pool, proc.url, rate_rps, seconds, args.loadgen_procs)
    cpu1, wall1 = _cpu_seconds(pid), time.time()
    inf1, exec1 = asyncio.run(_counts(proc.url))

    latency = np.concatenate([np.array(r["latency_ms"]) for r in results]) if results else np.array([])
    statuses: dict[str, int] = {}
    for r in results:
        for key, n in r["statuses"].items():
            statuses[key] = statuses.get(key, 0) + n
    sent = sum(r["sent"] for r in results)
    ok = statuses.get("success", 0)
    mean_batch = (inf1 - inf0) / (exec1 - exec0) if exec1 > exec0 else float("nan")
    a_ms, b_ms = args.curve
    busy_s = max(1e-9, (wall1 - wall0) - 1.5)
    # Completions per second from the first send to the last answer (workers share start_at).
    span_s = max(r["last_done_s"] for r in results) - min(r["first_send_s"] for r in results)
    return StepResult(
        offered_rps=scheduled / seconds,
        sent=sent,
        ok=ok,
        statuses=statuses,
        # completions over the scheduled span: falls behind when the server cannot keep up
        completed_rps=ok / max(span_s, 1e-9),
        p50_ms=float(np.percentile(latency, 50)) if latency.size else float("nan"),
        p99_ms=float(np.percentile(latency, 99)) if latency.size else float("nan"),
        lateness_p99_ms=max(r["lateness_p99_ms"] for r in results),
        mean_batch=mean_batch,
        compute_ms=a_ms + b_ms * mean_batch,
        executor_cpu_cores=(cpu1 - cpu0) / busy_s,
        executor_cpu_ms_per_request=1e3 * (cpu1 - cpu0) / max(sent, 1),
    )


def _row(r: StepResult) -> str:
    return (
        f"{r.offered_rps:8.0f} {r.completed_rps:9.0f} {r.ok:7d}/{r.sent:<7d} {r.p50_ms:8.2f} {r.p99_ms:8.2f} "
        f"{r.compute_ms:8.2f} {r.added_p99_ms:9.2f} {r.mean_batch:6.2f} {r.lateness_p99_ms:9.2f} "
        f"{r.executor_cpu_cores:5.2f} {r.executor_cpu_ms_per_request:8.3f}"
    )


HEADER = (
    f"{'offered':>8} {'completed':>9} {'ok/sent':>15} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'comp ms':>8} {'+p99 ms':>9} {'batch':>6} {'late p99':>9} {'cores':>5} {'cpu ms/r':>8}"
)


def sustained(r: StepResult, args: argparse.Namespace) -> bool:
    return r.ok == r.sent and r.completed_rps >= 0.95 * r.offered_rps and r.p99_ms <= args.p99_limit_ms


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--curve", default="2,0.05", help="emulated batch latency A,B (ms)")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--delay-us", type=int, default=0, help="max_queue_delay_microseconds")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--rates", default="250,500,1000,1500,2000,2500,3000,4000")
    parser.add_argument("--step-s", type=float, default=4.0)
    parser.add_argument("--measure-s", type=float, default=8.0)
    parser.add_argument("--p99-limit-ms", type=float, default=50.0)
    parser.add_argument("--loadgen-procs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="executor/baseline alternations per rate")
    parser.add_argument(
        "--lateness-limit-ms",
        type=float,
        default=20.0,
        help="above this the client, not the server, is behind",
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line with the figures")
    args = parser.parse_args()
    args.curve = tuple(float(v) for v in args.curve.split(","))
    rates = [float(r) for r in args.rates.split(",")]

    with tempfile.TemporaryDirectory(prefix="poolpilot-bench-") as tmp:
        repo = Path(tmp) / "models"
        write_emulated_model(
            repo,
            MODEL,
            latency_ms=args.curve,
            max_batch_size=args.max_batch_size,
            max_queue_delay_us=args.delay_us,
            instance_count=args.instances,
        )
        ctx = multiprocessing.get_context("spawn")
        executor = ExecutorProcess(repo, [MODEL], extra_args=_SUMMARIES)
        with executor as proc, ctx.Pool(args.loadgen_procs) as pool:
            assert proc.process is not None
            pid = proc.process.pid
            print(
                f"executor pid {pid}; curve {args.curve[0]} + {args.curve[1]}·b ms, max_batch_size "
                f"{args.max_batch_size}, delay {args.delay_us} µs, {args.instances} instances; "
                f"{args.loadgen_procs} load-generator processes; machine: {os.cpu_count()} CPUs, "
                f"load average {os.getloadavg()[0]:.2f}"
            )
            run_step(pool, proc, pid, 100.0, 2.0, args)  # warm-up: worker imports, connections
            print("\n# saturation search (open-loop Poisson)")
            print(HEADER)
            best: StepResult | None = None
            cpu_costs: list[float] = []
            for rate in rates:
                r = run_step(pool, proc, pid, rate, args.step_s, args)
                cpu_costs.append(r.executor_cpu_ms_per_request)
                verdict = ""
                if not sustained(r, args):
                    verdict = "  <- not sustained"
                    if r.lateness_p99_ms > args.lateness_limit_ms:
                        verdict += (
                            f" (client-limited: generator p99 lateness > {args.lateness_limit_ms:g} ms)"
                        )
                print(_row(r), verdict, flush=True)
                if not sustained(r, args):
                    break
                best = r
            cpu_ms = float(np.median(cpu_costs))
            print(
                f"\nexecutor CPU per request (median over steps): {cpu_ms:.3f} ms "
                f"=> one dedicated core could serve ~{1e3 / cpu_ms:.0f} req/s (load-independent estimate)"
            )
            if best is None:
                print("executor did not sustain even the lowest rate on this machine right now")
                return 1
            peak = best.offered_rps
            print(f"sustained (measured): {peak:.0f} inferences/s per executor process (goal >= 1000)")

            print("\n# overhead at 50 % and 90 % of the sustained rate (executor rows; baseline interleaved)")
            print(HEADER)
            figures: dict[str, float] = {"sustained_rps": peak, "executor_cpu_ms_per_request": cpu_ms}
            base_compute_ms = args.curve[0] + args.curve[1]
            ideal_port = free_port()
            ideal = ctx.Process(target=_ideal_server, args=(ideal_port, MODEL, base_compute_ms), daemon=True)
            ideal.start()
            try:
                ideal_url = f"127.0.0.1:{ideal_port}"
                _wait_ideal(ideal_url)
                for frac in (0.5, 0.9):
                    pct = int(frac * 100)
                    exec_added: list[float] = []
                    base_added: list[float] = []
                    for _ in range(args.rounds):
                        r = run_step(pool, proc, pid, frac * peak, args.measure_s, args)
                        print(_row(r), flush=True)
                        exec_added.append(r.added_p99_ms)
                        b = baseline_p99_ms(pool, ideal_url, frac * peak, args.measure_s, args.loadgen_procs)
                        base_added.append(b - base_compute_ms)
                    figures[f"added_p99_ms_at_{pct}pct"] = float(np.median(exec_added))
                    figures[f"baseline_added_p99_ms_at_{pct}pct"] = float(np.median(base_added))
                    exec_ms, base_ms = (
                        figures[f"added_p99_ms_at_{pct}pct"],
                        figures[f"baseline_added_p99_ms_at_{pct}pct"],
                    )
                    print(
                        f"  {pct} %: executor p99 − compute = {exec_ms:.2f} ms; "
                        f"ideal server p99 − compute = {base_ms:.2f} ms "
                        f"(same client, same machine, interleaved; medians of {args.rounds})",
                        flush=True,
                    )
            finally:
                ideal.terminate()
                ideal.join(10)
            for pct in (50, 90):
                figures[f"executor_minus_baseline_p99_ms_at_{pct}pct"] = (
                    figures[f"added_p99_ms_at_{pct}pct"] - figures[f"baseline_added_p99_ms_at_{pct}pct"]
                )
            f = figures
            print(
                f"\nadded p99 over emulated compute at 50 %: {f['added_p99_ms_at_50pct']:.2f} ms "
                "(goal <= 5 ms), "
                f"{f['executor_minus_baseline_p99_ms_at_50pct']:.2f} ms beyond an ideal server; "
                f"at 90 %: {f['added_p99_ms_at_90pct']:.2f} ms "
                f"({f['executor_minus_baseline_p99_ms_at_90pct']:.2f} ms beyond ideal)"
            )
            if args.json:
                print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
