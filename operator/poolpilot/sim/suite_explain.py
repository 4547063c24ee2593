"""`poolpilot bench --suite generalize --explain NAME`: one suite scenario's hour, read minute by minute.

The suite says *that* PoolPilot lost a scenario; this says why. It replays the scenario exactly as the
suite does (same trace, plant and start fleet) and prints, per 1-minute window, the demand, the replicas
asked for and ready, the nodes and the window's p99 as window attainment judges it, then every decision
with its reasons — the way each loss in docs/generalization.md was read.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from poolpilot.loads import Trace
from poolpilot.sim.registry import run_policy
from poolpilot.sim.run import Result, prepare_params, window_met
from poolpilot.sim.suite import POOLPILOT, ScenarioSpec, build_trace, start_replicas


def _minute_rows(r: Result, trace: Trace, slo_ms: float) -> list[str]:
    p99 = r.p99_per_window_ms
    assert p99, "an engine run"
    rate = trace.rate_per_window(60.0)
    t = np.asarray(r.series["t_s"])
    asked, ready, nodes = (np.asarray(r.series[k]) for k in ("replicas", "ready_replicas", "nodes"))
    rows = []
    for m, p in enumerate(p99):
        sel = (t >= 60 * m) & (t < 60 * (m + 1))
        if not sel.any():
            sel = np.abs(t - 60 * m) == np.min(np.abs(t - 60 * m))
        verdict = "met" if window_met(p, slo_ms) else "MISSED"
        demand = float(rate[m]) if m < len(rate) else 0.0
        rows.append(
            f"| {m} | {demand:,.1f} | {int(asked[sel].max())} | {int(ready[sel].min())} | "
            f"{int(nodes[sel].max())} | {p:,.1f} | {verdict} |"
        )
    return rows


def _decision_lines(r: Result) -> list[str]:
    lines = []
    for d in r.decisions:
        moved = [f"{k} → {d[k]}" for k in ("replicas", "nodes") if k in d]
        if "batching" in d:
            b = d["batching"]
            moved.append(f"batching → {b.max_queue_delay_us} µs / {b.instance_count} instance(s)")
        lines.append(f"- {d['t_s']:,.0f} s: {', '.join(moved)} — " + " | ".join(d["reasons"]))
    return lines


def explain(spec: ScenarioSpec, base: Trace | None, policy: str = POOLPILOT) -> str:
    """Markdown: the scenario, the policy's totals, a row per minute and every decision with its reasons."""
    trace = build_trace(spec, base)
    params = prepare_params(trace, spec.params())
    start = start_replicas(trace, params)
    r = run_policy(policy, trace, replace(params, initial_replicas=start))
    pl = spec.plant
    head = [
        f"# {spec.name}: {policy}",
        "",
        f"{trace.description}; {len(trace):,} requests. Objective p{params.latency_quantile * 100:g} ≤ "
        f"{params.slo_ms:g} ms; curve {pl['batch_latency_a_ms']} + {pl['batch_latency_b_ms']}·batch ms, "
        f"{pl['token_ms_per_1k']} ms per 1k tokens above 2,048; node lead {pl['node_provisioning_s']} s, "
        f"pod start {pl['pod_start_s']} s; every controller starts from {start} replicas.",
        "",
        f"**{r.slo_attainment_windows:.1%} of windows, {r.gpu_hours:.2f} GPU-h**, "
        f"{r.rejected_requests:,} requests rejected, peak {r.peak_replicas} replicas.",
        "",
        "| minute | demand req/s | replicas asked (max) | ready (min) | nodes (max) | window p99 ms | |",
        "|---|---|---|---|---|---|---|",
    ]
    body = _minute_rows(r, trace, params.slo_ms)
    return "\n".join([*head, *body, "", "## Decisions", "", *_decision_lines(r), ""])
