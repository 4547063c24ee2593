"""`simulate(trace, controller_factory, params) -> Result`: one policy over one trace, and its metrics.

API for the baselines/oracle/report/bench helpers:
- `controller_factory(params: SimParams) -> Controller` (see sim/protocol.py). `simulate` first fills
  `params.peak_rate_per_s` from the trace (busiest 1-minute rate) when it is NaN.
- Every policy starts from the same warm fleet unless the controller says otherwise
  (`initial_replicas` attribute): `warm_start_replicas` = enough pods for the busiest minute within the
  first node+pod lead time (300 + 60 s) at 70 % of `replica_capacity_per_s` (measured: the highest
  Poisson rate one pod with Triton's default batching serves within the objective, the same figure
  the static baseline is provisioned with), within [min_replicas, max_replicas];
  `params.initial_replicas` overrides it.
- `Result` holds the JSON metrics as fields, a time series per scrape (`series`, lists keyed by
  `SERIES_KEYS` of engine.py: t_s, arrivals_per_s, p99_ms, p99_signal_ms, replicas, ready_replicas,
  nodes, ready_nodes, queue_delay_ms, gpu_utilization, max_queue_delay_us, max_batch_size,
  instance_count, rejected), and the raw `EngineOutput` (not serialised). `Result.to_json()` is the
  object written per policy by `poolpilot simulate --json`. The oracle may build a `Result` directly
  (fields without an engine run may be NaN/0) or call `summarize`.

Metric definitions:
- `p99_ms`: p99 of end-to-end latency (arrival → batch completion) of SERVED requests.
- `slo_attainment_requests`: fraction of ALL requests served within `slo_ms` (a rejected request is a miss).
- `slo_attainment_windows`: fraction of 1-minute windows (by arrival time, covering the trace's duration)
  whose p99 over all requests that arrived in it (rejected = infinite latency) is ≤ `slo_ms`. A window
  with no requests counts as met.
- `gpu_hours`: billed GPU-hours (GPUs of nodes that exist, provisioning or ready); `cost_usd` = node-hours ×
  price; `cost_per_1k_tokens_usd` = cost / (context+generated tokens of served requests / 1000).
- `mean_gpu_utilization`: busy GPU time (≥ 1 execution running) / GPU time held by pods.
- `replica_changes` / `batching_changes`: applied changes of the desired replica count / batching config.
- `sim_requests_per_s`: simulated requests per wall-clock second of the engine run;
  `sim_requests_per_cpu_s` the same per CPU second of this process (the honest figure on a shared machine).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from poolpilot.loads import Trace
from poolpilot.sim.engine import OK, STATUS_NAMES, EngineOutput, FleetEngine
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Controller

ControllerFactory = Callable[[SimParams], Controller]


@dataclass
class Result:
    """One policy's run: the JSON metrics, the time series, and the raw engine output."""

    policy: str
    slo_ms: float
    requests: int
    p99_ms: float
    slo_attainment_requests: float
    slo_attainment_windows: float
    gpu_hours: float
    cost_usd: float
    cost_per_1k_tokens_usd: float
    mean_gpu_utilization: float
    replica_changes: int
    batching_changes: int
    rejected_requests: int
    peak_replicas: int
    replica_gpu_hours: float = math.nan
    node_hours: float = math.nan
    peak_nodes: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    windows: int = 0
    duration_s: float = math.nan
    trace: str = ""
    sim_requests_per_s: float = math.nan
    sim_requests_per_cpu_s: float = math.nan
    wall_s: float = math.nan
    series: dict[str, list[float]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    output: EngineOutput | None = field(default=None, repr=False)
    # Each 1-minute window's p99 as window attainment judges it (`window_p99_ms`), computed once with
    # the attainment; empty for results without an engine run (the oracle, hindsight). Not in the JSON.
    p99_per_window_ms: tuple[float, ...] = field(default=(), repr=False)

    def missed_windows(self) -> list[int] | None:
        """The windows whose p99 missed the objective (an empty window meets); None without an engine run."""
        if not self.p99_per_window_ms:
            return None
        return [m for m, p in enumerate(self.p99_per_window_ms) if not window_met(p, self.slo_ms)]

    def to_json(self, *, with_series: bool = True) -> dict[str, Any]:
        """A JSON-safe dict (NaN/inf become None)."""
        skip = ("output", "series", "decisions", "p99_per_window_ms")
        d = {k: v for k, v in asdict(self).items() if k not in skip}
        if with_series:
            d["series"] = self.series
            d["decisions"] = [
                {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v) for k, v in dec.items()}
                for dec in self.decisions
            ]
        return _json_safe(d)  # type: ignore[no-any-return]


def _json_safe(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.generic):
        return _json_safe(x.item())
    return x


def replica_capacity_per_s(params: SimParams) -> float:
    """Requests/s one pod with Triton's default batching serves within the objective.

    Measured like a perf_analyzer sweep (`oracle.measured_replica_capacity_per_s`, cached per params);
    if that module is absent, the analytical rate of a pod batching at the size whose batch latency is
    half the objective.
    """
    try:
        from poolpilot.sim.oracle import measured_replica_capacity_per_s
    except ImportError:
        measured = 0.0
    else:
        from poolpilot.sim.engine import default_batching

        measured = measured_replica_capacity_per_s(params, default_batching(params))
    if measured > 0:
        return measured
    b = params.batch_latency_b_ms
    half = params.slo_ms / 2
    size = int((half - params.batch_latency_a_ms) // b) if b > 0 else params.model_max_batch_size
    size = max(1, min(params.model_max_batch_size, size))
    return size / (params.curve_ms(size) / 1000.0)


def warm_start_replicas(trace: Trace, params: SimParams) -> int:
    """The common starting fleet: the busiest minute within the first node+pod lead time (6 min) at 70 %
    of `replica_capacity_per_s` — the fleet a previous hour would have left, so no policy starts starved."""
    if params.initial_replicas is not None:
        return params.initial_replicas
    lead_s = params.node_provisioning_s + params.pod_start_s
    rates = trace.rate_per_window(60.0)
    first = float(rates[: max(1, math.ceil(lead_s / 60.0))].max()) if len(trace) else 0.0
    need = math.ceil(first / (0.7 * replica_capacity_per_s(params)))
    return max(params.min_replicas, min(params.max_replicas, need))


def window_p99_ms(
    arrival_s: np.ndarray, latency_ms: np.ndarray, ok: np.ndarray, duration_s: float, q: float
) -> list[float]:
    """Each 1-minute window's q-quantile latency (ms) as window attainment judges it.

    Windows by arrival time, covering the duration; a rejected request counts as infinitely late; the
    "higher" quantile of the window (rank ceil(q·n)), a conservative p99; NaN for a window without requests.
    """
    n_win = max(1, math.ceil(duration_s / 60.0))
    if len(arrival_s) == 0:
        return [math.nan] * n_win
    lat = np.where(ok, latency_ms, np.inf)
    win = np.minimum((arrival_s // 60.0).astype(np.int64), n_win - 1)
    order = np.lexsort((lat, win))
    win_sorted = win[order]
    lat_sorted = lat[order]
    starts = np.searchsorted(win_sorted, np.arange(n_win), side="left")
    ends = np.searchsorted(win_sorted, np.arange(n_win), side="right")
    out = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        k = min(e - s - 1, math.ceil(q * (e - s)) - 1)
        out.append(float(lat_sorted[s + max(0, k)]) if e > s else math.nan)
    return out


def window_attainment(
    arrival_s: np.ndarray, latency_ms: np.ndarray, ok: np.ndarray, slo_ms: float, duration_s: float, q: float
) -> tuple[float, int]:
    """(fraction of 1-minute windows whose q-quantile latency ≤ slo, number of windows); an empty window
    meets it."""
    return _attainment(window_p99_ms(arrival_s, latency_ms, ok, duration_s, q), slo_ms)


def window_met(p99_ms: float, slo_ms: float) -> bool:
    """Whether a 1-minute window meets the objective: its p99 within it, or no request at all (NaN)."""
    return math.isnan(p99_ms) or p99_ms <= slo_ms


def _attainment(p99_per_window_ms: Sequence[float], slo_ms: float) -> tuple[float, int]:
    met = sum(1 for x in p99_per_window_ms if window_met(x, slo_ms))
    return met / len(p99_per_window_ms), len(p99_per_window_ms)


def summarize(policy: str, trace: Trace, params: SimParams, out: EngineOutput) -> Result:
    """Compute the JSON metrics of a finished engine run."""
    if bool(np.any(out.status < 0)):
        raise RuntimeError(
            f"{policy}: {int(np.sum(out.status < 0))} requests were neither served nor rejected"
        )
    ok = out.status == OK
    lat = out.latency_ms
    n = len(lat)
    served_lat = lat[ok]
    p99 = float(np.quantile(served_lat, params.latency_quantile)) if len(served_lat) else math.nan
    within = int(np.sum(ok & (lat <= params.slo_ms)))
    p99_w = window_p99_ms(out.arrival_s, lat, ok, out.duration_s, params.latency_quantile)
    att_w, n_win = _attainment(p99_w, params.slo_ms)
    cost = out.node_hours * params.price_per_node_hour_usd
    tokens_served = float(out.tokens[ok].sum())
    rejected = {
        STATUS_NAMES[k]: int(np.sum(out.status == k))
        for k in STATUS_NAMES
        if k != OK and np.any(out.status == k)
    }
    return Result(
        policy=policy,
        slo_ms=params.slo_ms,
        requests=n,
        p99_ms=p99,
        slo_attainment_requests=within / n if n else 1.0,
        slo_attainment_windows=att_w,
        gpu_hours=out.node_gpu_hours,
        cost_usd=cost,
        cost_per_1k_tokens_usd=cost / (tokens_served / 1000.0) if tokens_served > 0 else math.nan,
        mean_gpu_utilization=(
            out.busy_gpu_hours / out.replica_gpu_hours if out.replica_gpu_hours > 0 else math.nan
        ),
        replica_changes=out.replica_changes,
        batching_changes=out.batching_changes,
        rejected_requests=int(n - int(ok.sum())),
        peak_replicas=out.peak_replicas,
        replica_gpu_hours=out.replica_gpu_hours,
        node_hours=out.node_hours,
        peak_nodes=out.peak_nodes,
        rejected_by_reason=rejected,
        windows=n_win,
        duration_s=out.duration_s,
        trace=trace.description,
        sim_requests_per_s=n / out.wall_s if out.wall_s > 0 else math.nan,
        sim_requests_per_cpu_s=n / out.cpu_s if out.cpu_s > 0 else math.nan,
        wall_s=out.wall_s,
        series=out.series,
        decisions=out.decisions,
        output=out,
        p99_per_window_ms=tuple(p99_w),
    )


def prepare_params(trace: Trace, params: SimParams) -> SimParams:
    """Fill what depends on the trace (the peak 1-minute rate) before controllers are built."""
    if math.isnan(params.peak_rate_per_s):
        return replace(params, peak_rate_per_s=trace.peak_rate_per_s(60.0))
    return params


def simulate(trace: Trace, controller_factory: ControllerFactory, params: SimParams) -> Result:
    """Run one controller over the trace and summarise it."""
    params = prepare_params(trace, params)
    controller = controller_factory(params)
    engine = FleetEngine(trace, params, controller, initial_replicas=warm_start_replicas(trace, params))
    out = engine.run()
    return summarize(controller.name, trace, params, out)
