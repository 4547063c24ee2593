"""`decide`: one tick of the joint batching/replica policy for one pool. Pure and deterministic.

Order of a tick (docs/policy.md has the reasons catalogue); `_Tick.run` calls one method per stage:

1. validate inputs; Off mode → hold;
2. signals missing, NaN or stale → hold (no scale-in on missing data);
3. learn (`learn`, `failures`): refit the batch-latency line, correct the tail by measured/predicted p99
   (only when the measurement describes the running configuration), detect stragglers and OOM/BACKEND
   failures;
4. forecast (`forecast`, `remember_level`): the replica and node envelopes, a recurring level;
5. plan (`search`): the cheapest (replicas, queue delay, instances) meeting target x (1 - margin) at the
   replica forecast, off the tabu list;
6. guard (`guard_stage`): a measured breach acts at once (cut the delay, scale out in proportion);
   capacity lost is kept;
7. gates (`forced_stage`, `scale_in_gate`, then `scale_in` or `hold_or_scale_out`): forced batching
   resets and rollbacks; scale-in waits out the stabilisation window (max recommendation in it) and a
   stricter dead-band, and never happens in the same tick as a batching change; batching changes are
   rate limited and made only for a saving worth a reload;
8. node pricing (`price_nodes`; whole nodes only when the caller passes `paid_replicas`): no node opened
   or kept for the margin alone, replicas fill the nodes the plan holds (docs/policy.md, "Whole nodes");
9. report (`next_batching`, `explain`, `actions`, `remember_floor`, `confirm_ahead`): actions (empty in
   Recommend/Off), reasons, updated history and model, node demand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from poolpilot.api.types import GPUNodePoolSpec, InferencePoolSpec, Mode, Shedding
from poolpilot.policy.demand import DemandForecast, Recurrence, forecast_demand, recurrence
from poolpilot.policy.model import (
    Estimate,
    estimate,
    observe,
    pessimistic,
    prior_model,
    straggler_share,
    with_correction,
    with_measured_p99,
    with_offset,
    with_spec_prior,
)
from poolpilot.policy.params import DEFAULT_PARAMS, PolicyParams
from poolpilot.policy.plan import (
    Candidate,
    Problem,
    cheapest,
    delay_candidates,
    fewest_replicas,
    instance_candidates,
    measured_line,
    predict,
)
from poolpilot.policy.types import (
    BatchingConfig,
    CurvePoint,
    Decision,
    HistoryEntry,
    LatencyModel,
    NodePoolDemand,
    PolicyAction,
    PoolState,
    Signals,
)


class PolicyInputError(ValueError):
    """An input the policy cannot decide on; the message names the offending field."""


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, x))


def validate(spec: InferencePoolSpec, state: PoolState, now_s: float) -> None:
    """Reject incoherent inputs with the field's name (the API validates too; the simulator may not)."""
    if not math.isfinite(now_s):
        raise PolicyInputError(f"now_s must be finite, got {now_s!r}")
    r = spec.replicas
    if r.min > r.max:
        raise PolicyInputError(f"spec.replicas: min {r.min} > max {r.max}")
    d = spec.batching.max_queue_delay_microseconds
    if d.min > d.max:
        raise PolicyInputError(f"spec.batching.maxQueueDelayMicroseconds: min {d.min} > max {d.max}")
    k = spec.batching.instance_count
    if k.min < 1 or k.min > k.max:
        raise PolicyInputError(f"spec.batching.instanceCount: need 1 <= min <= max, got {k.min}..{k.max}")
    for size in spec.batching.preferred_batch_sizes or ():
        if size < 1:
            raise PolicyInputError(f"spec.batching.preferredBatchSizes: sizes must be >= 1, got {size}")
    if state.replicas < 0:
        raise PolicyInputError(f"state.replicas must be >= 0, got {state.replicas}")
    b = state.batching
    if b is not None:
        if b.max_batch_size < 1:
            raise PolicyInputError(f"state.batching.max_batch_size must be >= 1, got {b.max_batch_size}")
        if b.instance_count < 1:
            raise PolicyInputError(f"state.batching.instance_count must be >= 1, got {b.instance_count}")
        if b.max_queue_delay_us < 0:
            raise PolicyInputError(
                f"state.batching.max_queue_delay_us must be >= 0, got {b.max_queue_delay_us}"
            )


def triton_default_batching(spec: InferencePoolSpec) -> BatchingConfig:
    """What a pod runs when nobody set batching: `dynamic_batching {}` with the model's max batch."""
    return BatchingConfig(
        max_queue_delay_us=0,
        max_batch_size=spec.model.max_batch_size,
        preferred_batch_sizes=(),
        instance_count=1,
    )


def signal_problem(signals: Signals, spec: InferencePoolSpec, params: PolicyParams) -> str | None:
    """Why these signals cannot be trusted for a decision, or None."""
    stale_s = params.stale_after_ticks * spec.tick_seconds
    if not _finite(signals.age_s) or signals.age_s > stale_s:
        return f"metrics stale (newest sample {signals.age_s:.0f} s old > {stale_s:.0f} s)"
    for name in ("p99_window_s", "rate_window_s"):
        window_s = getattr(signals, name)
        if not (_finite(window_s) and window_s > 0):
            return f"metrics window unknown ({name} = {window_s})"
    missing = []
    rate = signals.request_rate_per_s
    if not _finite(rate) or rate < 0:
        missing.append("request_rate_per_s")
    elif rate * signals.p99_window_s >= 1.0 and not (_finite(signals.p99_ms) and signals.p99_ms >= 0):
        # With requests in the window a p99 must exist; with none, NaN is the honest answer.
        missing.append("p99_ms")
    if missing:
        return f"metrics missing or NaN ({', '.join(missing)})"
    return None


def _node_demand(
    spec: InferencePoolSpec, replicas: int, replicas_ahead: int, *, hold: bool
) -> NodePoolDemand | None:
    if spec.node_pool is None:
        return None
    gpr = spec.node_pool.gpus_per_replica
    return NodePoolDemand(
        node_pool=spec.node_pool.name,
        gpus_now=replicas * gpr,
        gpus_ahead=max(replicas, replicas_ahead) * gpr,
        gpus_per_replica=gpr,
        hold=hold,
    )


def _hold(
    spec: InferencePoolSpec,
    state: PoolState,
    model: LatencyModel,
    reason: str,
    *,
    off: bool,
) -> Decision:
    """Keep everything as it is; only the spec's replica bounds may still force a change."""
    lo, hi = spec.replicas.min, spec.replicas.max
    replicas = _clamp(state.replicas, lo, hi)
    reasons = [reason]
    actions: tuple[PolicyAction, ...] = ()
    if replicas != state.replicas:
        reasons.append(f"replicas {state.replicas} outside spec bounds [{lo}, {hi}]: set to {replicas}")
        if spec.mode == Mode.AUTO and not off:
            actions = ("scale",)
    return Decision(
        replicas=replicas,
        batching=state.batching or triton_default_batching(spec),
        predicted_p99_ms=math.nan,
        reasons=tuple(reasons),
        latency_model=model,
        node_demand=_node_demand(spec, replicas, replicas, hold=True),
        scale_changed="scale" in actions,
        hold=True,
        history=state.history,
        actions=actions,
        mode=spec.mode.value,
    )


def _normal(b: BatchingConfig) -> BatchingConfig:
    """Triton reports an empty preferred list as [max_batch_size]: compare both as empty."""
    if b.preferred_batch_sizes == (b.max_batch_size,):
        return replace(b, preferred_batch_sizes=())
    return b


def _since(now_s: float, t: float | None) -> float:
    return math.inf if t is None else now_s - t


def decide(
    spec: InferencePoolSpec,
    state: PoolState,
    signals: Signals,
    now_s: float,
    *,
    node_pool: GPUNodePoolSpec | None = None,
    params: PolicyParams = DEFAULT_PARAMS,
    paid_replicas: int | None = None,
    hold_reason: str | None = None,
) -> Decision:
    """Decide replicas and batching for one pool at `now_s`; see the module docstring for the order.

    `hold_reason`: the caller knows the signals cannot be trusted (Prometheus unreachable, values no fleet
    can report, pods unreadable): hold, saying why.

    `paid_replicas`: replicas this pool may run on node-pool GPUs already paid for (nodes requested,
    whole; the caller knows the other tenants). None = unknown: nodes are not priced in.

    Apply only `Decision.actions` (empty in Recommend and Off mode); carry `latency_model` and
    `history` into the next `PoolState` (`poolpilot.policy.advance` does it).
    """
    validate(spec, state, now_s)
    params = with_spec_prior(spec, params)
    model = state.latency_model or prior_model(params)
    if spec.mode == Mode.OFF:
        return _hold(spec, state, model, "mode Off: PoolPilot changes nothing on this pool", off=True)
    problem = hold_reason or signal_problem(signals, spec, params)
    if problem is not None:
        return _hold(
            spec,
            state,
            model,
            f"hold: {problem}: keeping {state.replicas} replicas and the running batching; "
            "no scale-in on missing data",
            off=False,
        )
    return _Tick(spec, state, signals, now_s, node_pool, params, model, paid_replicas).run()


@dataclass(frozen=True)
class _Search:
    """Plan stage: the running setting as the spec bounds and the tabu list leave it, the cheapest one."""

    prob: Problem  # the objective at the replica forecast
    held: bool  # a rollout failed within the rate limit: the running batching stays
    cur_d: int
    cur_k: int
    delays: tuple[int, ...]
    insts: tuple[int, ...]
    out_of_bounds: bool  # the running setting is outside the spec bounds
    exclude: tuple[tuple[int, int], ...]  # tabu settings
    cand_cur: Candidate  # fewest replicas under the running setting
    cand_best: Candidate  # the cheapest setting


@dataclass(frozen=True)
class _Guarded:
    """Guard stage: what the measured p99 and the ready replicas say."""

    breach: bool
    ratio: float  # measured p99 / target (1 without a breach)
    r_guard: int  # replicas the breach asks for (0: none)
    need: int  # the recommendation recorded for the stabilisation window
    lost: bool  # replicas that should be ready are not
    bound: bool = False  # the breach is execution-bound: no replica count removes it


@dataclass(frozen=True)
class _Forced:
    """Batching changes the spec or a failure force, and the rate limit on the others."""

    preferred: tuple[int, ...]
    dropped: tuple[int, ...]
    bits: tuple[str, ...]  # why a reset is forced (empty: none)
    rollback: bool
    best: Candidate  # the cheapest setting, or the rollback target
    forced: bool
    since_change_s: float
    change_allowed: bool


@dataclass(frozen=True)
class _ScaleInGate:
    """Whether the pool scales in this tick, and the levels a scale-in is held at."""

    window_max: int  # largest recommendation in the stabilisation window
    covered: bool  # the window is fully recorded
    strict: Problem  # the dead-band: pessimistic model, more demand
    r_strict: int
    floor: int  # measured floor (replicas one more than measured too few; 0 = none)
    r_recur: int  # replicas held for a recurring level (0 = none)
    stable_target: int
    min_step: int  # the scale-in tolerance in replicas
    within_tolerance: bool
    unmeasured: bool  # the running batching was adopted less than settle_s ago
    go: bool


@dataclass(frozen=True)
class _Choice:
    """Replicas (before spec bounds and node pricing) and the batching setting chosen this tick."""

    target: int
    chosen: Candidate
    d: int
    k: int
    emergency: bool  # the queue delay was cut for a breach


class _Tick:
    """The state of one `decide` call, split into steps so each stays readable."""

    def __init__(
        self,
        spec: InferencePoolSpec,
        state: PoolState,
        signals: Signals,
        now_s: float,
        node_pool: GPUNodePoolSpec | None,
        params: PolicyParams,
        model: LatencyModel,
        paid_replicas: int | None = None,
    ) -> None:
        self.spec, self.state, self.sig, self.now = spec, state, signals, now_s
        self.node_pool, self.p, self.model = node_pool, params, model
        self.reasons: list[str] = []
        self.running = state.batching or triton_default_batching(spec)
        b = spec.batching
        self.d_lo, self.d_hi = b.max_queue_delay_microseconds.min, b.max_queue_delay_microseconds.max
        self.k_lo, self.k_hi = b.instance_count.min, b.instance_count.max
        self.r_lo, self.r_hi = spec.replicas.min, spec.replicas.max
        self.target_ms = spec.slo.latency_target_ms
        self.objective_ms = self.target_ms * (1.0 - spec.slo.margin_ratio)
        rate = signals.request_rate_per_s
        inf = signals.inference_rate_per_s
        if _finite(inf) and inf >= 0 and rate > 0 and inf > 0:
            self.items = min(max(inf / rate, 1.0), float(spec.model.max_batch_size))
        else:
            self.items = 1.0
        # Demand is the load the window's inferences arrived at, never below the mean: a burst in part of
        # the window sets its p99, and capacity sized for the mean misses it (`load_steady` compares the two).
        self.lam_mean = inf if _finite(inf) and inf >= 0 else rate * self.items
        seen = signals.inference_rate_seen_per_s
        self.lam = max(self.lam_mean, seen) if _finite(seen) and _finite(self.lam_mean) else self.lam_mean
        self.ready = state.replicas if signals.ready_replicas is None else max(0, signals.ready_replicas)
        self.requests_in_window = rate * signals.p99_window_s
        self.straggler = False
        self.max_batch = spec.model.max_batch_size
        self.floor_note = ""
        self.breach_bound = False  # the breach is execution-bound (set by the guard)
        self.scale_in_why = ""  # the reason a scale-in stage gave, the headline if replicas come down
        self.floor_on = False  # the measured floor holds this tick (set by the scale-in stage)
        self.floor_held = False  # ... by demand alone, an execution-bound breach aside (idem)
        self.hold_rate = math.nan  # a recurring level to keep capacity for (NaN: none); remember_level
        self.recur = Recurrence(math.nan, math.nan, 0.0)  # the level memory after this tick's demand
        self.paid_replicas = paid_replicas
        # Until the forecast stage runs: demand now for every lever.
        self.fc = DemandForecast(self.lam, self.lam, self.lam, 0.0, self.lam)

    # -- learning -------------------------------------------------------------------------------------
    def learn(self) -> None:
        self.measure()
        s, p = self.sig, self.p
        # Learn only from windows that describe the running configuration: the fit and the correction
        # must move together, or a half-updated model drives a scale change the next tick undoes.
        settled = (
            self.ready >= self.state.replicas
            and _since(self.now, self.state.last_scale_change_s) >= self.settle_s()
            and _since(self.now, self.state.last_batching_change_s) >= self.settle_s()
            and self.capacity_steady()
        )
        fit_ok = settled and _finite(s.avg_batch_size) and _finite(s.compute_us_per_exec)
        if fit_ok and s.avg_batch_size >= 1 and s.compute_us_per_exec > 0:
            here = self.estimate_running(self.model)
            # The line is what the batch costs without its wait for the longest request (`core`).
            straggler_ms = self.model.spread_ms * straggler_share(s.avg_batch_size) * here.slowdown
            self.model = observe(
                self.model,
                batch_items=s.avg_batch_size,
                compute_ms=max(s.compute_us_per_exec / 1000.0 - straggler_ms, 0.0),
                slowdown=here.slowdown,
                params=p,
            )
        self.straggler = False
        if not (settled and self.ready > 0 and _finite(s.p99_ms) and s.p99_ms > 0):
            return
        if self.requests_in_window < p.min_requests_for_p99 or not self.load_steady():
            return
        self.learn_spread()
        est = self.estimate_running(self.model)
        if not (math.isfinite(est.p99_ms) and est.p99_ms > 0):
            return
        ratio = s.p99_ms / est.p99_ms
        dt_s = float(self.spec.tick_seconds)
        if p.correction_mode == "additive":
            self.model = with_offset(self.model, s.p99_ms, est.p99_ms, p, dt_s=dt_s, cap_ms=self.target_ms)
        else:
            self.model = with_correction(self.model, ratio, p, dt_s=dt_s)
        al = p.straggler_alpha
        sr = math.exp(
            (1 - al) * math.log(self.model.straggler_ratio) + al * math.log(min(max(ratio, 0.1), 10))
        )
        self.model = replace(self.model, straggler_ratio=sr)
        queue_ok = not _finite(s.queue_time_us) or s.queue_time_us / 1000.0 <= max(est.wait_p99_ms, 1.0)
        mean_ok = True
        if _finite(s.avg_batch_size) and _finite(s.compute_us_per_exec) and s.avg_batch_size >= 1:
            line = self.model.a_ms + self.model.b_ms * s.avg_batch_size
            mean_ok = abs(s.compute_us_per_exec / 1000.0 / line - 1.0) <= p.straggler_mean_tolerance
        self.straggler = sr >= p.straggler_ratio and queue_ok and mean_ok
        if self.straggler:
            self.reasons.append(
                f"stragglers: p99 is {sr:.1f}x the model's while mean execution and queue time match it"
            )

    def measure(self) -> None:
        """Record the window's p99 in the measured curve (`LatencyModel.p99_curve`) when the window saw one
        fleet under the running batching: the ready replicas unchanged all window, whether or not more
        were asked for (pods waiting for a node serve nothing; what the ready ones did is still what
        that many replicas do at that load), at one load (`load_steady`), and without a backlog: a mean
        queue above the objective is a queue draining or growing, whose p99 says how long it was, not
        what that many replicas do at that load (found in the suite: a start-up backlog read as a 30 s
        point at low load vetoed every later meet above it)."""
        s, p = self.sig, self.p
        if not (self.ready > 0 and _finite(s.p99_ms) and s.p99_ms > 0):
            return
        if self.requests_in_window < p.min_requests_for_p99:
            return
        if _since(self.now, self.state.last_batching_change_s) < self.settle_s():
            return
        if not self.capacity_steady():
            return
        if self.queue_above(1.0) or not self.load_steady():
            return
        self.model = with_measured_p99(
            self.model,
            self.lam / self.ready,
            s.p99_ms,
            p,
            now_s=self.now,
            replicas=self.ready,
            window_s=s.p99_window_s,
        )

    def load_steady(self) -> bool:
        """Whether the window saw one load (`PolicyParams.load_steady_ratio`); unknown counts as steady
        (a metric source without the seen rate learns as before)."""
        return self.lam <= self.p.load_steady_ratio * self.lam_mean or not _finite(self.lam)

    def learn_spread(self) -> None:
        """Measure the straggler spread (`LatencyModel.spread_ms`) where requests run alone and do not
        queue: there a request's latency is its own execution, so the p99 above the mean execution and
        queue is the spread of one request's cost (long prompts: ~120 ms where the mean is ~70 ms)."""
        s, p = self.sig, self.p
        if not (_finite(s.avg_batch_size) and _finite(s.compute_us_per_exec) and _finite(s.queue_time_us)):
            return
        compute_ms, queue_ms = s.compute_us_per_exec / 1000.0, s.queue_time_us / 1000.0
        if s.avg_batch_size > p.spread_max_batch or queue_ms > p.spread_max_queue_share * compute_ms:
            return
        if self.delay_matters(self.running.max_queue_delay_us, s.p99_ms):
            return
        obs = max(0.0, s.p99_ms - compute_ms - queue_ms)
        al = p.correction_alpha
        self.model = replace(self.model, spread_ms=(1 - al) * self.model.spread_ms + al * obs)

    def p99_sampled(self) -> bool:
        """Whether a p99 over the target is evidence (a breach, a measured floor, a failed setting): read on
        enough requests to be more than the slowest one, or with a mean queue over the target.

        With fewer than 1/(1 − q) requests a quantile is the slowest request. A histogram's quantile is
        over the whole pool's requests, so the pool's count is what it needs. Triton's summary (the
        default source, `Signals.p99_per_pod`) is each pod's quantile over its own window and the reading
        the worst pod's: there each pod needs the count, and the max over pods is otherwise the slowest
        request of the whole window. Per pod, the count is the pool's requests over the most pods that
        served in the window (their requests stay in the pool's rate), an average: the worst pod may have
        had fewer. The count is capped where the pods can be busy all window on that few requests of up
        to the target each (window / target per pod, times the pods for the pool's count): then the
        slowest one is a queue, not noise (a 2 s objective needs 30 per pod, not 100). Found on the
        sandbox: 40 s after the load stopped, a node release 8→4 then 4→7 at the first tick the guard's
        cooldown allowed, the draining window holding ~95 requests per pod (docs/policy.md). A mean
        queue over the target counts on any sample: a mean is not a tail, and a backlog is what replicas
        shorten.
        """
        return self.queue_above(1.0) or self.p99_counted()

    def p99_counted(self) -> bool:
        """Whether the window holds the requests a p99 reading needs (`p99_requests_needed`)."""
        return self.requests_in_window >= self.p99_requests_needed() * (1.0 - 1e-9)

    def p99_requests_needed(self) -> float:
        """Requests in the window a p99 reading needs (`p99_sampled`): per pod that served in the window
        for a per-pod reading, pool-wide for a histogram's."""
        since_s = self.now - self.sig.p99_window_s
        window = [e.ready for e in self.state.history if e.ready is not None and e.time_s > since_s]
        pods = max([self.ready, 1, *window])
        if not self.sig.p99_per_pod:
            # One quantile over the pool: its count, capped where every serving pod can be busy all window.
            quantile = 1.0 / (1.0 - self.spec.slo.latency_quantile)
            return min(quantile, pods * self.sig.p99_window_s * 1000.0 / self.target_ms)
        return pods * self.p99_requests_per_reading()

    def p99_requests_per_reading(self) -> float:
        """Requests one quantile needs to be more than its slowest request, capped at window / target."""
        quantile = 1.0 / (1.0 - self.spec.slo.latency_quantile)
        return min(quantile, self.sig.p99_window_s * 1000.0 / self.target_ms)

    def unsampled_note(self, measured_ms: float) -> str:
        """The reason a p99 over the target is no breach (`p99_sampled`)."""
        if self.sig.p99_per_pod:
            per_pod = math.ceil(self.p99_requests_per_reading() - 1e-9)
            return (
                f"p99 {measured_ms:.0f} ms read on fewer than {per_pod} requests per serving pod "
                "(each pod's slowest request, not its quantile): no breach"
            )
        return (
            f"p99 {measured_ms:.0f} ms read on {self.requests_in_window:.0f} requests, fewer than "
            f"{math.ceil(self.p99_requests_needed() - 1e-9)} (the pool's slowest request, not its "
            "quantile): no breach"
        )

    def settle_s(self) -> float:
        """How long after a change the windows describe the running setting: `PolicyParams.settle_s`, and
        never less than the longer of the p99's and the rates' windows and a tick (a deployment may read
        over longer windows; at the default 60 s and a 15 s tick, the same 75 s)."""
        window_s = max(self.sig.p99_window_s, self.sig.rate_window_s)
        return max(self.p.settle_s, window_s + float(self.spec.tick_seconds))

    def guard_cooldown_s(self) -> float:
        """How long the guard waits after a scale-up before the next: `PolicyParams.guard_cooldown_s`, and at
        least one settled tick (`settle_s()` and a tick), so the model learns between two guard steps."""
        return max(self.p.guard_cooldown_s, self.settle_s() + float(self.spec.tick_seconds))

    def capacity_steady(self) -> bool:
        """Whether the ready replicas have been what they are now for `settle_s()` (as recorded each tick).

        A scale-out whose pods wait for a node becomes capacity a node lead later than the scale change:
        until the p99 window has passed since then, it still holds the busier pods' requests (found live:
        a 60 s window straddling 8→16 ready pods read as +56 ms of unmodelled tail, which then held 16
        replicas for 400 s through the scale-in dead-band)."""
        since_s = self.now - self.settle_s()
        return all(e.ready is None or e.ready == self.ready for e in self.state.history if e.time_s > since_s)

    def failure_settle_s(self) -> float:
        """How long after a batching change the failure rates describe it: `PolicyParams.failure_settle_s`,
        and at least the rates' window and a tick."""
        return max(self.p.failure_settle_s, self.sig.rate_window_s + float(self.spec.tick_seconds))

    def failures(self) -> bool:
        """OOM/BACKEND failures → halve the max batch size (remembered as a ceiling). True if lowered."""
        s, p = self.sig, self.p
        rate = sum(
            v
            for key, v in s.failure_rate_by_reason.items()
            if key.upper() in p.failure_reasons and _finite(v) and v > 0
        )
        model_max = self.spec.model.max_batch_size
        ceiling = min(self.model.max_batch_ceiling or model_max, model_max)
        if rate > p.failure_rate_threshold_per_s and (
            _since(self.now, self.state.last_batching_change_s) >= self.failure_settle_s()
        ):
            base = min(ceiling, self.running.max_batch_size)
            lowered = max(1, base // 2)
            if lowered < base:
                self.model = replace(self.model, max_batch_ceiling=lowered)
                self.reasons.append(
                    f"{'/'.join(p.failure_reasons)} failures {rate:.2f}/s: lower max batch size "
                    f"{self.running.max_batch_size}→{lowered}"
                )
                ceiling = lowered
                self.max_batch = ceiling
                return True
        self.max_batch = ceiling
        return False

    # -- planning -------------------------------------------------------------------------------------
    def problem(self, rate_per_s: float, objective_ms: float) -> Problem:
        return Problem(
            model=self.model,
            rate_per_s=rate_per_s,
            items_per_request=self.items,
            max_batch_size=self.max_batch,
            quantile=self.spec.slo.latency_quantile,
            objective_ms=objective_ms,
            max_utilization=self.spec.slo.target_gpu_utilization,
            min_replicas=self.r_lo,
            max_replicas=self.r_hi,
            params=self.p,
            running_instances=self.running.instance_count,
            running_delay_us=self.running.max_queue_delay_us,
            measured=self.measured_curve(),
            evidence_headroom=self.p.scale_in_demand_headroom,
        )

    def strict_problem(self, rate_per_s: float, objective_ms: float) -> Problem:
        """The problem capacity is given back on: the model at its recent peak corrections (capacity bought
        back takes a pod start or a node lead to return); the callers' demand carries the headroom."""
        return replace(
            self.problem(rate_per_s, objective_ms), model=pessimistic(self.model), evidence_headroom=0.0
        )

    def measured_curve(self) -> tuple[CurvePoint, ...]:
        """The measured p99 curve, if it describes the setting the plan prices as the running one (a
        lowered max batch size is a different setting: its batches are smaller)."""
        return self.model.p99_curve if self.max_batch == self.running.max_batch_size else ()

    def run(self) -> Decision:
        """One tick, stage by stage (module docstring); each stage is a method below."""
        self.learn()
        oom = self.failures()
        fc = self.forecast()
        self.remember_level()
        lam_plan = fc.replicas_per_s
        s = self.search(lam_plan)
        g = self.guard_stage(s, lam_plan)
        f = self.forced_stage(s, g, oom=oom)
        gate = self.scale_in_gate(s, g, f, lam_plan)
        c = self.scale_in(s, gate) if gate.go else self.hold_or_scale_out(s, g, f, gate, lam_plan)
        target, planned, r_ahead = self.price_nodes(s, g, f, gate, c, fc)
        if not c.chosen.feasible:
            self.reasons.append(self.unreachable(c.chosen, lam_plan))
        batching, changed = self.next_batching(s, f, gate, c)
        p99_pred, util_pred = self.predict(target, c.d, c.k, lam_plan)
        self.explain(s, g, c, target, changed, p99_pred=p99_pred, util_pred=util_pred, lam_plan=lam_plan)
        actions = self.actions(target, changed)
        self.remember_floor(planned, gate.floor, actions)
        if "batching" in actions and self.model.p99_curve:
            # The measured curve describes the setting being left: the new one starts from the model.
            self.model = replace(self.model, p99_curve=())
        ahead_asked = r_ahead
        r_ahead = self.confirm_ahead(r_ahead, planned, g)
        return Decision(
            replicas=target,
            batching=batching,
            predicted_p99_ms=p99_pred,
            reasons=tuple(self.reasons),
            latency_model=self.model,
            node_demand=_node_demand(self.spec, planned, r_ahead, hold=False),
            scale_changed="scale" in actions,
            batching_changed="batching" in actions,
            hold=False,
            history=self.history(g.need, ahead_asked),
            actions=actions,
            mode=self.spec.mode.value,
            emergency=c.emergency,
            predicted_utilization=util_pred,
            demand_per_s=lam_plan,
        )

    # -- plan -----------------------------------------------------------------------------------------
    def search(self, lam_plan: float) -> _Search:
        """Plan stage: the running setting (within the spec bounds, off the tabu list) and the cheapest
        setting at the replica forecast."""
        p = self.p
        prob = self.problem(lam_plan, self.objective_ms)
        held = self.held_after_failure()
        cur_d = _clamp(self.running.max_queue_delay_us, self.d_lo, self.d_hi)
        cur_k = _clamp(self.running.instance_count, self.k_lo, self.k_hi)
        delays = tuple(delay_candidates(self.d_lo, self.d_hi, cur_d, p.delay_grid_us))
        insts = tuple(instance_candidates(self.k_lo, self.k_hi, p.max_instance_candidates))
        out_of_bounds = (cur_d, cur_k) != self.running_key()
        if held:  # what runs stays, even outside the spec bounds, until the cooldown is over
            cur_d, cur_k = self.running_key()
        cand_cur = fewest_replicas(prob, cur_d, cur_k)
        exclude = self.tabu(cand_cur, cur_d, cur_k)
        if not held and out_of_bounds and (cur_d, cur_k) in exclude:
            # The spec bounds moved the running setting to one that failed: the nearest one that did not.
            cur_d, cur_k = self.nearest_allowed(cur_d, cur_k, delays, insts, exclude)
            cand_cur = fewest_replicas(prob, cur_d, cur_k)
        cand_best = cheapest(prob, delays, insts, (cur_d, cur_k), exclude=exclude)
        return _Search(prob, held, cur_d, cur_k, delays, insts, out_of_bounds, exclude, cand_cur, cand_best)

    # -- guard ----------------------------------------------------------------------------------------
    def guard_stage(self, s: _Search, lam_plan: float) -> _Guarded:
        """Guard stage: a measured breach acts now, in proportion to it; capacity that should be ready and
        is not is kept (no scale-in) and counted in the node demand."""
        breach, ratio, r_guard = self.guard(s.cur_d, s.cur_k, lam_plan)
        # An execution-bound breach holds nothing: the replicas it keeps would buy no latency, so the
        # window records what the plan asks for (where its p99 stops improving, within the utilisation
        # cap) and the fleet may come down to it. Not when another setting meets the objective.
        bound = breach and self.breach_bound and not s.cand_best.feasible
        need = s.cand_best.replicas if bound else max(s.cand_best.replicas, r_guard)
        R = self.state.replicas
        # A pod waiting for a node the pool asked for is not lost before that node's lead time is up.
        grace_s = self.p.lost_capacity_grace_s
        if self.node_pool is not None:
            grace_s = max(grace_s, float(self.node_pool.provisioning_seconds) + self.p.pod_start_s)
        since_s = _since(self.now, self.state.last_scale_change_s)
        lost = self.ready < R and since_s >= grace_s
        if lost:
            gpr = self.spec.node_pool.gpus_per_replica if self.spec.node_pool else 1
            when = (
                f"{since_s:.0f} s after the last change" if math.isfinite(since_s) else "(no change made yet)"
            )
            self.reasons.append(
                f"lost capacity: {self.ready}/{R} replicas ready {when}: keep {R} "
                f"replicas (no scale-in), node demand counts {(R - self.ready) * gpr} lost GPUs"
            )
        return _Guarded(breach, ratio, r_guard, need, lost, bound)

    # -- gates ----------------------------------------------------------------------------------------
    def forced_stage(self, s: _Search, g: _Guarded, *, oom: bool) -> _Forced:
        """Batching changes the pool must make whatever the plan saves: unknown running config, spec bounds
        moved, OOM ceiling, spec-owned fields, and the rollback of a setting that breached after adoption.
        """
        spec, state = self.spec, self.state
        preferred, dropped = self.preferred()
        bits = self.forced_bits(s, preferred, oom=oom)
        best = s.cand_best
        # A setting adopted for a saving that then breached the objective is rolled back at once (it
        # joined the tabu list above): waiting for the model to prefer another setting can take forever,
        # because the breach it caused was learnt as an unmodelled tail that every setting now carries.
        # It goes back to the spec's most conservative setting (least delay, fewest instances: Triton's
        # default behaviour within the bounds), not to the same model's next guess.
        # Not when the breach is execution-bound (no setting meets the objective: a rollback would only
        # start a cycle through the settings), and only to a setting that has not failed itself.
        safe = (self.d_lo, self.k_lo)
        rollback = (
            not s.held
            and g.breach
            and state.batching is not None
            and (s.cur_d, s.cur_k) in s.exclude
            and safe not in s.exclude
            and not self.execution_bound(s.cur_d, s.cur_k)
        )
        if rollback:
            back = fewest_replicas(s.prob, *safe)
            if (back.max_queue_delay_us, back.instance_count) != (s.cur_d, s.cur_k):
                best = back
                bits.append(
                    f"roll back {s.cur_d} µs / {s.cur_k} instance{'s' if s.cur_k != 1 else ''}: it breached "
                    "the objective after adoption"
                )
            else:
                rollback = False
        if s.held and bits:
            since_failure = _since(self.now, state.last_batching_failure_s)
            self.reasons.append(
                f"batching reset deferred ({', '.join(bits)}): a rollout failed and was rolled back "
                f"{since_failure:.0f} s ago; not before {spec.batching.min_seconds_between_changes} s"
            )
            bits = []
        since_change = _since(self.now, state.last_batching_change_s)
        return _Forced(
            preferred=preferred,
            dropped=dropped,
            bits=tuple(bits),
            rollback=rollback,
            best=best,
            forced=bool(bits) or oom,
            since_change_s=since_change,
            change_allowed=since_change >= spec.batching.min_seconds_between_changes,
        )

    def forced_bits(self, s: _Search, preferred: tuple[int, ...], *, oom: bool) -> list[str]:
        """Why the running batching must be reset now (empty: it need not)."""
        spec, running = self.spec, self.running
        bits: list[str] = []
        if self.state.batching is None:
            bits.append("running batching unknown")
        if s.out_of_bounds:
            bits.append("running delay/instances outside spec bounds")
        if running.max_batch_size != self.max_batch and not oom:
            bits.append(f"max batch size {running.max_batch_size}→{self.max_batch}")
        # Triton normalises an empty preferred list to [max_batch_size]: both mean "none set".
        running_pref = running.preferred_batch_sizes
        if not preferred and running_pref == (running.max_batch_size,):
            running_pref = ()
        if running_pref != preferred:
            bits.append("preferred batch sizes from spec")
        if running.max_queue_size != spec.batching.queue_policy.max_queue_size:
            bits.append("max queue size from spec")
        if self.timeout_against_spec():
            bits.append("queue timeout from spec")
        return bits

    def scale_in_gate(self, s: _Search, g: _Guarded, f: _Forced, lam_plan: float) -> _ScaleInGate:
        """Whether this tick scales in: stabilised (the largest recommendation in the window), dead-banded
        (a stricter model at more demand), above the measured floor and the recurring level, under the
        RUNNING batching, and never with a batching change, a breach or capacity lost."""
        spec, state, p = self.spec, self.state, self.p
        R = state.replicas
        window_start = self.now - spec.replicas.scale_down_stabilization_seconds
        window_max = max([e.replicas for e in state.history if e.time_s >= window_start] + [g.need])
        covered = spec.replicas.scale_down_stabilization_seconds == 0 or any(
            e.time_s <= window_start + spec.tick_seconds / 2 for e in state.history
        )
        strict = self.strict_problem(lam_plan * (1.0 + p.scale_in_demand_headroom), self.objective_ms)
        r_strict = fewest_replicas(strict, s.cur_d, s.cur_k).replicas
        floor = self.model.floor_replicas
        self.floor_held = self.floor_holds()
        # Too few for an objective no replica count meets is no evidence about capacity: through an
        # execution-bound breach the floor does not hold, or one recorded before the pool learnt its
        # tail (at its first breach) would hold the fleet for as long as the load stays (held-out seed
        # 2: two nodes all hour on "9 were too few at 16/s", read at its first tick; dev seed 30: a node
        # for 20 minutes). Suspended, not erased: the verdict can flicker with the queue, and the floor
        # is the pool's measurement, the verdict the model's.
        self.floor_on = self.floor_held and not g.bound
        r_recur = 0
        if math.isfinite(self.hold_rate):
            r_recur = fewest_replicas(
                self.strict_problem(self.hold_rate, self.objective_ms), s.cur_d, s.cur_k
            ).replicas
        stable_target = max(window_max, r_strict, floor if self.floor_on else 0, r_recur)
        # Hysteresis (HPA's tolerance, on the way down only): a scale-in must remove a real share of the
        # fleet. One replica at a time, as the peak correction decays, is a creep that never settles.
        min_step = max(1, math.ceil(p.scale_in_tolerance * R))
        within_tolerance = R - min_step < stable_target < R
        # A scale-in waits until a new batching setting has been measured: its saving was a prediction.
        unmeasured = f.since_change_s < self.settle_s()
        go = (
            stable_target < R
            and not within_tolerance
            and (not g.breach or g.bound)
            and not g.lost
            and not f.forced
            and covered
            and not unmeasured
        )
        return _ScaleInGate(
            window_max=window_max,
            covered=covered,
            strict=strict,
            r_strict=r_strict,
            floor=floor,
            r_recur=r_recur,
            stable_target=stable_target,
            min_step=min_step,
            within_tolerance=within_tolerance,
            unmeasured=unmeasured,
            go=go,
        )

    def scale_in(self, s: _Search, gate: _ScaleInGate) -> _Choice:
        """Scale-in path: to the stabilised target, under the running batching."""
        spec, R = self.spec, self.state.replicas
        target = gate.stable_target
        chosen = fewest_replicas(s.prob, s.cur_d, s.cur_k)
        self.scale_in_why = (
            f"scale in {R}→{target} after {spec.replicas.scale_down_stabilization_seconds} s "
            f"stabilisation (max recommendation in window {gate.window_max}, dead-band needs {gate.r_strict})"
            + (
                f"; {gate.floor - 1} were too few at {self.model.floor_rate_per_s:.0f}/s"
                if self.floor_on
                else ""
            )
            + (self.hold_note(gate.r_recur) if gate.r_recur >= target else "")
        )
        self.reasons.append(self.scale_in_why)
        return _Choice(target, chosen, s.cur_d, s.cur_k, emergency=False)

    def hold_or_scale_out(
        self, s: _Search, g: _Guarded, f: _Forced, gate: _ScaleInGate, lam_plan: float
    ) -> _Choice:
        """Hold or scale out: pick the batching (a change only when worth it and allowed), cut the queue
        delay in a breach, then the replicas the plan and the guard ask for, never fewer than running."""
        R = self.state.replicas
        chosen = self.pick_setting(s, f, gate)
        d, k = chosen.max_queue_delay_us, chosen.instance_count
        emergency = False
        cut_ok = (
            f.since_change_s >= self.guard_cooldown_s() and self.ready >= R
        )  # not while capacity is pending
        if g.breach and self.delay_matters(s.cur_d, self.sig.p99_ms) and cut_ok:
            # Emergency: cut the delay in proportion to the breach, regardless of the rate limit.
            cut = _clamp(math.floor(s.cur_d / g.ratio**2), self.d_lo, s.cur_d)
            cut = max([x for x in s.delays if x <= cut], default=self.d_lo)
            if cut < d:
                d, emergency = cut, cut < s.cur_d
        raw = self.raw_replicas(s, g, chosen, d, k, lam_plan)
        if raw < R:
            self.note_scale_in_deferred(g, f, gate)
        return _Choice(max(R, raw), chosen, d, k, emergency)

    def pick_setting(self, s: _Search, f: _Forced, gate: _ScaleInGate) -> Candidate:
        """The batching setting to run: the running one unless another is better and may be adopted now."""
        R = self.state.replicas
        cand_cur, cand_best = s.cand_cur, f.best
        if cand_cur.feasible and cand_cur.replicas <= R:
            better = self.saving_worth_a_reload(s, cand_best, gate)
        else:
            # An infeasible running setting is left for a feasible one even at more replicas: the
            # running setting's "fewest" is then only where its p99 stops improving.
            better = (
                f.rollback
                or (cand_best.feasible and not cand_cur.feasible)
                or (
                    cand_best.feasible
                    and self.worth_a_reload(cand_cur.replicas - cand_best.replicas, cand_cur.replicas)
                )
                or (
                    not cand_cur.feasible
                    and not cand_best.feasible
                    and cand_best.p99_ms < 0.9 * cand_cur.p99_ms
                )
            )
        if better and (f.change_allowed or f.forced):
            return cand_best
        if better:
            self.reasons.append(
                f"batching change deferred: last change {f.since_change_s:.0f} s ago < "
                f"{self.spec.batching.min_seconds_between_changes} s minimum"
            )
        return cand_cur

    def saving_worth_a_reload(self, s: _Search, best: Candidate, gate: _ScaleInGate) -> bool:
        """The running batching copes: change it only for a saving that survives the dead-band.

        The strict search needs at least as many replicas as the normal one: skipped when even the normal
        one saves nothing. The saving must be one the scale-in tolerance lets through (a reload that buys
        replicas the pool will not release only moves it along the cliff), and it is the setting's own
        (what the running setting needs under the same dead-band, capped at R), not the fleet's surplus,
        which a scale-in reclaims without a reload.
        """
        R, r_strict = self.state.replicas, gate.r_strict
        if best.replicas >= min(R, r_strict):
            return False
        best_strict = cheapest(gate.strict, s.delays, s.insts, (s.cur_d, s.cur_k))
        base = min(R, r_strict)
        better = (
            best_strict.feasible
            and best_strict.replicas < base
            and self.worth_a_reload(base - best_strict.replicas, base)
        )
        if better and r_strict < R - gate.min_step:
            # The fleet holds a surplus the running setting releases without a reload: take that first
            # (after the stabilisation window), and weigh a reload at the size the pool then has — a
            # reload's saving is a prediction, its risk is immediate.
            self.reasons.append(
                f"batching change for a saving deferred: {R} replicas hold a surplus the running "
                f"setting releases without a reload (it needs {r_strict})"
            )
            return False
        return better

    def raw_replicas(
        self, s: _Search, g: _Guarded, chosen: Candidate, d: int, k: int, lam_plan: float
    ) -> int:
        """Replicas the plan and the guard ask for at (d, k), before the floor of the running count."""
        R = self.state.replicas
        raw = max(chosen.replicas, 0 if g.bound else g.r_guard)
        if not chosen.feasible and raw > R and self.execution_bound(d, k):
            # Infeasible at any fleet size and the fleet does not queue: replicas only for capacity
            # (the utilisation cap), none for the objective they cannot reach.
            raw = min(raw, max(R, self.capacity_replicas(lam_plan, d, k)))
        if raw > R and g.r_guard <= R and not g.lost and self.ready >= R and (d, k) == (s.cur_d, s.cur_k):
            # A scale-out for the utilisation cap alone (the p99 meets the objective) waits until
            # the cap is exceeded by the tolerance: the cap is an extrapolation to full batches.
            p_now, u_now = self.predict(R, d, k, lam_plan)
            cap = self.spec.slo.target_gpu_utilization
            if p_now <= self.objective_ms and u_now <= cap * (1.0 + self.p.scale_in_tolerance):
                self.reasons.append(
                    f"scale out deferred: capacity utilisation {u_now:.2f} is within "
                    f"{self.p.scale_in_tolerance:.0%} of the {cap:.2f} target and p99 meets the objective"
                )
                raw = R
        return raw

    def note_scale_in_deferred(self, g: _Guarded, f: _Forced, gate: _ScaleInGate) -> None:
        """Say why the plan's fewer replicas are not taken this tick (nothing to say in a breach)."""
        spec, R = self.spec, self.state.replicas
        stab_s = spec.replicas.scale_down_stabilization_seconds
        if g.lost or (g.breach and not g.bound):
            return
        if not gate.covered:
            self.reasons.append(f"scale in deferred: less than {stab_s} s of recommendations recorded")
        elif f.forced:
            self.reasons.append("scale in deferred: batching changes this tick")
        elif gate.unmeasured:
            self.reasons.append(
                f"scale in deferred: batching changed {f.since_change_s:.0f} s ago, not yet measured"
            )
        elif gate.within_tolerance and gate.window_max < R and gate.r_strict < R:
            self.reasons.append(
                f"scale in deferred: {R}→{gate.stable_target} is within the "
                f"{self.p.scale_in_tolerance:.0%} scale-in tolerance (at least {gate.min_step} fewer)"
            )
        else:
            self.reasons.append(
                f"scale in deferred: stabilisation window (max recommendation "
                f"{gate.window_max}, dead-band needs {gate.r_strict})"
                + (
                    f"; {gate.floor - 1} replicas were too few at {self.model.floor_rate_per_s:.0f}/s"
                    if self.floor_on and gate.floor >= R
                    else ""
                )
                + (self.hold_note(gate.r_recur) if gate.r_recur >= R else "")
            )

    # -- node pricing ---------------------------------------------------------------------------------
    def price_nodes(
        self, s: _Search, g: _Guarded, f: _Forced, gate: _ScaleInGate, c: _Choice, fc: DemandForecast
    ) -> tuple[int, int, int]:
        """(replicas, planned replicas, replicas ahead): clamp to the spec, size the node demand for the
        node envelope (what can arrive within the node lead), then price whole nodes (`use_paid_nodes`)."""
        spec, state, R = self.spec, self.state, self.state.replicas
        target = c.target
        if target > self.r_hi or target < self.r_lo:
            self.reasons.append(f"replicas clamped to spec bounds [{self.r_lo}, {self.r_hi}]")
        target = _clamp(target, self.r_lo, self.r_hi)
        lam_ahead = fc.nodes_per_s
        ahead = fewest_replicas(self.problem(lam_ahead, self.objective_ms), c.d, c.k)
        r_ahead = ahead.replicas
        if not ahead.feasible and self.execution_bound(c.d, c.k):
            r_ahead = self.capacity_replicas(
                lam_ahead, c.d, c.k
            )  # no node bought for an unreachable objective
        r_ahead = _clamp(max(r_ahead, target), self.r_lo, self.r_hi)
        if self.paid_replicas is None or g.r_guard > R or g.lost:
            return target, target, r_ahead
        # A release moves replicas down: only under the running batching, never with a breach,
        # and only once the fleet has held still for the scale-down stabilisation window.
        can_release = (
            not g.breach
            and not f.forced
            and gate.covered
            and (c.d, c.k) == (s.cur_d, s.cur_k)
            and not gate.unmeasured
            and self.ready >= R
            and _since(self.now, state.last_scale_change_s) >= spec.replicas.scale_down_stabilization_seconds
        )
        return self.use_paid_nodes(
            target,
            r_ahead,
            c.d,
            c.k,
            fc.replicas_per_s,
            lam_ahead,
            can_release=can_release,
            breach=g.breach and not g.bound,
        )

    # -- act and explain ------------------------------------------------------------------------------
    def next_batching(
        self, s: _Search, f: _Forced, gate: _ScaleInGate, c: _Choice
    ) -> tuple[BatchingConfig, bool]:
        """The batching config to run after this tick, and whether it differs from the running one."""
        state = self.state
        timeout = self.timeout_us(c.d, frozen=gate.go or not (f.change_allowed or f.forced))
        new = BatchingConfig(
            max_queue_delay_us=c.d,
            max_batch_size=self.max_batch,
            preferred_batch_sizes=f.preferred,
            instance_count=c.k,
            queue_timeout_us=timeout,
            max_queue_size=self.spec.batching.queue_policy.max_queue_size,
        )
        if s.held and not c.emergency and state.batching is not None:
            new = state.batching
        changed = state.batching is None or _normal(new) != _normal(state.batching)
        if changed and gate.go:  # by construction impossible; keep the invariant explicit
            raise AssertionError("policy bug: batching change and scale-in in one tick")
        if changed and f.bits:
            self.reasons.append(f"batching reset: {', '.join(f.bits)}")
        if f.dropped:
            self.reasons.append(
                f"preferred batch sizes {list(f.dropped)} dropped: above max batch size {self.max_batch}"
            )
        return new, changed

    def explain(
        self,
        s: _Search,
        g: _Guarded,
        c: _Choice,
        target: int,
        changed: bool,
        *,
        p99_pred: float,
        util_pred: float,
        lam_plan: float,
    ) -> None:
        """Explain stage: the headline reason first, then the batching move, steady state and model."""
        spec, R, measured = self.spec, self.state.replicas, self.sig.p99_ms
        if g.breach and not (g.bound and target < R):
            parts = []
            if c.emergency:
                parts.append(f"cut queue delay {s.cur_d}→{c.d} µs")
            if target > R:
                parts.append(f"scale {R}→{target}")
            if self.floor_note and target <= R:
                parts.append(self.floor_note)
            action = " and ".join(parts) if parts else "hold (scale-up in progress)"
            self.reasons.insert(0, f"p99 {measured:.0f} ms > {self.target_ms:.0f} ms objective: {action}")
        elif target < R and self.scale_in_why:
            # The headline (what an Event shows) is why replicas come down, not a note made on the way,
            # and it names the move made (filling paid nodes may have kept more than the stage chose).
            self.reasons.remove(self.scale_in_why)
            head = self.scale_in_why
            if not head.startswith((f"scale in {R}→{target} ", "release a node")):
                head = f"scale in {R}→{target}: {head}"
            self.reasons.insert(0, head)
        elif target > R:
            self.reasons.insert(
                0,
                f"scale out {R}→{target}: predicted p99 {p99_pred:.0f} ms ≤ {self.objective_ms:.0f} ms "
                f"({self.target_ms:.0f} ms − {spec.slo.margin_ratio:.0%} margin) at {lam_plan:.0f}/s",
            )
        if c.chosen.modelled_replicas is not None:
            self.reasons.append(
                f"measured: {c.chosen.replicas} replicas meet the objective at {lam_plan:.0f}/s and "
                f"{self.p.scale_in_demand_headroom:.0%} more — the pool met it at as much load per replica "
                f"(the model alone asks for {c.chosen.modelled_replicas})"
            )
        running = self.running
        if changed and not c.emergency and (c.d, c.k) != (s.cur_d, s.cur_k):
            saved = s.cand_cur.replicas - c.chosen.replicas
            moves = []
            if c.d != running.max_queue_delay_us:
                moves.append(f"queue delay {running.max_queue_delay_us}→{c.d} µs")
            if c.k != running.instance_count:
                moves.append(f"instances {running.instance_count}→{c.k}")
            self.reasons.append(
                f"batching: {', '.join(moves)}"
                + (f" saves {saved} replica{'s' if saved != 1 else ''}" if saved > 0 else "")
            )
        if target == R and not changed:
            # Where no replica count within the bounds meets the objective, the reasons above say why.
            verb, what = ("meet", "the objective") if c.chosen.feasible else ("stay", "(see above)")
            meet = f"{verb}{'s' if R == 1 else ''} {what}"
            self.reasons.append(
                f"steady: {R} replica{'s' if R != 1 else ''} {meet} "
                f"(predicted p99 {p99_pred:.0f} ms, "
                f"measured {measured:.0f} ms, target {self.target_ms:.0f} ms)"
            )
        self.reasons.append(
            f"model: batch latency {self.model.a_ms:.1f} + {self.model.b_ms:.2f}·batch ms, "
            f"correction ×{self.model.correction:.2f} {self.model.offset_ms:+.0f} ms, "
            f"{self.items:.1f} inferences/request, "
            f"{c.k} instance{'s' if c.k != 1 else ''}, delay {c.d} µs, utilisation {util_pred:.2f}"
        )

    def actions(self, target: int, changed: bool) -> tuple[PolicyAction, ...]:
        """What to apply: none in Recommend mode (said as the first reason)."""
        actions: list[PolicyAction] = []
        if target != self.state.replicas:
            actions.append("scale")
        if changed:
            actions.append("batching")
        if self.spec.mode == Mode.RECOMMEND:
            if actions:
                self.reasons.insert(0, f"Recommend mode: would {' and '.join(actions)}; nothing applied")
            return ()
        return tuple(actions)

    def remember_floor(self, planned: int, floor: int, actions: tuple[PolicyAction, ...]) -> None:
        """Record the measured floor: the replicas that served the whole window were MEASURED too few.

        A prediction that they would be is not evidence: a fresh model's first guess would pin the pool
        above its need for as long as the load stays. It is about the ready ones: pods still waiting for a
        node served nothing (found in the suite: 8 ready of 16 breached at 1,105/s, nothing was recorded,
        and a scale-in to 8 ten minutes later breached again). Re-measured at the same count: the rate is
        the latest, the p99 the worst while the floor stands (a milder miss later must not erase one of
        the target itself: found in the suite, 8 ready missed 330 ms by up to 48 ms, a later 3 ms miss of
        the margin overwrote it, and the node that was to relieve them was released as it arrived).
        """
        measured = self.sig.p99_ms
        # Not evidence: a reading on too few requests, a miss no replica count removes, or a measured
        # backlog (its p99 says how long the queue was, not what these replicas do at this load, as in
        # `measure` — which also skips an unmeasured queue; here that is no backlog, the floor being the
        # safe side). The count is checked itself: `p99_sampled` waives it for a queue over the target.
        backlog = _finite(self.sig.queue_time_us) and self.queue_above(1.0)
        sampled = self.p99_counted() and not self.breach_bound and not backlog
        measured_short = _finite(measured) and measured > self.objective_ms and sampled
        serving = min(self.state.replicas, self.ready)
        if planned > serving > 0 and measured_short and self.capacity_steady():
            if not self.floor_held or serving + 1 >= floor:
                worst = self.model.floor_p99_ms if self.floor_held and serving + 1 == floor else -math.inf
                self.model = replace(
                    self.model,
                    floor_replicas=serving + 1,
                    floor_rate_per_s=self.lam,
                    floor_p99_ms=max(measured, worst),
                )
        elif floor > 0 and (not self.floor_held or "batching" in actions):
            # The evidence was about the running batching: a new setting starts without it.
            self.model = replace(
                self.model, floor_replicas=0, floor_rate_per_s=math.nan, floor_p99_ms=math.nan
            )

    def confirm_ahead(self, r_ahead: int, planned: int, g: _Guarded) -> int:
        """A node bought on the forecast alone must be asked for two ticks running: a trend that flickers
        across its threshold would otherwise order and cancel a node every other tick."""
        prev = self.state.history[-1] if self.state.history else None
        if (
            r_ahead > planned
            and prev is not None
            and prev.replicas_ahead > 0
            and self.now - prev.time_s <= 2.5 * self.spec.tick_seconds
            and not (g.breach and not g.bound)
            and not g.lost
        ):
            return max(planned, min(r_ahead, prev.replicas_ahead))
        return r_ahead

    # -- helpers --------------------------------------------------------------------------------------
    def use_paid_nodes(
        self,
        target: int,
        r_ahead: int,
        d: int,
        k: int,
        lam_plan: float,
        lam_ahead: float,
        *,
        can_release: bool,
        breach: bool,
    ) -> tuple[int, int, int]:
        """(replicas, planned replicas, replicas ahead) once node granularity is priced in.

        Nodes are bought whole: the margin below the target is worth a free GPU on a node already
        paid for, not a new node. So (1) a plan that would open a node only to meet the objective
        (target − margin) stays on the paid nodes when they meet the target itself, and (2) the
        replicas fill the nodes the plan holds anyway (idle paid GPUs buy latency for nothing). The
        node demand follows the plan, never the fill, so the node pool still shrinks: (3) a node held
        only for the margin is released when the target is met without it at the scale-in dead-band
        (10 % more demand, the peak correction). (4) Otherwise pricing never takes replicas below the
        running count, nor their node demand: replicas come down through the scale-in gate (the
        stabilisation window, the dead-band) or a release, not on one tick's prices (found live: a 9→8
        "hold" in a breach because the model said 8 would do; the guard's 4→9 lost its node when the
        next tick saw one paid node before the node pool had read the demand, 5 pods pending).
        """
        assert self.paid_replicas is not None
        paid = _clamp(self.paid_replicas, self.r_lo, self.r_hi)
        gpr = self.spec.node_pool.gpus_per_replica if self.spec.node_pool else 1
        gpn = self.node_pool.gpus_per_node if self.node_pool else gpr
        per_node = max(1, gpn // gpr)
        # The part of the margin that whole nodes are bought for; the rest is bought with free GPUs.
        node_ms = self.target_ms * (1.0 - self.spec.slo.margin_ratio * self.p.node_margin_share)
        # Releasing a node is checked against a stricter level than buying one (hysteresis in nodes).
        release_ms = self.target_ms * (
            1.0 - self.spec.slo.margin_ratio * max(self.p.node_release_margin_share, self.p.node_margin_share)
        )
        planned = target
        # What the scale-in stages left: the target if they chose one below the running count, else that.
        keep = min(target, self.state.replicas)
        if max(planned, r_ahead) > paid:
            # Whether the paid nodes meet the target is read off the pool's measurements at the demand
            # itself: the evidence headroom is the scale-in dead-band (demand a capacity given back must
            # still serve), and the envelope carries any measured rise. Not in a breach the replicas can
            # remove: the window in hand says the paid replicas miss, whatever an older point says.
            head = self.p.scale_in_demand_headroom if breach else 0.0
            now_ok = fewest_replicas(replace(self.problem(lam_plan, node_ms), evidence_headroom=head), d, k)
            ahead_ok = fewest_replicas(
                replace(self.problem(lam_ahead, node_ms), evidence_headroom=head), d, k
            )
            if now_ok.feasible and ahead_ok.feasible and max(now_ok.replicas, ahead_ok.replicas) <= paid:
                if keep > paid:
                    self.reasons.append(
                        f"no node opened for the margin, none taken from the {keep} replicas asked: "
                        "replicas come down through the scale-in gate, so their node demand stays"
                    )
                else:
                    self.reasons.append(
                        f"margin without a new node: {paid} replicas on the paid nodes meet "
                        f"{node_ms:.0f} ms (the {self.objective_ms:.0f} ms objective would "
                        f"need {max(planned, r_ahead)})"
                    )
                planned = max(min(planned, paid), keep)
                r_ahead = min(r_ahead, planned)
        fewer = paid - per_node
        if can_release and fewer >= self.r_lo and max(planned, r_ahead) > fewer:
            head = 1.0 + self.p.scale_in_demand_headroom
            # A released node takes its lead time to come back: the fewer replicas must also have
            # served the busiest demand seen over that long (minute-to-minute swings outrun 10 %),
            # and a level demand has come back to after troughs as long as this one (`remember_level`).
            strict = [
                fewest_replicas(self.strict_problem(lam * head, release_ms), d, k)
                for lam in (lam_plan, lam_ahead, self.fc.recent_peak_per_s, self.hold_rate)
                if math.isfinite(lam)
            ]
            m = self.model
            # Evidence against the release only if it missed the level a release is checked against.
            measured_too_few = self.floor_on and fewer < m.floor_replicas and m.floor_p99_ms > release_ms
            if measured_too_few:
                self.reasons.append(
                    f"node kept: {m.floor_replicas - 1} replicas were measured too few at "
                    f"{m.floor_rate_per_s:.0f}/s (p99 {m.floor_p99_ms:.0f} ms > {release_ms:.0f} ms), "
                    "and demand reached that within the node lead"
                )
            elif all(c.feasible and c.replicas <= fewer for c in strict):
                self.scale_in_why = (
                    f"release a node: {fewer} replicas meet {release_ms:.0f} ms at "
                    f"{head - 1:.0%} more demand (the objective alone held {max(planned, r_ahead)})"
                )
                self.reasons.append(self.scale_in_why)
                planned = min(planned, fewer)
                r_ahead = min(r_ahead, fewer)
        fill = min(paid, per_node * math.ceil(max(planned, r_ahead) / per_node))
        if fill > planned:
            self.reasons.append(
                f"fill paid nodes: {fill} replicas on GPUs already paid for (the plan needs {planned})"
            )
        return max(planned, fill), planned, r_ahead

    def remember_level(self) -> None:
        """Recurrence stage: update the level memory; hold capacity for it through a trough that is no
        longer than the longest gap after which demand has come back (`demand.recurrence`).

        A gap counts once it outlasts the scale-down window (the capacity was given back) or the node
        reaction time (a return waits no longer than that), whichever is shorter, and at least a tick
        (a window of 0 would read two ticks in a row at the level as a return)."""
        m = self.model
        window_s = float(self.spec.replicas.scale_down_stabilization_seconds)
        min_gap_s = max(float(self.spec.tick_seconds), min(window_s, self.node_lead_s()))
        mem, learnt_gap_s = recurrence(
            self.levels(),
            self.lam,
            self.now,
            min_gap_s=min_gap_s,
            headroom=self.p.scale_in_demand_headroom,
            max_hold_s=self.p.recurrence_max_hold_s,
            hold_factor=self.p.recurrence_hold_factor,
        )
        self.model = replace(
            m, burst_rate_per_s=mem.rate_per_s, burst_seen_s=mem.seen_s, burst_hold_s=mem.hold_s
        )
        self.recur = mem
        if learnt_gap_s > 0:
            self.reasons.append(
                f"demand back at {mem.rate_per_s:.0f}/s after {learnt_gap_s:.0f} s below it: capacity "
                "for it is now held through troughs that long"
            )
        if mem.holds_above(self.lam, self.now, self.p.scale_in_demand_headroom):
            self.hold_rate = mem.rate_per_s

    def hold_note(self, replicas: int) -> str:
        """The reason text of a scale-in the recurrence hold limits."""
        if replicas <= 0:
            return ""
        return (
            f"; {replicas} held for {self.hold_rate:.0f}/s, which demand has come back to after "
            f"troughs this long (another {self.recur.hold_left_s(self.now):.0f} s)"
        )

    def floor_holds(self) -> bool:
        """Whether the measured floor (`LatencyModel.floor_replicas`) still holds.

        It holds while the busiest demand recorded within the node reaction time (what capacity given
        back takes to return) comes within the scale-in headroom of the rate it was measured at: a dip
        of one tick below that rate is not evidence that fewer replicas would do. (An execution-bound
        breach suspends it without erasing it: `scale_in_gate`.)
        """
        m = self.model
        if m.floor_replicas <= 0 or not _finite(m.floor_rate_per_s):
            return False
        busiest = max(self.fc.replicas_per_s, self.fc.recent_peak_per_s)
        return busiest >= m.floor_rate_per_s * (1.0 - self.p.scale_in_demand_headroom)

    def guard(self, d: int, k: int, lam: float) -> tuple[bool, float, int]:
        """Guard stage: (breach, measured/target, replicas the measured breach asks for; 0 = none).

        A breach scales out in proportion to it (at most `guard_max_step_ratio` per tick, one step per
        `guard_cooldown_s`), but only when more replicas lower the p99: not when the breach is
        execution-bound (`execution_bound`), nor when the corrected model gains under 5 % from at least
        twice the ready replicas (a batcher that never idles gains little per replica until the
        per-replica gap outlasts an execution, then a lot: docs/policy.md) unless the measured mean
        queue alone exceeds the target: a queue is what replicas shorten, whatever the model says.
        """
        p, R, measured = self.p, self.state.replicas, self.sig.p99_ms
        over = _finite(measured) and measured > self.target_ms
        breach = over and self.p99_sampled()
        if over and not breach:
            self.reasons.append(self.unsampled_note(measured))
        self.floor_note = ""
        self.breach_bound = False
        if not breach:
            return False, 1.0, 0
        ratio = measured / self.target_ms
        step = math.ceil(max(self.ready, 1) * min(ratio, p.guard_max_step_ratio))
        step = min(max(step, self.ready + 1), self.r_hi)
        probe = max(step, min(2 * max(self.ready, 1), self.r_hi))
        p_now, _ = self.predict(max(self.ready, 1), d, k, lam)
        p_more, _ = self.predict(probe, d, k, lam)
        bound = self.execution_bound(d, k)
        if bound:
            self.floor_note = f"more replicas would not help ({bound})"
            self.breach_bound = True
            return True, ratio, R
        # The pool's own points, where none met the target, over the model's view of what replicas buy.
        by_line = self.measured_step(lam)
        if by_line is not None and by_line[0] <= max(R + 1, step):
            by_line = None  # the line asks for no more than the guard would: the model's rules stand
        if by_line is None and not self.queue_above(1.0) and math.isfinite(p_now) and p_more > 0.95 * p_now:
            self.floor_note = (
                f"more replicas would not help (predicted {p_now:.0f} ms now, {p_more:.0f} ms at {probe})"
            )
            return True, ratio, R
        if _since(self.now, self.state.last_scale_up_s) < self.guard_cooldown_s():
            return True, ratio, R
        if by_line is not None:
            step, why = by_line
            self.reasons.append(why)
        return True, ratio, max(R + 1 if self.ready >= R else R, step)

    def measured_step(self, lam: float) -> tuple[int, str] | None:
        """The guard step the pool's measured line asks for, with its reason (`plan.measured_line`; None:
        no line, or its answer lies further below the lightest load measured than one guard step).

        The line is trusted to half the lightest load per replica measured — as far as one guard step
        (`guard_max_step_ratio`) moves the pool — and no further: beyond its points a curve that flattens
        towards a floor (long requests' execution) reads as a line through a floor far below the real one
        (found on dev-018, an infeasible ramp: 166 ms read through 305 and 322 ms, where 233 ms was later
        measured at half the load; the extrapolation asked for 65, then 1,414 replicas)."""
        p = self.p
        line = measured_line(self.measured_curve(), self.target_ms, p)
        if line is None or not (math.isfinite(line.floor_ms) and line.slope_ms > 0):
            return None
        if line.floor_ms >= self.target_ms:
            return None
        trusted_per_s = line.lightest_per_s / p.guard_max_step_ratio
        if line.load_per_replica_at(self.target_ms) < trusted_per_s:
            return None
        need = min(
            line.replicas_for(lam, self.target_ms, self.objective_ms, p.min_gain_share),
            math.ceil(lam / trusted_per_s),
        )
        cap = min(self.r_hi, math.ceil(max(self.ready, 1) * p.guard_max_step_ratio))
        why = (
            f"measured: {need} replicas reach the target at {lam:.0f}/s on the line through the pool's two "
            f"lightest points ({line.floor_ms:.0f} ms + {line.slope_ms:.2f} ms per request/s per replica; "
            "none met it)" + (f": {cap} this step" if need > cap else "")
        )
        return min(need, cap), why

    def execution_bound(self, d: int, k: int) -> str:
        """Why the objective is out of reach at any fleet size, or "" when it may not be.

        Out of reach: the model's latency floor — the p99 of a replica with no load (infinitely many
        replicas), which does not depend on the demand, so neither does the verdict (more demand never
        yields fewer replicas) — is above the target, AND the pool's requests measurably spend little
        time queueing (mean queue ≤ `guard_queue_share` x target), so
        the latency is in execution — long requests no replica count shortens. The measured queue is
        the arbiter because a model that underestimates queueing learns the queue as an additive tail
        and would otherwise call a capacity problem infeasible.
        """
        floor, _ = self.predict(max(self.r_hi, 1), d, k, 0.0)
        if not (math.isfinite(floor) and floor > self.target_ms):
            return ""
        if self.queue_above(self.p.guard_queue_share):
            return ""
        queue_ms = self.queue_ms()
        return (
            f"objective infeasible at any fleet size: predicted p99 {floor:.0f} ms with no load at all, "
            f"{queue_ms:.0f} ms mean queue (execution "
            f"{self.model.a_ms + self.model.b_ms:.0f} ms at batch 1, {self.model.offset_ms:+.0f} ms measured "
            "tail more replicas do not remove)"
        )

    def queue_ms(self) -> float:
        """The pool's measured mean queue time (infinite when not measured: unknown is not small)."""
        queue_us = self.sig.queue_time_us
        return queue_us / 1000.0 if _finite(queue_us) else math.inf

    def queue_above(self, share: float) -> bool:
        """Whether the measured mean queue exceeds `share` x target: where requests queue, the model's
        verdict that more replicas would not help is not trusted (the execution-bound rule yields at
        `guard_queue_share`, the guard's 5 %-gain rule at the whole target)."""
        return self.queue_ms() > share * self.target_ms

    def capacity_replicas(self, lam: float, d: int, k: int) -> int:
        """Fewest replicas within the utilisation cap alone (the objective set aside)."""
        return fewest_replicas(self.problem(lam, math.inf), d, k).replicas

    def unreachable(self, chosen: Candidate, lam: float) -> str:
        """Explain an objective the plan cannot meet: at any fleet size, or only within replicas.max.

        The plan then holds the replicas where one more stops lowering the p99 (`fewest_replicas`), and
        the guard does not step out when the model says more replicas would not help: a class of
        requests whose execution alone exceeds the objective is not a capacity problem, and GPUs bought
        for it change nothing but the bill.
        """
        bound = self.execution_bound(chosen.max_queue_delay_us, chosen.instance_count)
        if bound:
            return f"{bound}: replicas for capacity only (utilisation cap), none bought for the objective"
        return (
            f"objective unreachable within replicas.max {self.r_hi}: predicted p99 "
            f"{chosen.p99_ms:.0f} ms at {chosen.replicas} replicas"
        )

    def worth_a_reload(self, saved: int, replicas: int) -> bool:
        """Gate of a batching change made for a saving (not forced, not to leave an infeasible setting).

        Only on a model fitted to this pool's own executions: a prior far from its data once proposed,
        on the first tick of a 240-replica fleet, a second instance "saving 3 replicas" that cost the pool
        its objective for the rest of the run. And only for a saving the scale-in tolerance would let
        through: a reload for less buys replicas the pool will not release.
        """
        p = self.p
        if saved < max(1, math.ceil(p.scale_in_tolerance * replicas)):
            return False
        if self.model.samples < p.min_fit_samples:
            self.reasons.append(
                f"batching change for a saving of {saved} replica{'s' if saved != 1 else ''} waits for the "
                f"pool's own data ({self.model.samples}/{p.min_fit_samples} observations; the prior alone "
                "is not trusted to reload every pod)"
            )
            return False
        return True

    def running_key(self) -> tuple[int, int]:
        return (self.running.max_queue_delay_us, self.running.instance_count)

    def held_after_failure(self) -> bool:
        """A rollout failed and was rolled back within the rate limit: no batching change, not even one the
        spec bounds force (found on the sandbox: a reset one pod could not load was retried every tick)."""
        since = _since(self.now, self.state.last_batching_failure_s)
        return self.state.batching is not None and since < self.spec.batching.min_seconds_between_changes

    @staticmethod
    def nearest_allowed(
        d: int, k: int, delays: Sequence[int], insts: Sequence[int], exclude: Sequence[tuple[int, int]]
    ) -> tuple[int, int]:
        """The (delay, instances) within bounds nearest to (d, k) that is not excluded; (d, k) if none is."""
        allowed = [(dd, kk) for kk in insts for dd in delays if (dd, kk) not in exclude]
        if not allowed:
            return d, k
        return min(allowed, key=lambda c: (abs(c[1] - k), abs(c[0] - d), c))

    def tabu(self, cand_cur: Candidate, cur_d: int, cur_k: int) -> tuple[tuple[int, int], ...]:
        """Settings not to propose now; records the running one when it failed soon after adoption."""
        m, p, state = self.model, self.p, self.state
        since = _since(self.now, state.last_batching_change_s)
        measured = self.sig.p99_ms
        missed = not cand_cur.feasible or (
            _finite(measured) and measured > self.objective_ms and self.p99_sampled()
        )
        live = [e for e in m.tabu if _finite(e[2]) and self.now < e[2]]
        if (
            state.batching is not None
            and self.settle_s() <= since <= p.tabu_after_change_s  # the p99 window describes this setting
            and missed
            and self.ready >= state.replicas
        ):
            if not any((d, k) == (cur_d, cur_k) for d, k, _ in live):
                self.reasons.append(
                    f"batching {cur_d} µs / {cur_k} instance{'s' if cur_k != 1 else ''} missed the objective "
                    f"{since:.0f} s after it was adopted: not proposed again for {p.tabu_s / 3600:.0f} h"
                )
            live = [e for e in live if (e[0], e[1]) != (cur_d, cur_k)]
            live.append((cur_d, cur_k, self.now + p.tabu_s))
        live = live[-p.tabu_max_entries :]
        if tuple(live) != m.tabu:
            self.model = replace(m, tabu=tuple(live))
        return tuple((d, k) for d, k, _ in live)

    def node_lead_s(self) -> float:
        """How long a node asked for now takes to serve: provisioning plus pod start."""
        prov_s = (
            float(self.node_pool.provisioning_seconds) if self.node_pool else self.p.default_provisioning_s
        )
        return prov_s + self.p.pod_start_s

    def forecast(self) -> DemandForecast:
        """Forecast stage: the replica and node envelopes (`poolpilot.policy.demand`), with a reason."""
        p = self.p
        fc = forecast_demand(
            self.lam,
            self.state.history,
            self.now,
            pod_reaction_s=p.pod_start_s + self.spec.tick_seconds,
            node_reaction_s=self.node_lead_s(),
            trend_window_s=p.forecast_window_s,
            min_rise_ratio=p.forecast_min_rise_ratio,
            max_rise_ratio=p.forecast_max_rise_ratio,
            measure_window_s=self.sig.rate_window_s,
            tick_s=float(self.spec.tick_seconds),
            lookback=p.envelope_lookback,
            levels=self.levels(),
            level_max_age_s=p.recurrence_max_hold_s,
        )
        self.fc = fc
        if fc.replicas_per_s > self.lam * 1.005:
            why = "rising" if fc.trend_per_s2 > 0 else "peaked within the pod start"
            self.reasons.append(
                f"demand {why}: sizing replicas for {fc.replicas_per_s:.0f}/s ({self.lam:.0f}/s now)"
            )
        if _finite(fc.trend_stopped_at_per_s):
            self.reasons.append(
                f"trend stopped at {fc.trend_stopped_at_per_s:.0f}/s, a level demand reached before this "
                f"rise (replicas sized for {fc.replicas_per_s:.0f}/s, nodes for {fc.nodes_per_s:.0f}/s)"
            )
        return fc

    def levels(self) -> Recurrence:
        """The recurrence memory (`demand.recurrence`) as the model persists it in status."""
        m = self.model
        return Recurrence(m.burst_rate_per_s, m.burst_seen_s, m.burst_hold_s)

    def predict(self, replicas: int, d: int, k: int, lam: float) -> tuple[float, float]:
        """The p99 and utilisation `replicas` give at (d, k) and demand `lam` (`plan.predict`)."""
        if replicas <= 0:
            return math.nan, 0.0
        return predict(self.problem(lam, self.objective_ms), replicas, d, k)

    def estimate_running(self, model: LatencyModel) -> Estimate:
        """The model's view of the running configuration at the load the window's requests saw."""
        return estimate(
            model,
            rate_per_s=self.lam / max(self.ready, 1),
            max_queue_delay_us=self.running.max_queue_delay_us,
            instance_count=self.running.instance_count,
            max_batch_size=self.running.max_batch_size,
            quantile=self.spec.slo.latency_quantile,
            items_per_request=self.items,
            params=self.p,
            replicas=max(self.ready, 1),
        )

    def delay_matters(self, delay_us: int, measured_ms: float) -> bool:
        """Whether the queue delay is a real share of the p99 (cutting 250 µs off 200 ms helps nobody)."""
        return delay_us / 1000.0 >= self.p.guard_min_delay_share * measured_ms

    def preferred(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Spec's preferred sizes that fit under max batch (Triton rejects larger ones)."""
        sizes = sorted(set(self.spec.batching.preferred_batch_sizes or ()))
        keep = tuple(s for s in sizes if s <= self.max_batch)
        dropped = tuple(s for s in sizes if s > self.max_batch)
        return keep, dropped

    def timeout_against_spec(self) -> bool:
        """Whether the running queue timeout is one the spec does not allow (a fixed one differs, or one is
        set while `shedding` is Off): the pods must not keep rejecting requests the spec wants served."""
        queue, running = self.spec.batching.queue_policy, self.running.queue_timeout_us
        if queue.timeout_microseconds is not None:
            return (running or None) != (queue.timeout_microseconds or None)  # 0 = no timeout in Triton
        return running is not None and queue.shedding is not Shedding.HOPELESS

    def timeout_us(self, d: int, *, frozen: bool) -> int | None:
        """Spec's timeout if set; with `shedding: Hopeless` and stragglers, the wait after which a request
        misses the objective; otherwise none (a request the spec did not allow to shed is never shed)."""
        queue = self.spec.batching.queue_policy
        if queue.timeout_microseconds is not None:
            return queue.timeout_microseconds or None  # 0 = no timeout in Triton
        current = self.running.queue_timeout_us
        if frozen:
            return current  # no batching change this tick (a removal is forced: `run`)
        if queue.shedding is not Shedding.HOPELESS:
            return None
        if current is not None or not self.straggler:
            return current  # sticky: removing it would be one more reload for no gain
        # Only hopeless requests: one that has queued longer than the objective minus the fastest
        # execution misses it whatever happens next, so rejecting it loses nothing and frees its slot.
        budget_ms = self.target_ms - (self.model.a_ms + self.model.b_ms)
        value = max(int(budget_ms * 1000), d + 1000)
        self.reasons.append(f"queue timeout {value} µs so one long request cannot stall the queue")
        return value

    def history(self, need: int, replicas_ahead: int) -> tuple[HistoryEntry, ...]:
        p, spec = self.p, self.spec
        keep_s = (
            max(spec.replicas.scale_down_stabilization_seconds, p.forecast_window_s, self.node_lead_s())
            + 4 * spec.tick_seconds
        )
        kept = [e for e in self.state.history if e.time_s >= self.now - keep_s and e.time_s < self.now]
        kept.append(
            HistoryEntry(
                time_s=self.now,
                replicas=need,
                rate_per_s=self.lam,
                replicas_ahead=replicas_ahead,
                ready=self.ready,
            )
        )
        return tuple(kept[-p.history_max_entries :])
