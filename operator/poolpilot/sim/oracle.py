"""The oracle: a lower bound on the GPUs any policy needs to meet the objective, minute by minute.

`run_oracle(trace, params) -> Result`. For every 1-minute window (the same windows as
`slo_attainment_windows`), with perfect foresight of that minute's requests and instant provisioning (no
pod start, no node lead time, no reload), it finds the fewest replicas — with the best batching setting
from a small grid (`ORACLE_GRID`: queue delays × instance counts, max batch = the model's) — whose p99
over that minute's requests is within the objective. The minute is evaluated by the simulator's own
engine (`FleetEngine`, the shared Triton batcher core, round-robin router, token-aware GPU curve) on a
fleet that is ready and idle at the start of the minute.

GPU-hours are summed over minutes in the same unit the engine bills: GPUs of the nodes that hold the
replicas (`ceil(replicas · gpus_per_replica / gpus_per_node)` nodes), so ratios against policies are
like for like; `replica_gpu_hours` is the pod-level figure. A minute that no fleet up to `max_replicas`
can serve within the objective is charged `max_replicas` and counted as missed.

Search per minute: p99 is taken as non-increasing in replicas. The first configuration starts from the
previous minute's answer (or the throughput lower bound) and gallops/bisects; each other configuration
only has to beat the best so far, so it is first tried at `best − 1` and skipped if that fails. Every
(minute, replicas, configuration) evaluation is cached. A capacity-bound lower limit
(`replicas ≥ rate / (instances · max_batch / curve(max_batch))`) avoids evaluating hopeless fleets.

Also here, because it runs the same minute evaluator: `measured_replica_capacity_per_s`, the highest
Poisson rate one replica serves within the objective (a perf_analyzer-style sweep), which the `static`
baseline uses to provision for the peak.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from poolpilot.loads import Trace, load_default_tokens
from poolpilot.policy.types import BatchingConfig
from poolpilot.sim.controllers import FixedController
from poolpilot.sim.engine import OK, STATUS_NAMES, FleetEngine, default_batching
from poolpilot.sim.params import SimParams
from poolpilot.sim.run import Result
from poolpilot.sim.search import gallop_bisect

# Queue delays (µs) × instance counts the oracle may pick per minute. Max batch is the model's.
ORACLE_DELAYS_US: tuple[int, ...] = (0, 5_000, 20_000)
ORACLE_INSTANCES: tuple[int, ...] = (1, 2)
WINDOW_S = 60.0


def oracle_grid(params: SimParams) -> tuple[BatchingConfig, ...]:
    """The batching settings the oracle chooses from (Triton's default first)."""
    mbs = params.model_max_batch_size
    return tuple(
        BatchingConfig(
            max_queue_delay_us=d, max_batch_size=mbs, preferred_batch_sizes=(mbs,), instance_count=i
        )
        for i in ORACLE_INSTANCES
        for d in ORACLE_DELAYS_US
    )


@dataclass(frozen=True, slots=True)
class WindowEval:
    """One fixed fleet over one window's requests."""

    replicas: int
    batching: BatchingConfig
    p99_ms: float  # "higher" rank ceil(q·n) over all requests, rejected = inf (as window attainment)
    latency_ms: npt.NDArray[np.float64]  # per request, inf if rejected
    status: npt.NDArray[np.int8]
    busy_gpu_s: float
    replica_gpu_s: float
    queue_delay_ms: float
    executions: int
    complete: bool = True  # False: stopped once the window was certain to miss (only `meets` is known)
    simulated_requests: int = 0

    def meets(self, slo_ms: float) -> bool:
        return self.p99_ms <= slo_ms


def _quantile_rank(n: int, q: float) -> int:
    """0-based rank of the "higher" q-quantile of n values: ceil(q·n) − 1 (as window attainment)."""
    return max(0, min(n - 1, math.ceil(q * n) - 1))


def _window_quantile(latency_ms: npt.NDArray[np.float64], q: float) -> float:
    n = len(latency_ms)
    if n == 0:
        return 0.0
    k = _quantile_rank(n, q)
    return float(np.partition(latency_ms, k)[k])


def evaluate_fleet(
    arrival_s: npt.NDArray[np.float64],
    context_tokens: npt.NDArray[np.int64],
    generated_tokens: npt.NDArray[np.int64],
    duration_s: float,
    replicas: int,
    batching: BatchingConfig,
    params: SimParams,
    *,
    verdict_only: bool = False,
) -> WindowEval:
    """Serve these requests (times from 0) with a fixed, ready fleet in the engine; all run to completion.

    `verdict_only`: the caller needs only `meets`. The run stops as soon as enough requests were rejected
    or served late that the window's quantile must miss (`miss_limit`); such an evaluation has
    `complete=False`, p99 = inf and partial arrays. A window that meets always runs to completion, so its
    figures are those of a full run.
    """
    trace = Trace(
        arrival_s=arrival_s,
        context_tokens=context_tokens,
        generated_tokens=generated_tokens,
        duration_s=duration_s,
        name="oracle-window",
        description="oracle window",
    )
    fleet = FixedController(replicas, batching, name="oracle-eval", interval_s=3600.0)
    n = len(arrival_s)
    limit = None
    if verdict_only and n:
        limit = n - _quantile_rank(n, params.latency_quantile)  # misses that make rank k miss
    engine = FleetEngine(trace, params, fleet, initial_replicas=replicas, miss_limit=limit)
    out = engine.run()
    if out.aborted:
        return WindowEval(
            replicas=replicas,
            batching=batching,
            p99_ms=math.inf,
            latency_ms=np.zeros(0),
            status=np.zeros(0, dtype=np.int8),
            busy_gpu_s=math.nan,
            replica_gpu_s=replicas * params.gpus_per_replica * duration_s,
            queue_delay_ms=math.nan,
            executions=out.executions,
            complete=False,
            simulated_requests=out.simulated_requests,
        )
    ok = out.status == OK
    lat = np.where(ok, out.latency_ms, np.inf)
    q_ms = (out.start_s[ok] - out.arrival_s[ok]) * 1000.0
    return WindowEval(
        replicas=replicas,
        batching=batching,
        p99_ms=_window_quantile(lat, params.latency_quantile),
        latency_ms=lat,
        status=out.status,
        busy_gpu_s=out.busy_gpu_hours * 3600.0,
        replica_gpu_s=replicas * params.gpus_per_replica * duration_s,
        queue_delay_ms=float(q_ms.mean()) if len(q_ms) else math.nan,
        executions=out.executions,
        simulated_requests=out.simulated_requests,
    )


def throughput_upper_bound_per_s(params: SimParams, batching: BatchingConfig) -> float:
    """No replica can beat full max-size batches on every instance with no interference."""
    mbs = batching.max_batch_size
    return batching.instance_count * mbs / (params.curve_ms(mbs) / 1000.0)


@dataclass
class _Window:
    index: int
    arrival_s: npt.NDArray[np.float64]
    context_tokens: npt.NDArray[np.int64]
    generated_tokens: npt.NDArray[np.int64]
    cache: dict[tuple[int, BatchingConfig], WindowEval] = field(default_factory=dict)


class _Search:
    """Per-window search for the fewest replicas, with the evaluation cache and a count of evaluations."""

    def __init__(self, params: SimParams, grid: Sequence[BatchingConfig]) -> None:
        self.params = params
        self.grid = tuple(grid)
        self.evaluations = 0
        self.simulated_requests = 0

    def eval(self, w: _Window, replicas: int, cfg: BatchingConfig, *, full: bool = True) -> WindowEval:
        """The evaluation of (replicas, cfg) on `w`, cached; `full=False` may stop at a certain miss."""
        key = (replicas, cfg)
        hit = w.cache.get(key)
        if hit is None or (full and not hit.complete):
            hit = evaluate_fleet(
                w.arrival_s,
                w.context_tokens,
                w.generated_tokens,
                WINDOW_S,
                replicas,
                cfg,
                self.params,
                verdict_only=not full,
            )
            w.cache[key] = hit
            self.evaluations += 1
            self.simulated_requests += hit.simulated_requests
        return hit

    def ok(self, w: _Window, replicas: int, cfg: BatchingConfig) -> bool:
        return self.eval(w, replicas, cfg, full=False).meets(self.params.slo_ms)

    def lower_bound(self, w: _Window, cfg: BatchingConfig) -> int:
        rate = len(w.arrival_s) / WINDOW_S
        need = math.ceil(rate / throughput_upper_bound_per_s(self.params, cfg) - 1e-9)
        return max(self.params.min_replicas, 1, need)

    def fewest(self, w: _Window, cfg: BatchingConfig, guess: int) -> int | None:
        """Fewest replicas meeting the objective with `cfg`, or None if `max_replicas` does not."""
        lo = self.lower_bound(w, cfg)  # lo - 1 is known (or taken as) infeasible
        top = self.params.max_replicas
        r = min(top, max(guess, lo))
        # A hit at the guess (last minute's answer) bisects straight down: the answer is usually close.
        return gallop_bisect(
            lambda n: self.ok(w, n, cfg), lo, top, start=r, step_down=None, step_up=max(1, r // 4)
        )

    def best(self, w: _Window, guess: int) -> WindowEval | None:
        """The cheapest (replicas, configuration) for this window; ties keep the earlier grid entry."""
        best_r: int | None = None
        best_cfg: BatchingConfig | None = None
        for cfg in self.grid:
            if best_r is None:
                r = self.fewest(w, cfg, guess)
                if r is not None:
                    best_r, best_cfg = r, cfg
                continue
            below = best_r - 1
            if below < self.lower_bound(w, cfg) or not self.ok(w, below, cfg):
                continue
            r = self.fewest(w, cfg, below)
            if r is not None and r < best_r:
                best_r, best_cfg = r, cfg
        if best_r is None or best_cfg is None:
            return None
        return self.eval(w, best_r, best_cfg)


def _windows(trace: Trace) -> list[_Window]:
    n_win = max(1, math.ceil(trace.duration_s / WINDOW_S))
    idx = np.minimum((trace.arrival_s // WINDOW_S).astype(np.int64), n_win - 1)
    bounds = np.searchsorted(idx, np.arange(n_win + 1), side="left")
    out = []
    for m in range(n_win):
        s, e = int(bounds[m]), int(bounds[m + 1])
        out.append(
            _Window(
                index=m,
                arrival_s=np.ascontiguousarray(trace.arrival_s[s:e] - m * WINDOW_S),
                context_tokens=trace.context_tokens[s:e],
                generated_tokens=trace.generated_tokens[s:e],
            )
        )
    return out


def first_minute_need(trace: Trace, params: SimParams) -> int | None:
    """Fewest replicas (Triton's default batching, ready and idle at t = 0) whose p99 over the first
    minute's requests meets the objective, evaluated in the engine like one oracle minute; `min_replicas`
    for an empty minute, None when `max_replicas` does not meet it.

    The fleet a pool holds at the start of an hour cut out of continuous operation, sized by the plant
    itself for the load at that moment — no look-ahead, no capacity figure from a single replica.
    """
    end = int(np.searchsorted(trace.arrival_s, WINDOW_S, side="left"))
    if end == 0:
        return params.min_replicas
    w = _Window(
        index=0,
        arrival_s=np.ascontiguousarray(trace.arrival_s[:end]),
        context_tokens=trace.context_tokens[:end],
        generated_tokens=trace.generated_tokens[:end],
    )
    cfg = default_batching(params)
    search = _Search(params, (cfg,))
    return search.fewest(w, cfg, search.lower_bound(w, cfg))


def run_oracle(trace: Trace, params: SimParams, *, grid: Sequence[BatchingConfig] | None = None) -> Result:
    """The per-minute lower bound over `trace` (see the module docstring); a `Result` like a policy's.

    `sim_requests_per_s` / `sim_requests_per_cpu_s` count every request the evaluations simulated (each
    minute is simulated several times); `decisions[0]` holds the evaluation and request counts.
    """
    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    search = _Search(params, grid if grid is not None else oracle_grid(params))
    windows = _windows(trace)
    guess = params.min_replicas
    lat_parts: list[npt.NDArray[np.float64]] = []
    status_parts: list[npt.NDArray[np.int8]] = []
    series: dict[str, list[float]] = {
        k: []
        for k in (
            "t_s",
            "arrivals_per_s",
            "p99_ms",
            "replicas",
            "ready_replicas",
            "nodes",
            "queue_delay_ms",
            "gpu_utilization",
            "max_queue_delay_us",
            "max_batch_size",
            "instance_count",
        )
    }
    gpu_s = node_s = replica_gpu_s = busy_s = 0.0
    met = 0
    replica_changes = batching_changes = 0
    prev_r: int | None = None
    prev_cfg: BatchingConfig | None = None
    peak_r = 0
    for w in windows:
        span = min(WINDOW_S, trace.duration_s - w.index * WINDOW_S) if trace.duration_s > 0 else WINDOW_S
        span = max(span, 0.0)
        if len(w.arrival_s) == 0:
            r, cfg, ev = params.min_replicas, prev_cfg or search.grid[0], None
            met += 1
        else:
            ev = search.best(w, guess)
            if ev is None:
                r, cfg = params.max_replicas, search.grid[0]
                ev = search.eval(w, r, cfg)
            else:
                r, cfg = ev.replicas, ev.batching
                met += 1
            lat_parts.append(ev.latency_ms)
            status_parts.append(ev.status)
            busy_s += ev.busy_gpu_s
        nodes = params.nodes_for(r)
        node_s += nodes * span
        gpu_s += nodes * params.gpus_per_node * span
        replica_gpu_s += r * params.gpus_per_replica * span
        if prev_r is not None and r != prev_r:
            replica_changes += 1
        if prev_cfg is not None and cfg != prev_cfg:
            batching_changes += 1
        prev_r, prev_cfg = r, cfg
        peak_r = max(peak_r, r)
        guess = max(r, params.min_replicas)
        series["t_s"].append(w.index * WINDOW_S)
        series["arrivals_per_s"].append(len(w.arrival_s) / WINDOW_S)
        series["p99_ms"].append(ev.p99_ms if ev is not None and math.isfinite(ev.p99_ms) else math.nan)
        series["replicas"].append(r)
        series["ready_replicas"].append(r)
        series["nodes"].append(nodes)
        series["queue_delay_ms"].append(ev.queue_delay_ms if ev is not None else math.nan)
        util = ev.busy_gpu_s / ev.replica_gpu_s if ev is not None and ev.replica_gpu_s > 0 else math.nan
        series["gpu_utilization"].append(min(1.0, util) if math.isfinite(util) else math.nan)
        series["max_queue_delay_us"].append(cfg.max_queue_delay_us)
        series["max_batch_size"].append(cfg.max_batch_size)
        series["instance_count"].append(cfg.instance_count)

    lat = np.concatenate(lat_parts) if lat_parts else np.zeros(0)
    status = np.concatenate(status_parts) if status_parts else np.zeros(0, dtype=np.int8)
    ok = status == OK
    n = len(lat)
    served = lat[ok]
    hours = node_s / 3600.0
    cost = hours * params.price_per_node_hour_usd
    tokens_served = float(trace.tokens[ok].sum()) if n == len(trace) else math.nan
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    rejected = {
        STATUS_NAMES[k]: int(np.sum(status == k))
        for k in STATUS_NAMES
        if k != OK and bool(np.any(status == k))
    }
    return Result(
        policy="oracle",
        slo_ms=params.slo_ms,
        requests=n,
        p99_ms=float(np.quantile(served, params.latency_quantile)) if len(served) else math.nan,
        slo_attainment_requests=float(np.sum(ok & (lat <= params.slo_ms))) / n if n else 1.0,
        slo_attainment_windows=met / len(windows),
        gpu_hours=gpu_s / 3600.0,
        cost_usd=cost,
        cost_per_1k_tokens_usd=cost / (tokens_served / 1000.0) if tokens_served > 0 else math.nan,
        mean_gpu_utilization=busy_s / replica_gpu_s if replica_gpu_s > 0 else math.nan,
        replica_changes=replica_changes,
        batching_changes=batching_changes,
        rejected_requests=int(n - int(ok.sum())),
        peak_replicas=peak_r,
        replica_gpu_hours=replica_gpu_s / 3600.0,
        node_hours=hours,
        peak_nodes=max((int(v) for v in series["nodes"]), default=0),
        rejected_by_reason=rejected,
        windows=len(windows),
        duration_s=trace.duration_s,
        trace=trace.description,
        sim_requests_per_s=search.simulated_requests / wall if wall > 0 else math.nan,
        sim_requests_per_cpu_s=search.simulated_requests / cpu if cpu > 0 else math.nan,
        wall_s=wall,
        series=series,
        decisions=[{"evaluations": search.evaluations, "simulated_requests": search.simulated_requests}],
    )


# ---------------------------------------------------------------------------------------------------------
# A perf_analyzer-style capacity sweep with the same evaluator (used by the static baseline).
# ---------------------------------------------------------------------------------------------------------


def poisson_load(rate_per_s: float, duration_s: float, seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_per_s * duration_s))
    t = np.sort(rng.random(n) * duration_s)
    source = _token_source()
    if source is not None and len(source):
        pick = rng.integers(0, len(source), n)
        ctx, gen = source.context_tokens[pick], source.generated_tokens[pick]
    else:
        ctx = np.full(n, 1024, dtype=np.int64)
        gen = np.full(n, 128, dtype=np.int64)
    return Trace(t, ctx, gen, duration_s, "poisson", f"Poisson {rate_per_s:.1f}/s")


@functools.lru_cache(maxsize=1)
def _token_source() -> Trace | None:
    return load_default_tokens()


def measured_replica_capacity_per_s(
    params: SimParams, batching: BatchingConfig, *, duration_s: float = 300.0, resolution_per_s: float = 1.0
) -> float:
    """Highest Poisson rate one replica serves with p99 within the objective (bisection on the rate).

    Tokens are drawn from the shared trace (a fixed 1,024 + 128 when it is missing). Like reading a
    perf_analyzer sweep: the knee where the latency budget is hit. Cached per (params, batching); the
    trace-derived `peak_rate_per_s` and the fleet's `initial_replicas` do not matter and are left out
    of the key.
    """
    key = replace(params, peak_rate_per_s=0.0, initial_replicas=None)
    return _capacity(key, batching, duration_s, resolution_per_s)


@functools.lru_cache(maxsize=64)
def _capacity(
    params: SimParams, batching: BatchingConfig, duration_s: float, resolution_per_s: float
) -> float:

    def meets(rate: float) -> bool:
        load = poisson_load(rate, duration_s, params.seed)
        ev = evaluate_fleet(
            load.arrival_s,
            load.context_tokens,
            load.generated_tokens,
            duration_s,
            1,
            batching,
            params,
            verdict_only=True,
        )
        return ev.meets(params.slo_ms)

    lo, hi = 0.0, throughput_upper_bound_per_s(params, batching)
    if not meets(resolution_per_s):
        return 0.0
    lo = resolution_per_s
    while hi - lo > resolution_per_s:
        mid = (lo + hi) / 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo
