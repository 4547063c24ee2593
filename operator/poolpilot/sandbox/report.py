"""The demo's report: `REPORT_DIR/report.md` and PNG plots over time, live beside simulated.

`write_report(doc, out_dir)` reads the document `poolpilot sandbox demo` writes to OUT (`live`, `simulated`,
`agreement`, `_run`) and writes five plots (p99 against the objective — the load generator's requests and
Prometheus' per-pod summary —, replicas desired/ready, nodes, the batching settings, GPU utilisation), the
totals, the agreement figures, a minute-by-minute table (p99 live and simulated, and how late the load
generator sent: the host stalling every process at once), and the operator's decisions with their
reasons (its Events, and each new `status.lastDecision` seen while the load ran). matplotlib runs on the
Agg backend, imported lazily.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

PLOTS: tuple[tuple[str, str], ...] = (
    ("p99.png", "p99 latency against the objective"),
    ("replicas.png", "replicas: desired and ready"),
    ("nodes.png", "GPU nodes: existing (billed) and ready"),
    ("batching.png", "batching: max queue delay and instances"),
    ("gpu_utilization.png", "GPU utilisation"),
)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else math.nan


def _series(doc: dict[str, Any], which: str, key: str) -> tuple[list[float], list[float]]:
    s = doc[which].get("series") or {}
    return [_num(t) for t in s.get("t_s", [])], [_num(v) for v in s.get(key, [])]


def minutes_within(per_minute: list[Any], slo_ms: float, after_s: float) -> tuple[int, int]:
    """(minutes whose p99 met the objective, minutes counted) among minutes starting at or after `after_s`.

    A minute without served requests counts as met only if none arrived (it is NaN here: counted as missed
    when it comes from requests that all failed, which the per-minute p99 of served requests cannot tell —
    the caller passes the windows' p99 over all requests, rejected as infinite)."""
    counted = [_num(v) for m, v in enumerate(per_minute) if 60 * m >= after_s]
    met = sum(1 for v in counted if math.isfinite(v) and v <= slo_ms)
    return met, len(counted)


def first_lead_s(doc: dict[str, Any]) -> tuple[float, float]:
    """(when the load starts, when the first node ordered for it can be serving: start + node lead)."""
    run = doc["_run"]
    idle = _num(run["config"].get("idle_before_s", 0.0))
    return idle, idle + _num(run["params"]["node_provisioning_s"])


def _plots(doc: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slo = _num(doc["live"]["slo_ms"])
    start, lead = first_lead_s(doc)

    def figure(name: str, title: str, ylabel: str) -> Any:
        fig, ax = plt.subplots(figsize=(10, 3.6))
        ax.set_title(title)
        ax.set_xlabel("time since the InferencePool was applied (s)")
        ax.set_ylabel(ylabel)
        if start > 0:
            ax.axvline(start, color="black", lw=0.8, ls="--", label=f"load starts ({start:.0f} s)")
        ax.axvline(lead, color="grey", lw=0.8, ls=":", label=f"load start + node lead ({lead:.0f} s)")
        return fig, ax

    def save(fig: Any, ax: Any, name: str) -> None:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)

    fig, ax = figure("p99.png", "p99 latency against the objective", "ms")
    t, v = _series(doc, "live", "p99_ms")
    ax.plot(t, v, lw=0.8, color="tab:blue", alpha=0.5, label="live: load generator, per sample")
    minute = doc["agreement"]["per_minute_p99_ms"]
    mx = [60 * m + 30 for m in range(len(minute["live"]))]
    ax.plot(
        mx,
        [_num(x) for x in minute["live"]],
        "o-",
        color="tab:blue",
        label="live: load generator, per minute",
    )
    prom = doc["_run"].get("prometheus", {}).get("p99_ms") or []
    ax.plot([p[0] for p in prom], [_num(p[1]) for p in prom], color="tab:green", lw=1.2,
            label="live: Prometheus, max per-pod Triton p99 (the operator's signal)")  # fmt: skip
    ax.plot(
        mx, [_num(x) for x in minute["simulated"]], "s--", color="tab:orange", label="simulated, per minute"
    )
    ax.axhline(slo, color="red", lw=1.2, label=f"objective {slo:.0f} ms")
    finite = [x for x in [*v, *[_num(p[1]) for p in prom]] if math.isfinite(x)]
    ax.set_ylim(0, min(max([slo * 1.6, *finite]) * 1.05, slo * 4))
    save(fig, ax, "p99.png")

    for name, title, ylabel, total, ready in (
        ("replicas.png", "replicas: desired and ready", "pods", "replicas", "ready_replicas"),
        ("nodes.png", "GPU nodes: existing (billed) and ready", "nodes", "nodes", "ready_nodes"),
    ):
        fig, ax = figure(name, title, ylabel)
        for which, style in (("live", "-"), ("simulated", "--")):
            for key, alpha in ((total, 1.0), (ready, 0.6)):
                t, v = _series(doc, which, key)
                ax.step(t, v, style, where="post", alpha=alpha, label=f"{which}: {key}")
        save(fig, ax, name)

    fig, ax = figure(
        "batching.png", "batching: max queue delay (µs) and instances per pod", "max_queue_delay µs"
    )
    ax2 = ax.twinx()
    ax2.set_ylabel("instance_count")
    for which, style in (("live", "-"), ("simulated", "--")):
        t, v = _series(doc, which, "max_queue_delay_us")
        ax.step(t, v, style, where="post", label=f"{which}: max queue delay")
        t, v = _series(doc, which, "instance_count")
        ax2.step(t, v, style, where="post", color="tab:purple", alpha=0.6, label=f"{which}: instances")
    ax2.set_ylim(0, 4)
    ax2.legend(loc="lower right", fontsize=8)
    save(fig, ax, "batching.png")

    fig, ax = figure(
        "gpu_utilization.png", "GPU utilisation (busy fraction, mean over Ready pods)", "fraction"
    )
    t, v = _series(doc, "live", "gpu_utilization")
    ax.plot(t, v, label="live: Prometheus nv_gpu_utilization")
    t, v = _series(doc, "simulated", "gpu_utilization")
    ax.plot(t, v, "--", label="simulated")
    ax.set_ylim(0, 1.05)
    save(fig, ax, "gpu_utilization.png")


def _fmt(v: Any, spec: str = ".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return format(v, spec) if math.isfinite(v) else "–"
    return str(v)


TOTALS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "d"),
    ("p99_ms", "p99 (ms)", ".0f"),
    ("slo_attainment_requests", "requests within the objective", ".2%"),
    ("slo_attainment_windows", "1-minute windows within the objective", ".1%"),
    ("gpu_hours", "GPU-hours (billed nodes)", ".3f"),
    ("cost_usd", "cost ($)", ".2f"),
    ("cost_per_1k_tokens_usd", "cost per 1k tokens ($)", ".5f"),
    ("mean_gpu_utilization", "mean GPU utilisation", ".1%"),
    ("peak_replicas", "peak replicas", "d"),
    ("peak_nodes", "peak nodes", "d"),
    ("replica_changes", "replica changes", "d"),
    ("batching_changes", "batching changes", "d"),
    ("rejected_requests", "failed requests", "d"),
)


def per_minute_table(doc: dict[str, Any]) -> list[str]:
    """Each minute's p99, live and simulated, whether it counts, and how late the load generator sent
    (seconds with a request sent at least 20 ms late: the host's CPUs stalled every sandbox process)."""
    slo = _num(doc["live"]["slo_ms"])
    _, lead = first_lead_s(doc)
    minute = doc["agreement"]["per_minute_p99_ms"]
    late = doc["_run"].get("send_lateness_per_minute") or []
    lines = [
        "## Minute by minute",
        "",
        "| minute | live p99 (ms) | simulated p99 (ms) | counted | within "
        "| load generator: worst send lateness (ms) | seconds with a send ≥ 20 ms late |",
        "|---:|---:|---:|---|---|---:|---:|",
    ]
    for m, (lv, sv) in enumerate(zip(minute["live"], minute["simulated"], strict=False)):
        counted = 60 * m >= lead
        ok = math.isfinite(_num(lv)) and _num(lv) <= slo
        lat = late[m] if m < len(late) else {}
        lines.append(
            f"| {m} | {_fmt(lv, '.1f')} | {_fmt(sv, '.1f')} | {'yes' if counted else 'no'} "
            f"| {('yes' if ok else '**no**') if counted else ''} | {_fmt(lat.get('worst_ms'), '.0f')} "
            f"| {_fmt(lat.get('stalled_seconds'), '.0f')} |"
        )
    return [*lines, ""]


def _decisions(doc: dict[str, Any]) -> list[str]:
    run = doc["_run"]
    t0 = _num(run.get("started_wall"))
    lines = ["## The operator's decisions", "", "### Events (InferencePool and GPUNodePool)", ""]
    lines += ["| time (s) | object | reason | message |", "|---:|---|---|---|"]
    for e in run.get("events", []):
        when = _num(e.get("time")) - t0 if math.isfinite(t0) else math.nan
        msg = str(e.get("message", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {_fmt(when, '.0f')} | {e.get('object')} | {e.get('reason')} | {msg} |")
    lines += ["", "### status.lastDecision, each new one seen while the load ran", ""]
    lines += ["| time (s) | action | reasons |", "|---:|---|---|"]
    for d in doc["live"].get("decisions", []):
        reasons = "; ".join(str(r) for r in d.get("reasons") or []).replace("|", "\\|")
        lines.append(f"| {_fmt(d.get('t_s'), '.0f')} | {d.get('action', '')} | {reasons} |")
    return lines


def seen(doc: dict[str, Any]) -> dict[str, str]:
    """The first Event of each kind the issue asks for while the load ran: scale-out, batching rollout, node
    order, scale-in (the set-up's first node order is not one)."""
    wanted = {
        "scale-out": ("ScaledOut",),
        "batching rollout": ("BatchingRolloutStarted", "BatchingRolledOut"),
        "node order": ("NodesOrdered",),
        "scale-in": ("ScaledIn",),
    }
    out = {}
    t0 = _num(doc["_run"].get("started_wall"))
    during = [e for e in doc["_run"].get("events", []) if not _num(e.get("time")) < t0]  # not set up
    for label, reasons in wanted.items():
        # In the order of `reasons`: a rollout's start carries its reason, its end (same second) does not.
        hit = next((e for r in reasons for e in during if e.get("reason") == r), None)
        out[label] = f"{hit['reason']}: {hit['message']}" if hit else "not seen"
    return out


def write_report(doc: dict[str, Any], out_dir: Path) -> Path:
    """Write report.md and the PNGs into `out_dir`; return report.md's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _plots(doc, out_dir)
    live, sim, agree, run = doc["live"], doc["simulated"], doc["agreement"], doc["_run"]
    slo = _num(live["slo_ms"])
    _, lead = first_lead_s(doc)
    met, counted = minutes_within(agree["per_minute_p99_ms"]["live"], slo, lead)
    sim_met, _ = minutes_within(agree["per_minute_p99_ms"]["simulated"], slo, lead)
    cfg = run["config"]
    lines = [
        "# PoolPilot sandbox demo",
        "",
        f"Trace: {run['trace']} ({run['requests']} requests). Objective: p99 ≤ {slo:.0f} ms. "
        f"Node lead {cfg['node_provisioning_s']} s, pod start {cfg['pod_start_s']} s, scrape every "
        f"{cfg['scrape_interval_s']} s, GPU curve {cfg['batch_latency_ms'][0]:g} + "
        f"{cfg['batch_latency_ms'][1]:g}·batch ms (+ the longest request's tokens above 2,048), "
        f"seed {cfg['seed']}. Measured live and given to the simulation: reload "
        f"{_fmt(run['params'].get('reload_s'), '.1f')} s per rollout, serving overhead "
        f"{_fmt(run['params'].get('request_overhead_ms'), '.1f')} ms per request (mean latency less the "
        "pods' queue and compute time).",
        f"Run time: {_fmt(run.get('total_s'), '.0f')} s in all (cluster start and first pods "
        f"{_fmt(run.get('setup_s'), '.0f')} s, load {_fmt(run.get('load_s'), '.0f')} s). The load generator "
        f"sent {run['loadgen'].get('sent', '–')} requests, lateness p99 "
        f"{_fmt(run['loadgen'].get('lateness_p99_ms'), '.0f')} ms (its own scheduling delay on this "
        "machine).",
        "",
        f"**Minutes within the objective from the load's start plus the first node lead ({lead:.0f} s):** "
        f"live {met}/{counted}"
        f" ({met / counted:.0%}), simulated {sim_met}/{counted}."
        if counted
        else "",
        "",
        "## Seen, with the operator's reason",
        "",
        *[f"- **{k}** — {v}" for k, v in seen(doc).items()],
        "",
        "## Totals",
        "",
        "| | live | simulated |",
        "|---|---:|---:|",
        *[f"| {title} | {_fmt(live.get(k), spec)} | {_fmt(sim.get(k), spec)} |" for k, title, spec in TOTALS],
        "",
        "## Simulator against the live run",
        "",
        "| figure | value | bound (issue 11) |",
        "|---|---:|---|",
        f"| per-minute p99, median absolute error | {_fmt(agree['p99_median_abs_error_pct'], '.1f')} % "
        "| ≤ 10 % |",
        f"| GPU-hours live / simulated | {_fmt(agree['gpu_hours_ratio'], '.3f')} | 0.9 – 1.1 |",
        f"| time with replicas within ±1 | {_fmt(agree['replicas_within_1_fraction'], '.1%')} | ≥ 80 % |",
        "",
        *per_minute_table(doc),
        "## Plots (live solid, simulated dashed)",
        "",
        *[f"### {title}\n\n![{title}]({name})\n" for name, title in PLOTS],
        *_decisions(doc),
        "",
        f"_Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}._",
        "",
    ]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
