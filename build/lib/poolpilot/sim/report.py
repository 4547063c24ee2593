"""A human-readable report of simulator runs: one Markdown table and one set of PNG plots per policy.

`write_report(results, out_dir)` writes `out_dir/report.md` (a row per policy with the JSON fields,
GPU-hours and attainment relative to the oracle when it is in the set) and, per policy, `<policy>.png`
with four panels over time: p99 against the objective, replicas and nodes, queue delay, GPU utilisation.
matplotlib runs on the Agg backend (no display), imported lazily so the simulator itself does not need it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

# The JSON fields the issue requires, in table order, with their column titles.
TABLE_FIELDS: tuple[tuple[str, str], ...] = (
    ("policy", "policy"),
    ("requests", "requests"),
    ("p99_ms", "p99 ms"),
    ("slo_attainment_requests", "requests in SLO"),
    ("slo_attainment_windows", "1-min windows in SLO"),
    ("gpu_hours", "GPU-hours"),
    ("cost_usd", "cost $"),
    ("cost_per_1k_tokens_usd", "$ / 1k tokens"),
    ("mean_gpu_utilization", "mean GPU util"),
    ("replica_changes", "replica changes"),
    ("batching_changes", "batching changes"),
    ("rejected_requests", "rejected"),
)

# Time-series keys the plots read (from the result's `timeseries`), with accepted spellings.
_SERIES_KEYS: dict[str, tuple[str, ...]] = {
    "time_s": ("time_s", "t_s", "times_s"),
    "p99_ms": ("p99_ms",),
    "replicas": ("replicas",),
    "ready_replicas": ("ready_replicas",),
    "nodes": ("nodes",),
    "queue_delay_ms": ("queue_delay_ms", "mean_queue_delay_ms", "queue_ms"),
    "max_queue_delay_us": ("max_queue_delay_us",),
    "gpu_utilization": ("gpu_utilization", "utilization", "mean_gpu_utilization"),
}


def result_fields(result: Any) -> dict[str, Any]:
    """The JSON object of one result, whatever its Python form (dict, dataclass, `to_json()`)."""
    if isinstance(result, Mapping):
        return dict(result)
    for method in ("to_json", "to_dict", "as_dict", "json_fields"):
        fn = getattr(result, method, None)
        if callable(fn):
            out = fn()
            if isinstance(out, Mapping):
                return dict(out)
    if is_dataclass(result) and not isinstance(result, type):
        return asdict(result)
    raise TypeError(f"cannot read a result of type {type(result).__name__}: expected a mapping or dataclass")


def result_series(result: Any) -> dict[str, list[float]]:
    """The time series of one result as equal-length float lists keyed by `_SERIES_KEYS`."""
    raw: Any = None
    for name in ("timeseries", "series", "time_series"):
        raw = result.get(name) if isinstance(result, Mapping) else getattr(result, name, None)
        if raw is not None:
            break
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raw = asdict(raw) if is_dataclass(raw) and not isinstance(raw, type) else vars(raw)
    out: dict[str, list[float]] = {}
    for key, spellings in _SERIES_KEYS.items():
        for s in spellings:
            if s in raw and raw[s] is not None:
                out[key] = [float(v) if v is not None else math.nan for v in raw[s]]
                break
    return out


# Fixed decimals where a column must line up; everything else by magnitude.
_DECIMALS = {"gpu_hours": 2, "cost_usd": 2, "cost_per_1k_tokens_usd": 6, "p99_ms": 1}


def _fmt(value: Any, key: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if key in _DECIMALS:
            return f"{value:,.{_DECIMALS[key]}f}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.4g}"
    return str(value)


def _pct(value: Any) -> str:
    return f"{100 * value:.2f} %" if isinstance(value, int | float) and math.isfinite(value) else "n/a"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One row per policy; attainment as percentages; plus GPU-hours relative to the oracle if present."""
    oracle = next((r for r in rows if r.get("policy") == "oracle"), None)
    oracle_gpu_h = oracle.get("gpu_hours") if oracle else None
    titles = [t for _, t in TABLE_FIELDS]
    if oracle_gpu_h:
        titles.append("GPU-h / oracle")
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    for r in rows:
        cells = []
        for key, _ in TABLE_FIELDS:
            v = r.get(key)
            cells.append(
                _pct(v) if key.startswith("slo_attainment") or key == "mean_gpu_utilization" else _fmt(v, key)
            )
        if oracle_gpu_h:
            g = r.get("gpu_hours")
            cells.append(f"{g / oracle_gpu_h:.2f}×" if isinstance(g, int | float) else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _safe_name(policy: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", policy) or "policy"


def plot_policy(name: str, series: Mapping[str, Sequence[float]], slo_ms: float, path: Path) -> None:
    """Four stacked panels over time for one policy, written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_min = [t / 60.0 for t in series.get("time_s", [])]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    fig.suptitle(f"{name}: p99 objective {slo_ms:g} ms")

    ax = axes[0]
    if "p99_ms" in series:
        ax.plot(t_min, series["p99_ms"], color="tab:blue", lw=1.2, label="p99 (per sample interval)")
    ax.axhline(slo_ms, color="tab:red", ls="--", lw=1.2, label=f"objective {slo_ms:g} ms")
    finite = [v for v in series.get("p99_ms", []) if math.isfinite(v)]
    top = max(finite, default=0.0) * 1.1
    ax.set_ylim(0, max(slo_ms * 1.25, min(top, slo_ms * 4)))  # the objective always shows; outliers clip
    ax.set_ylabel("latency (ms)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1]
    handles = []
    counts: list[float] = []
    if "replicas" in series:
        handles += ax.step(
            t_min, series["replicas"], where="post", color="tab:green", label="replicas (desired)"
        )
        counts += series["replicas"]
    if "ready_replicas" in series:
        handles += ax.step(
            t_min, series["ready_replicas"], where="post", color="tab:olive", ls=":", label="replicas (ready)"
        )
        counts += series["ready_replicas"]
    ax.set_ylim(0, max([c for c in counts if math.isfinite(c)], default=1.0) * 1.2 + 1)
    ax.set_ylabel("replicas")
    if "nodes" in series:
        ax2 = ax.twinx()
        handles += ax2.step(t_min, series["nodes"], where="post", color="tab:purple", ls="--", label="nodes")
        ax2.set_ylabel("nodes", color="tab:purple")
        ax2.set_ylim(0, max([c for c in series["nodes"] if math.isfinite(c)], default=1.0) * 1.2 + 1)
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[2]
    if "queue_delay_ms" in series:
        ax.plot(t_min, series["queue_delay_ms"], color="tab:orange", label="mean queue time (ms)")
    if "max_queue_delay_us" in series:
        ax.step(
            t_min,
            [v / 1000.0 for v in series["max_queue_delay_us"]],
            where="post",
            color="tab:brown",
            ls="--",
            label="max_queue_delay setting (ms)",
        )
    ax.set_ylabel("queue delay (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[3]
    if "gpu_utilization" in series:
        ax.plot(
            t_min, [100 * v for v in series["gpu_utilization"]], color="tab:cyan", label="GPU utilisation"
        )
    ax.set_ylabel("GPU utilisation (%)")
    ax.set_ylim(0, 105)
    ax.set_xlabel("time (min)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(results: Sequence[Any], out_dir: str | Path, *, title: str = "PoolPilot simulation") -> Path:
    """Write `report.md` and one PNG per policy into `out_dir`; returns the Markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [result_fields(r) for r in results]
    if not rows:
        raise ValueError("results is empty: nothing to report")
    slo_ms = float(rows[0].get("slo_ms", math.nan))
    parts = [f"# {title}\n\n", f"Objective: p99 ≤ {slo_ms:g} ms.\n\n"]
    scenario = rows[0].get("scenario") or rows[0].get("trace")
    if scenario:
        parts.append(f"Scenario: `{scenario}`.\n")
    parts.append("\n" + markdown_table(rows))
    parts.append(
        "\n`1-min windows in SLO` is the fraction of 1-minute windows whose p99 is within the objective; "
        "`GPU-h / oracle` compares with the lower bound (perfect foresight, instant provisioning).\n"
    )
    for r, row in zip(results, rows, strict=True):
        name = str(row.get("policy", "policy"))
        series = result_series(r)
        if not series.get("time_s"):
            continue
        png = out / f"{_safe_name(name)}.png"
        plot_policy(name, series, float(row.get("slo_ms", slo_ms)), png)
        parts.append(f"\n## {name}\n\n![{name}]({png.name})\n")
    md = out / "report.md"
    md.write_text("".join(parts), encoding="utf-8")
    return md
