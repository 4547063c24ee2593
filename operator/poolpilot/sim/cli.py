"""`poolpilot simulate`: replay a trace or a synthetic load through the fleet simulator, policies in the loop.

    poolpilot simulate [--trace PATH | --synthetic step|diurnal|flash] [--rate-scale X] [--duration S]
        [--seed N] [--slo-ms 150] [--batch-latency-ms A,B] [--policy NAME ...|all] [--json OUT] [--report DIR]

Without `--trace` or `--synthetic` the shared Azure trace is used: `../shared/traces/
AzureLLMInferenceTrace_conv.csv` relative to the repository (`poolpilot.loads.DEFAULT_TRACE`).
`--rate-scale` multiplies the trace's rate (cloning with jitter by default, `--rate-method compress`
to compress timestamps) or the synthetic base rate (5.5 req/s × X). `--duration` cuts or loops the
trace (synthetic default: 3600 s).

`--json OUT` writes one object per policy, keyed by policy name (see `poolpilot.sim.run` for each
metric's definition), plus `_run` with the trace description and the parameters. `--report DIR`
writes a Markdown table and plots (`poolpilot.sim.report.write_report`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from poolpilot.gpucurve import (
    DEFAULT_A_MS,
    DEFAULT_B_MS,
    DEFAULT_INSTANCE_INTERFERENCE,
    DEFAULT_TOKEN_MS_PER_1K,
    DEFAULT_TOKEN_REF,
)
from poolpilot.loads import (
    DEFAULT_TRACE,
    LOAD_SHAPES,
    Trace,
    fit_duration,
    load_azure_csv,
    load_default_tokens,
    scale_rate,
    synthetic,
)
from poolpilot.sim.params import SimParams
from poolpilot.sim.registry import POLICY_NAMES, expand_policies, run_policy
from poolpilot.sim.run import Result


def parse_batch_latency(text: str) -> tuple[float, float]:
    """`A,B` in ms: A > 0, B >= 0, both finite."""
    parts = text.split(",")
    msg = f"--batch-latency-ms must be A,B in milliseconds with A > 0 and B >= 0 (e.g. 50,2.19), got {text!r}"
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(msg)
    try:
        a, b = float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(msg) from None
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b >= 0):
        raise argparse.ArgumentTypeError(msg)
    return a, b


def _positive_float(name: str) -> Any:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number > 0, got {text!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"{name} must be a number > 0, got {text!r}")
        return v

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help=f"Azure-format CSV (default: {DEFAULT_TRACE})")
    src.add_argument("--synthetic", choices=LOAD_SHAPES, help="seeded synthetic load instead of a trace")
    parser.add_argument("--rate-scale", type=_positive_float("--rate-scale"), default=1.0, metavar="X")
    parser.add_argument(
        "--rate-method",
        choices=("clone", "compress"),
        default="clone",
        help="how --rate-scale scales a trace",
    )
    parser.add_argument(
        "--duration", type=_positive_float("--duration"), metavar="S", help="seconds (cut/loop)"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N")
    parser.add_argument("--slo-ms", type=_positive_float("--slo-ms"), default=150.0)
    parser.add_argument(
        "--margin-ratio", type=float, default=0.05,
        help="the pool's spec.slo.marginRatio: PoolPilot plans for slo-ms x (1 - it)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-latency-ms", type=parse_batch_latency, default=(DEFAULT_A_MS, DEFAULT_B_MS), metavar="A,B",
        help="GPU batch latency = A + B·batch ms (default 50,2.19)",
    )  # fmt: skip
    parser.add_argument(
        "--policy", nargs="+", default=["poolpilot"], metavar="NAME",
        help=f"one or more of {', '.join(POLICY_NAMES)}, or all",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the metrics JSON here")
    parser.add_argument("--report", type=Path, metavar="DIR", help="write a Markdown report with plots here")
    parser.add_argument(
        "--token-mode",
        choices=("max", "none"),
        default="max",
        help="token term of the batch latency: the longest request's tokens above --token-ref",
    )
    parser.add_argument(
        "--token-ms-per-1k",
        type=float,
        default=DEFAULT_TOKEN_MS_PER_1K,
        help="ms per 1k tokens above --token-ref",
    )
    parser.add_argument("--token-ref", type=int, default=DEFAULT_TOKEN_REF)
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=256)
    parser.add_argument("--max-nodes", type=int, default=32)
    parser.add_argument("--initial-replicas", type=int, default=None)
    parser.add_argument(
        "--reload-s", type=float, default=30.0, help="batching change: background reload time"
    )
    parser.add_argument(
        "--request-overhead-ms",
        type=float,
        default=0.0,
        help="serving overhead outside queue and execution, added to each served request (default 0: a GPU "
        "profile includes it)",
    )
    parser.add_argument(
        "--instance-interference", type=float, default=DEFAULT_INSTANCE_INTERFERENCE,
        help="slowdown per other execution running on the same GPU (instance_count > 1)",
    )  # fmt: skip
    parser.add_argument("--scrape-interval-s", type=float, default=15.0, help="Prometheus scrape interval")
    parser.add_argument(
        "--p99-source", choices=("router_histogram", "pod_summary_max"), default="router_histogram",
        help="the p99 the policies see: router histogram (aggregatable) or max of per-pod Triton summaries",
    )  # fmt: skip
    parser.add_argument(
        "--shedding", choices=("Off", "Hopeless"), default="Off",
        help="the pool spec's batching.queuePolicy.shedding: may PoolPilot set a queue timeout that rejects "
        "requests which can no longer meet the objective (default Off: never)",
    )  # fmt: skip
    parser.add_argument("--no-series", action="store_true", help="leave the time series out of the JSON")


def build_trace(args: argparse.Namespace) -> Trace:
    """The arrival process the flags describe."""
    if args.synthetic:
        return synthetic(
            args.synthetic,
            duration_s=args.duration or 3600.0,
            rate_scale=args.rate_scale,
            seed=args.seed,
            token_source=load_default_tokens(),
        )
    trace = load_azure_csv(args.trace or DEFAULT_TRACE)
    trace = scale_rate(trace, args.rate_scale, seed=args.seed, method=args.rate_method)
    if args.duration:
        trace = fit_duration(trace, args.duration)
    return trace


def build_params(args: argparse.Namespace) -> SimParams:
    a_ms, b_ms = args.batch_latency_ms
    return SimParams(
        slo_ms=args.slo_ms,
        margin_ratio=args.margin_ratio,
        batch_latency_a_ms=a_ms,
        batch_latency_b_ms=b_ms,
        token_mode=args.token_mode,
        token_ms_per_1k=args.token_ms_per_1k,
        token_ref=args.token_ref,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        max_nodes=args.max_nodes,
        initial_replicas=args.initial_replicas,
        reload_s=args.reload_s,
        request_overhead_ms=args.request_overhead_ms,
        instance_interference=args.instance_interference,
        scrape_interval_s=args.scrape_interval_s,
        p99_source=args.p99_source,
        shedding=args.shedding,
        seed=args.seed,
    )


def _line(r: Result) -> str:
    return (
        f"{r.policy:10s} p99 {r.p99_ms:7.1f} ms  windows {r.slo_attainment_windows:6.1%}  "
        f"requests {r.slo_attainment_requests:7.2%}  GPU-h {r.gpu_hours:7.2f}  ${r.cost_usd:8.2f}  "
        f"util {r.mean_gpu_utilization:5.1%}  peak {r.peak_replicas:3d}  changes {r.replica_changes}/"
        f"{r.batching_changes}  rejected {r.rejected_requests}  "
        f"[simulated {r.sim_requests_per_s:,.0f} req/s wall, {r.sim_requests_per_cpu_s:,.0f} req/s CPU]"
    )


def main(args: argparse.Namespace) -> int:
    try:
        policies = expand_policies(args.policy)
        params = build_params(args)
        trace = build_trace(args)
    except ValueError as exc:
        print(f"poolpilot simulate: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"trace: {trace.description}; {len(trace)} requests, peak {trace.peak_rate_per_s():.1f} req/s (1 min)"
    )
    results: list[Result] = []
    for name in policies:
        result = run_policy(name, trace, params)
        results.append(result)
        print(_line(result), flush=True)
    if args.json:
        doc: dict[str, Any] = {r.policy: r.to_json(with_series=not args.no_series) for r in results}
        doc["_run"] = {
            "trace": trace.description,
            "requests": len(trace),
            "params": {k: (v if not (isinstance(v, float) and not math.isfinite(v)) else None)
                       for k, v in params.as_dict().items()},
        }  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1, allow_nan=False))
        print(f"wrote {args.json}")
    if args.report:
        from poolpilot.sim.report import write_report

        path = write_report(results, args.report)
        print(f"wrote {path}")
    return 0
