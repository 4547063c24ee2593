"""Inputs and outputs of the policy: plain frozen dataclasses, no I/O, no clock.

The reconciler builds `Signals` from Prometheus and `PoolState` from the resource's status; the
simulator builds the same from its scraped series. `decide` returns a `Decision` that both turn
into actions (or, in Recommend mode, only report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

PolicyAction = Literal["scale", "batching"]


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    """The Triton dynamic-batching settings PoolPilot controls on every pod of a pool."""

    max_queue_delay_us: int
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...]
    instance_count: int
    # default_queue_policy.default_timeout_microseconds; None = no timeout
    queue_timeout_us: int | None = None
    max_queue_size: int = 0  # 0 = unbounded


@dataclass(frozen=True, slots=True)
class Signals:
    """One tick's view of a pool, as Prometheus gives it (windowed rates and quantiles).

    Any field may be NaN when the series is missing; `age_s` is how old the newest sample is.
    """

    p99_ms: float = math.nan  # measured latency at spec.slo.latencyQuantile
    request_rate_per_s: float = math.nan  # successful + failed requests per second, whole pool
    inference_rate_per_s: float = math.nan  # inferences (batch dim) per second, whole pool
    # The inference rate the window's inferences arrived at: the mean over scrape intervals of each
    # interval's rate, weighted by its inferences (sum r^2 / sum r). A window's p99 is a quantile over
    # its requests, so a burst that fills half the window sets it at the burst's rate, not the mean.
    inference_rate_seen_per_s: float = math.nan
    gpu_utilization: float = math.nan  # busy fraction 0..1, mean over the pool's GPUs
    queue_time_us: float = math.nan  # mean time in Triton's queue per request
    avg_batch_size: float = math.nan  # inferences / executions
    compute_us_per_exec: float = math.nan  # mean compute_infer time of one execution (one batch)
    pending_requests: float = math.nan  # queue depth, summed over pods
    mean_tokens_per_request: float = math.nan  # for cost per 1k tokens (may be NaN)
    failure_rate_by_reason: dict[str, float] = field(default_factory=dict)  # REJECTED, BACKEND, OOM...
    ready_replicas: int | None = None  # pods serving now (from the workload's status)
    age_s: float = 0.0  # how stale the newest sample is
    # How `p99_ms` was read: True, the worst pod's own quantile over its window (Triton's summary, max
    # over pods: on few requests per pod it is a pod's slowest request); False, one quantile over the
    # whole pool's requests (a histogram). Unknown sources say True, the stricter reading.
    p99_per_pod: bool = True
    # The windows the readings span. `p99_window_s`: Triton's summary keeps its own 60 s (prometheus-cpp's
    # max_age) whatever the query's window; a histogram's quantile spans the query's. `rate_window_s`: the
    # rates'. The policy counts the requests behind a p99, and how far back a reading reaches, by these.
    p99_window_s: float = 60.0
    rate_window_s: float = 60.0


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One past recommendation, kept in status for stabilisation across restarts.

    `replicas` is the raw (unstabilised) recommendation of that tick; `rate_per_s` the demand it was
    sized for (inferences/s), used to forecast demand over the pod-start and node lead times.
    """

    time_s: float
    replicas: int
    rate_per_s: float = math.nan
    # Replicas the node pool was asked to hold ahead of demand at that tick (0 = not recorded).
    replicas_ahead: int = 0
    # Ready replicas measured at that tick (None = not recorded): the capacity the p99 window saw.
    ready: int | None = None


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One measured operating point of the running batching (`LatencyModel.p99_curve`)."""

    rate_per_replica_per_s: float  # inferences/s per ready replica (smoothed over the point's readings)
    p99_mean_ms: float  # exponentially weighted mean of the windows' p99
    p99_var_ms2: float  # ... and variance (0 with one reading)
    seen_s: float  # time of the latest reading
    replicas: int  # the most ready replicas it was read on
    readings: int


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """batch latency ≈ a_ms + b_ms · batch, and the measured/predicted p99 correction."""

    a_ms: float
    b_ms: float
    correction: float = 1.0
    samples: int = 0
    # Exponentially weighted sufficient statistics of (batch size x, compute ms per execution y),
    # so the fit survives restarts when persisted in status. All decay by `PolicyParams.fit_decay`
    # per observation.
    sum_w: float = 0.0
    sum_x: float = 0.0
    sum_y: float = 0.0
    sum_xx: float = 0.0
    sum_xy: float = 0.0
    # Largest max_batch_size known to be safe (lowered after OOM/BACKEND failures); None = model's.
    max_batch_ceiling: int | None = None
    # Smoothed ratio of measured p99 to the model's (uncorrected) prediction: the straggler signal.
    straggler_ratio: float = 1.0
    # Highest recent correction, decaying slowly toward `correction`; scale-in is checked with it
    # (the correction differs between operating points: without this memory, scale in at the
    # point's low correction and scale out at the next one's high correction repeat forever).
    correction_peak: float = 0.0
    # Anti-flap memory: at `floor_rate_per_s` inferences/s, `floor_replicas` - 1 replicas ready for the
    # whole p99 window were measured too few; neither scale-in nor a node release goes below it while
    # demand within the node reaction time comes near that rate.
    floor_replicas: int = 0
    floor_rate_per_s: float = math.nan
    # The worst p99 measured at `floor_replicas` - 1 while the floor stands (a re-measurement takes the
    # latest rate, not a milder p99): a node release (checked against the target itself, not the
    # objective's margin) counts the floor only if it missed the target.
    floor_p99_ms: float = math.nan
    # Recurrence memory (`poolpilot.policy.demand.recurrence`): the busiest demand level reached, the
    # last time demand came within the scale-in headroom of it, and the longest gap after which it came
    # back (0 until it has once). Through a trough no longer than that gap, capacity for the level is
    # not given back: a load that recurs is not gone when it dips.
    burst_rate_per_s: float = math.nan
    burst_seen_s: float = math.nan
    burst_hold_s: float = 0.0
    # Additive correction (ms): measured p99 minus the model's, smoothed. The tail the model does not
    # see (long-token stragglers, skew) adds to every request's latency, so it is added, not scaled:
    # scaling it would credit more replicas with removing it. `offset_peak_ms` is its recent peak,
    # decaying like `correction_peak` (NaN = none yet).
    offset_ms: float = 0.0
    offset_peak_ms: float = math.nan
    # What the pool has done under the running batching (`CurvePoint`s, ascending in load, one per
    # `PolicyParams.curve_bucket_ratio` band): where it shows fewer replicas meeting the objective at as
    # much load per replica than the model asks for, the plan takes them (`plan.measured_replicas`); the
    # model is the prior where there is no data. Cleared when the batching changes.
    p99_curve: tuple[CurvePoint, ...] = ()
    # Straggler spread (ms): p99 minus mean of one request's execution, measured where requests run alone
    # and do not queue. A batch waits for its longest request, so a batch of B costs more than the line
    # by the expected maximum of B such costs (`model.straggler_share`); 0 = none measured.
    spread_ms: float = 0.0
    # A batching setting (delay µs, instances) adopted for a saving that then missed the objective is
    # not proposed again before its until_s (the model was wrong about it; see docs/policy.md).
    # Entries (delay µs, instances, until_s), newest last, at most `PolicyParams.tabu_max_entries`.
    tabu: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the policy remembers between ticks (persisted in the resource's status)."""

    replicas: int  # current spec.replicas of the workload
    batching: BatchingConfig | None  # last applied batching (None = unknown / Triton default)
    latency_model: LatencyModel | None = None
    history: tuple[HistoryEntry, ...] = ()
    last_batching_change_s: float | None = None
    last_scale_change_s: float | None = None
    last_scale_up_s: float | None = None
    last_batching_failure_s: float | None = None  # when a rollout last failed and was rolled back


@dataclass(frozen=True, slots=True)
class NodePoolDemand:
    """GPU demand one pool puts on its node pool, with the lead time to have it ready."""

    node_pool: str
    gpus_now: int
    gpus_ahead: int  # GPUs needed `provisioning_seconds` from now (forecast); >= gpus_now when rising
    gpus_per_replica: int = 1  # a replica's GPUs must sit on one node: the packing unit
    hold: bool = False  # the pool's metrics are missing/stale: never shrink the node pool on its account


@dataclass(frozen=True, slots=True)
class NodePoolDecision:
    """How many nodes a node pool should have, summed over every pool drawing on it, and why."""

    nodes: int
    current_nodes: int
    gpus_now: int
    gpus_ahead: int
    reasons: tuple[str, ...]
    hold: bool = False

    @property
    def changed(self) -> bool:
        return self.nodes != self.current_nodes


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy wants, why, and whether anything should change now."""

    replicas: int
    batching: BatchingConfig
    predicted_p99_ms: float
    reasons: tuple[str, ...]
    latency_model: LatencyModel | None = None
    node_demand: NodePoolDemand | None = None
    scale_changed: bool = False  # == ("scale" in actions): False in Recommend/Off mode
    batching_changed: bool = False  # == ("batching" in actions)
    hold: bool = False  # True when the policy refused to act (missing/stale metrics, Off mode)
    history: tuple[HistoryEntry, ...] = ()
    # What the caller must do now. EMPTY in Recommend and Off mode (and on hold): apply exactly these,
    # never `replicas`/`batching` on their own — those are the recommendation, shown in status.
    actions: tuple[PolicyAction, ...] = ()
    mode: str = "Auto"
    emergency: bool = False  # True when the feedback guard acted on a measured breach this tick
    predicted_utilization: float = math.nan  # demand / capacity at full batches for the chosen config
    demand_per_s: float = math.nan  # inferences/s the decision was sized for (after forecasting)

    @property
    def acts(self) -> bool:
        return self.scale_changed or self.batching_changed
