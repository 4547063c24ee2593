"""Tunables of the policy that are not part of a pool's spec (engineering constants, one place).

Everything here has a default that works for the A100 curve of the design notes; callers (the operator,
the simulator) pass a different `PolicyParams` only to study the policy, never per pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from poolpilot.gpucurve import DEFAULT_A_MS, DEFAULT_B_MS


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """Constants of the latency model, the guards and the stabilisation (see docs/policy.md)."""

    # Prior batch-latency curve (ms = a + b·batch), used until the pool's own data says otherwise.
    # The spec has no field for it yet; these are the A100 figures of the design notes.
    prior_a_ms: float = DEFAULT_A_MS
    prior_b_ms: float = DEFAULT_B_MS
    # Weights of the prior (ridge penalties). The intercept is nearly free, the slope is held: a pool
    # seen at one batch size moves the line's level through its data and keeps the prior slope until
    # its batch sizes spread (data slope weight = Σw·var(batch); 1000 ≈ 10 observations ±10 items).
    prior_intercept_weight: float = 0.01
    prior_slope_weight: float = 1000.0
    # Per-observation decay of the regression sums: 0.99 ≈ a memory of 100 ticks (25 min at 15 s).
    fit_decay: float = 0.99
    # Slowdown of one execution per extra concurrent instance on the same GPU (0 = independent
    # executions, Triton's model of instances; the fitted compute time reveals real contention).
    instance_slowdown: float = 0.8
    # How requests reach replicas: "round_robin" (Envoy/Gateway default, IPVS rr; each replica sees
    # smoothed arrivals) or "random" (kube-proxy iptables: each replica sees Poisson arrivals).
    router: Literal["round_robin", "random"] = "round_robin"
    # How a single instance's queue wait is estimated: "renewal" (the wait behind the previous
    # request's execution, from the interarrival law the router gives; see model._wait_one_instance)
    # or "erlang" (the earlier M/M/1-style busy probability scaled by the arrivals' CV²).
    wait_model: Literal["renewal", "erlang"] = "renewal"

    # Measured/predicted p99 correction: log-space EWMA weight and clamp.
    correction_alpha: float = 0.3
    # "additive": measured − predicted p99 is added to every prediction (default; the unmodelled tail is
    # a straggler floor that more replicas do not remove); "multiplicative": measured / predicted scales it.
    correction_mode: Literal["additive", "multiplicative"] = "additive"
    correction_min: float = 0.7
    correction_max: float = 3.0
    # Time constant of the decay of the peak correction used for scale-in checks.
    correction_peak_decay_s: float = 1800.0
    # The peak snaps to the correction once within this share of it (a decay that ends).
    correction_peak_snap: float = 0.01
    # The model is corrected only when the measurement describes the running config: no scale or
    # batching change for this long and every replica ready (Prometheus windows are ~60 s).
    settle_s: float = 75.0
    # Fewest requests in the p99 window for the quantile to mean anything (rate x 60 s).
    min_requests_for_p99: float = 100.0

    # Signals older than this many ticks are stale → hold.
    stale_after_ticks: float = 3.0

    # Candidate queue delays (µs), intersected with the spec's bounds (which are always candidates).
    delay_grid_us: tuple[int, ...] = (0, 1_000, 2_000, 5_000, 10_000, 20_000, 35_000, 50_000)
    max_instance_candidates: int = 8

    # Scale-in must also meet the objective at this much more demand (dead-band against flapping).
    scale_in_demand_headroom: float = 0.10
    # A scale-in removes at least this share of the replicas (at least one), or waits: HPA's 10 %
    # tolerance, applied on the way down only (a scale-out protects the objective and is never held).
    scale_in_tolerance: float = 0.10
    # Nodes come whole: a node is opened (or kept) only to meet target x (1 - margin x this share);
    # the rest of the margin is bought with GPUs on nodes already paid for (see `use_paid_nodes`).
    node_margin_share: float = 0.0
    # ... and a node is released only when one node fewer meets target x (1 - margin x this share)
    # (at least `node_margin_share`), at 10 % more demand with the peak correction.
    node_release_margin_share: float = 0.0
    # The feedback guard scales out at most this factor per tick, and waits this long after a
    # scale-up before scaling out again on the (lagging) measured p99.
    guard_max_step_ratio: float = 2.0
    # (90 s > settle_s: the model learns from one settled tick between two guard steps.)
    guard_cooldown_s: float = 90.0
    guard_queue_share: float = 0.1
    """A breach counts as execution-bound (no scale-out, "infeasible at any fleet size") only when the
    measured mean queue time is at most this share of the target: the latency is then in execution,
    which replicas do not shorten. Above it, the queue is evidence of a capacity problem whatever the
    model says (a model that underestimates queueing learns the queue as an additive tail)."""
    # An emergency delay cut only when the delay is at least this share of the measured p99.
    guard_min_delay_share: float = 0.02

    # Capacity counts as lost when ready < replicas this long after the last scale change.
    lost_capacity_grace_s: float = 180.0
    # Pod start + model load: how far ahead replicas are sized when demand rises.
    pod_start_s: float = 60.0
    # Node lead time when no GPUNodePoolSpec is given.
    default_provisioning_s: float = 300.0
    # Demand trend is fitted over this window of history, and used only when the fitted rise over
    # the window is at least this share of the current demand (ripple is not a trend).
    forecast_window_s: float = 300.0
    forecast_min_rise_ratio: float = 0.10
    # A forecast never adds more than this share of the current demand (see `_Tick.forecast`).
    forecast_max_rise_ratio: float = 0.10
    min_fit_samples: int = 4
    """Settled observations of the pool's own executions before a batching change is made for a saving.

    4 ≈ one minute of 15 s ticks after the settle time. Before that the latency line is the prior,
    which can be far from the pool (a different GPU, model or token mix); a reload proposed on it alone
    once cost a 240-replica fleet its objective for good. Forced changes, leaving a setting the model
    deems infeasible, and rollbacks are not gated.
    """
    # A batching setting that misses the objective within `tabu_after_change_s` of being adopted is
    # not proposed again for `tabu_s` (its prediction was wrong; trying it every hour is a limit cycle).
    tabu_after_change_s: float = 900.0
    tabu_s: float = 6 * 3600.0
    tabu_max_entries: int = 4
    # History bound (entries); the window needs stabilisation/tick + a few.
    history_max_entries: int = 256

    # Straggler signal: smoothed measured/model p99 at or above this while the mean execution time
    # matches the model (within `straggler_mean_tolerance`).
    straggler_ratio: float = 1.6
    straggler_alpha: float = 0.3
    straggler_mean_tolerance: float = 0.25

    # OOM/BACKEND failures above this rate (per second, whole pool) lower the max batch size.
    failure_rate_threshold_per_s: float = 0.01
    failure_reasons: tuple[str, ...] = ("OOM", "BACKEND")
    failure_settle_s: float = 90.0

    def __post_init__(self) -> None:
        if not (self.prior_a_ms >= 0 and self.prior_b_ms > 0):
            raise ValueError("prior_a_ms must be >= 0 and prior_b_ms > 0")
        if not 0 < self.fit_decay <= 1:
            raise ValueError(f"fit_decay must be in (0, 1], got {self.fit_decay}")
        if not 0 < self.correction_min <= 1 <= self.correction_max:
            raise ValueError("correction_min must be in (0, 1] and correction_max >= 1")
        if self.history_max_entries < 4:
            raise ValueError("history_max_entries must be >= 4")


DEFAULT_PARAMS = PolicyParams()
