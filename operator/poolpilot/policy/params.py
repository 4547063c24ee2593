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
    """Constants of the latency model, the guards and the stabilisation (see docs/policy.md).

    Every number has a docstring saying why it is what it is; none is fitted to a bench scenario.
    """

    prior_a_ms: float = DEFAULT_A_MS
    """Prior batch-latency curve (ms = a + b·batch), used until the pool's own data says otherwise. The spec
    has no field for it yet; these are the A100 figures of the design notes."""
    prior_b_ms: float = DEFAULT_B_MS
    """Slope of the prior line (ms per batch item); see `prior_a_ms`."""
    prior_intercept_weight: float = 0.01
    """Weights of the prior (ridge penalties). The intercept is nearly free, the slope is held: a pool seen
    at one batch size moves the line's level through its data and keeps the prior slope until its batch
    sizes spread (data slope weight = Σw·var(batch); 1000 ≈ 10 observations ±10 items)."""
    prior_slope_weight: float = 1000.0
    """Ridge weight holding the slope at the prior's; see `prior_intercept_weight`."""
    fit_decay: float = 0.99
    """Per-observation decay of the regression sums: 0.99 ≈ a memory of 100 ticks (25 min at 15 s)."""
    instance_slowdown: float = 0.8
    """Slowdown of one execution per extra concurrent instance on the same GPU (0 = independent executions,
    Triton's model of instances; the fitted compute time reveals real contention)."""
    router: Literal["round_robin", "random"] = "round_robin"
    """How requests reach replicas: "round_robin" (Envoy/Gateway default, IPVS rr; each replica sees
    smoothed arrivals) or "random" (kube-proxy iptables: each replica sees Poisson arrivals)."""
    wait_model: Literal["renewal", "erlang"] = "renewal"
    """How a single instance's queue wait is estimated: "renewal" (the wait behind the previous request's
    execution, from the interarrival law the router gives; see model._wait_one_instance) or "erlang" (the
    earlier M/M/1-style busy probability scaled by the arrivals' CV²)."""

    correction_alpha: float = 0.3
    """EWMA weight of each tick's measured-vs-predicted p99 in the correction (about 3 ticks of memory).

    The p99 is a 60 s window read every tick, so at 15 s ticks one window's error is read four times and
    moves the correction by up to 1 - 0.7^4 = 76 %, not 30 %. Weighting each reading by its new data only
    (30 % per window) was measured and lost windows (docs/generalization.md): the fast absorption is what
    holds capacity after a burst, so it stays, stated as it is."""
    spread_max_batch: float = 1.25
    """The straggler spread (`LatencyModel.spread_ms`) is measured only where requests run alone: mean
    batch within 25 % of one request, so the p99 is one request's execution, not a batch's."""
    spread_max_queue_share: float = 0.05
    """... and barely queue (mean queue under 5 % of the execution), so the p99 above the mean is the
    execution's own spread, not a wait."""
    correction_mode: Literal["additive", "multiplicative"] = "additive"
    """"additive": measured − predicted p99 is added to every prediction (default; the unmodelled tail is a
    straggler floor that more replicas do not remove); "multiplicative": measured / predicted scales it."""
    correction_min: float = 0.7
    """Lowest multiplicative correction: a model more than 30 % pessimistic is refit, not trusted lower."""
    correction_max: float = 3.0
    """Highest multiplicative correction: beyond 3x the model is wrong in shape, not in scale."""
    curve_bucket_ratio: float = 1.15
    """Width of one operating point of the measured p99 curve (`LatencyModel.p99_curve`): loads per
    replica within 15 % of each other share an entry — finer would split one steady load in two on a
    tick's noise, coarser would blend a trough with a peak."""
    curve_z: float = 2.0
    """A measured operating point is evidence that replicas suffice (`plan.measured_replicas`) only if its
    mean p99 reading plus this many standard deviations of the readings meets the objective
    (`model.curve_level`): 2 is ~98 % of windows for a normal spread, and a fleet is judged by the
    windows it meets, not by its mean window."""
    curve_min_readings: int = 2
    """... and only after this many readings, one per p99 window (`model.with_measured_p99`): two are the
    fewest that have a spread at all, and two windows the least a spread between windows is read from."""
    curve_max_age_s: float = 3600.0
    """An operating point not measured for an hour leaves the curve (the token mix and the traffic's
    burstiness drift; an hour is a diurnal phase, as `recurrence_max_hold_s`)."""
    curve_max_entries: int = 24
    """Bound of the curve (persisted in status): 24 bands of 15 % span a 28x range of load per replica;
    the least recently measured point leaves first."""
    correction_peak_decay_s: float = 1800.0
    """Time constant of the decay of the peak correction used for scale-in checks."""
    correction_peak_snap: float = 0.01
    """The peak snaps to the correction once within this share of it (a decay that ends)."""
    load_steady_ratio: float = 1.1
    """The model learns from a window only when it saw one load: the rate its inferences arrived at
    (`Signals.inference_rate_seen_per_s`) within 10 % of the window's mean. A burst that fills part of a
    window sets its p99 at the burst's rate while the mean says less; read at the mean, that window
    teaches a tail the pool does not have at any one load. Poisson noise alone moves the ratio by
    1/(15 s x rate): under 1 % above 7 req/s."""
    settle_s: float = 75.0
    """The model is corrected only when the measurement describes the running config: no scale or batching
    change for this long and every replica ready (Prometheus windows are ~60 s; never less than the longer
    of `Signals.p99_window_s` and `Signals.rate_window_s` and a tick, `_Tick.settle_s`)."""
    min_requests_for_p99: float = 100.0
    """Fewest requests in the p99 window for the quantile to mean anything (rate x `Signals.p99_window_s`)."""

    stale_after_ticks: float = 3.0
    """Signals older than this many ticks are stale → hold."""

    delay_grid_us: tuple[int, ...] = (0, 1_000, 2_000, 5_000, 10_000, 20_000, 35_000, 50_000)
    """Candidate queue delays (µs), intersected with the spec's bounds (which are always candidates)."""
    max_instance_candidates: int = 8
    """Instance counts searched from the spec's minimum (a GPU rarely gains from more than a few)."""

    scale_in_demand_headroom: float = 0.10
    """Scale-in must also meet the objective at this much more demand (dead-band against flapping)."""
    scale_in_tolerance: float = 0.10
    """A scale-in removes at least this share of the replicas (at least one), or waits: HPA's 10 %
    tolerance, applied on the way down only (a scale-out protects the objective and is never held)."""
    node_margin_share: float = 0.0
    """Nodes come whole: a node is opened (or kept) only to meet target x (1 - margin x this share); the
    rest of the margin is bought with GPUs on nodes already paid for (see `use_paid_nodes`)."""
    node_release_margin_share: float = 0.0
    """... and a node is released only when one node fewer meets target x (1 - margin x this share) (at
    least `node_margin_share`), at 10 % more demand with the peak correction."""
    guard_max_step_ratio: float = 2.0
    """The feedback guard scales out in proportion to the breach (measured / target), at most this factor
    per tick: a p99 window that lags cannot justify more than doubling at once."""
    guard_cooldown_s: float = 90.0
    """Wait this long after a scale-up before scaling out again on the (lagging) measured p99 (90 s >
    settle_s: the model learns from one settled tick between two guard steps; never less than the settle
    time and a tick when the metric windows are longer, `_Tick.guard_cooldown_s`)."""
    min_gain_share: float = 0.01
    """Where the objective is out of reach (a flat latency floor: the model's search, the measured line
    beyond the target), a replica is bought only while it lowers the p99 by at least this share of the
    objective: a floor is not a capacity problem, and 1 % is below any p99 window's noise."""
    guard_queue_share: float = 0.1
    """A breach counts as execution-bound (no scale-out, "infeasible at any fleet size") only when the
    measured mean queue time is at most this share of the target: the latency is then in execution,
    which replicas do not shorten. Above it, the queue is evidence of a capacity problem whatever the
    model says (a model that underestimates queueing learns the queue as an additive tail). The guard's
    other hold, "the model gains under 5 % from more replicas", yields only to a mean queue above the
    whole target: measured on the suite, the lower share here also overrode it where the model was right
    (docs/generalization.md)."""
    guard_min_delay_share: float = 0.02
    """An emergency delay cut only when the delay is at least this share of the measured p99."""

    lost_capacity_grace_s: float = 180.0
    """Capacity counts as lost when ready < replicas this long after the last scale change."""
    pod_start_s: float = 60.0
    """Pod start + model load: the replica lever's reaction time, over which the replica envelope is taken
    (policy/demand.py). 60 s is a Triton pod pulling a cached image and loading a mid-size model."""
    default_provisioning_s: float = 300.0
    """Node lead time when no GPUNodePoolSpec is given (5 minutes: a cloud GPU VM booting and joining)."""
    forecast_window_s: float = 300.0
    """Demand trend is fitted over this window of history (5 minutes: long enough to see a ramp through
    minute-scale ripple, short enough to follow a diurnal turn)."""
    forecast_min_rise_ratio: float = 0.10
    """The trend is used only when its rise over the window is at least this share of the current demand
    (ripple is not a trend)."""
    forecast_max_rise_ratio: float = 0.10
    """The trend never adds more than this share of the current demand to an envelope
    (`poolpilot.policy.demand.envelope`): a 5-minute trend extrapolated over a 6-minute node lead doubles
    any burst at the start of a ramp. The envelope's recent-peak term covers what recurs."""
    envelope_lookback: bool = False
    """Whether the envelopes add the busiest demand recorded over each lever's reaction time (less what
    the 60 s rate and the next tick cover) to the demand now plus the trend (`policy/demand.py`).

    Off by measurement, not by principle: on the dev seeds (11 scenarios, 600 s) the 285 s node look-back
    changed no window and cost 10 % more GPU-hours on dev-007 (ramp + bursts + flash); on the bench it cost
    8 % on the step and 2 % on the flash. Its case — bursts that recur within a node lead — needs hour-long
    runs to show (and the scale-down stabilisation window already holds replicas after a peak).
    """
    recurrence_max_hold_s: float = 3600.0
    """Longest trough through which capacity for a recurring demand level is held
    (`poolpilot.policy.demand.recurrence`): an hour, the scale of a diurnal phase — a load back after
    longer than that is a new phase, not a burst, and a node lead is then small next to the gap."""
    recurrence_hold_factor: float = 2.0
    """The hold is this many times the longest trough demand has come back after: the longest of n
    troughs seen is exceeded by the next with odds 1/(n+1), and a trough outlasting the hold costs a
    node lead of missed windows where holding it costs only its GPUs."""
    min_fit_samples: int = 4
    """Settled observations of the pool's own executions before a batching change is made for a saving.

    4 ≈ one minute of 15 s ticks after the settle time. Before that the latency line is the prior,
    which can be far from the pool (a different GPU, model or token mix); a reload proposed on it alone
    once cost a 240-replica fleet its objective for good. Forced changes, leaving a setting the model
    deems infeasible, and rollbacks are not gated.
    """
    tabu_after_change_s: float = 900.0
    """A batching setting that misses the objective within `tabu_after_change_s` of being adopted is not
    proposed again for `tabu_s` (its prediction was wrong; trying it every hour is a limit cycle)."""
    tabu_s: float = 6 * 3600.0
    """How long a failed setting stays out of the search (6 h: longer than a diurnal phase, so the next
    try meets different load, not the same mistake)."""
    tabu_max_entries: int = 4
    """Tabu list bound (persisted in status: kept small); the oldest entry leaves first."""
    history_max_entries: int = 256
    """History bound (entries); the window needs stabilisation/tick + a few."""

    straggler_ratio: float = 1.6
    """Straggler signal: smoothed measured/model p99 at or above this while the mean execution time matches
    the model (within `straggler_mean_tolerance`)."""
    straggler_alpha: float = 0.3
    """EWMA weight of the straggler ratio (as `correction_alpha`)."""
    straggler_mean_tolerance: float = 0.25
    """How close the measured mean execution must be to the model's line (25 %) for a high p99 ratio to
    mean stragglers rather than a wrong line."""

    failure_rate_threshold_per_s: float = 0.01
    """OOM/BACKEND failures above this rate (per second, whole pool) lower the max batch size."""
    failure_reasons: tuple[str, ...] = ("OOM", "BACKEND")
    """Triton failure reasons that mean the batch was too large for the GPU (others are the client's)."""
    failure_settle_s: float = 90.0
    """Failures are judged only this long after a batching change (one Prometheus window and a tick; never
    less than `Signals.rate_window_s` and a tick)."""

    def __post_init__(self) -> None:
        if not (self.prior_a_ms >= 0 and self.prior_b_ms > 0):
            raise ValueError("prior_a_ms must be >= 0 and prior_b_ms > 0")
        if not 0 < self.fit_decay <= 1:
            raise ValueError(f"fit_decay must be in (0, 1], got {self.fit_decay}")
        if not 0 < self.correction_min <= 1 <= self.correction_max:
            raise ValueError("correction_min must be in (0, 1] and correction_max >= 1")
        if not self.curve_bucket_ratio > 1.0 or self.curve_max_entries < 1 or self.curve_min_readings < 1:
            raise ValueError("curve_bucket_ratio must be > 1, curve_max_entries and curve_min_readings >= 1")
        if self.history_max_entries < 4:
            raise ValueError("history_max_entries must be >= 4")
        if not 0 < self.min_gain_share < 1:
            raise ValueError(f"min_gain_share must be in (0, 1), got {self.min_gain_share}")


DEFAULT_PARAMS = PolicyParams()
