"""Baseline controllers that behave like the systems people run today, with their DEFAULT settings.

PoolPilot is judged against these in the simulator, so each one copies the real rule and its default
parameters from `/work/shared/reference/autoscalers.md` (cited per class), not a convenient caricature:

- `static`  — a fleet provisioned for the trace's peak, Triton default batching.
- `hpa`     — Kubernetes HPA (autoscalers.md §1) on GPU utilisation, target 70 %.
- `keda`    — KEDA ScaledObject (§2): Prometheus trigger on the pending-request count, fed to an HPA.
- `kpa`     — Knative Pod Autoscaler (§3): concurrency target, 60 s stable / 6 s panic window.
- `aimd`    — Clipper-style adaptive batching (§13) on Triton's knobs, with a fixed fleet.

GPU nodes for every baseline follow the pods like Cluster Autoscaler does (`ClusterAutoscalerNodes`,
autoscalers.md §10/§11): nodes are requested as soon as pods are pending, and an empty node is removed only
after `scale-down-unneeded-time` (10 min), and not within `scale-down-delay-after-add` (10 min) of a
scale-up. The engine applies the node lead time (300 s) and pod start (60 s).

The rule cores (`hpa_plain_metric_replicas`, `hpa_external_average_value_replicas`, `HPABehavior`,
`KPAScaler`, `AIMDBatching`, `ClusterAutoscalerNodes`) are pure and take `now_s` explicitly, so the tests
check each rule on hand-built numbers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from poolpilot.policy.types import BatchingConfig
from poolpilot.sim.engine import default_batching
from poolpilot.sim.oracle import measured_replica_capacity_per_s
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Action, Controller, Observation

# ---------------------------------------------------------------------------------------------------------
# Cluster Autoscaler: nodes follow pods.
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ClusterAutoscalerNodes:
    """Node count like Cluster Autoscaler gives it (autoscalers.md §10; CA defaults).

    Scale-up: pending pods that do not fit ⇒ enough nodes for all pods at once, i.e.
    `ceil(replicas · gpus_per_replica / gpus_per_node)` when a pod's GPUs divide a node's (in general
    whole pods per node: `ceil(replicas / ⌊gpus_per_node / gpus_per_replica⌋)`); the engine adds the 300 s
    provisioning.
    Scale-down: a node is removed only after it has been unneeded for `scale-down-unneeded-time` (600 s),
    and no scale-down is evaluated within `scale-down-delay-after-add` (600 s) of a scale-up. We assume the
    scheduler packs pods so surplus nodes really are empty (favourable to the baselines).
    """

    gpus_per_node: int
    gpus_per_replica: int
    unneeded_time_s: float = 600.0
    delay_after_add_s: float = 600.0
    nodes: int | None = None
    _unneeded_since_s: float | None = None
    _last_add_s: float = -math.inf

    def needed(self, replicas: int) -> int:
        per_node = max(1, self.gpus_per_node // self.gpus_per_replica)  # a pod cannot span nodes
        return math.ceil(replicas / per_node)

    def step(self, now_s: float, replicas: int, current_nodes: int) -> int:
        """The node count CA would ask for now, given the desired replicas."""
        if self.nodes is None:
            self.nodes = current_nodes
        need = self.needed(replicas)
        if need >= self.nodes:
            if need > self.nodes:
                self._last_add_s = now_s
            self.nodes = need
            self._unneeded_since_s = None
            return self.nodes
        if self._unneeded_since_s is None:
            self._unneeded_since_s = now_s
        if (
            now_s - self._unneeded_since_s >= self.unneeded_time_s
            and now_s - self._last_add_s >= self.delay_after_add_s
        ):
            self.nodes = need
            self._unneeded_since_s = None
        return self.nodes


def _action(
    obs: Observation,
    nodes: ClusterAutoscalerNodes,
    replicas: int,
    batching: BatchingConfig | None,
    reasons: tuple[str, ...],
) -> Action:
    """Build an Action that only names what changes; nodes always follow the desired replicas."""
    node_count = nodes.step(obs.now_s, replicas, obs.nodes)
    return Action(
        replicas=replicas if replicas != obs.replicas else None,
        batching=batching if batching is not None and batching != obs.batching else None,
        nodes=node_count if node_count != obs.nodes else None,
        reasons=reasons,
    )


# ---------------------------------------------------------------------------------------------------------
# static
# ---------------------------------------------------------------------------------------------------------


def static_replicas_for_peak(params: SimParams) -> int:
    """The fewest replicas that serve the trace's peak 1-minute rate at the target utilisation.

    A replica's capacity is measured the way a perf_analyzer sweep is read: the highest Poisson rate one
    replica with Triton default batching serves within the objective, in the same engine
    (`oracle.measured_replica_capacity_per_s`); the fleet runs at `target_gpu_utilization` (70 %) of it:
    `ceil(peak / (capacity × 0.7))`.
    """
    if not params.peak_rate_per_s >= 0:
        raise ValueError("peak_rate_per_s must be known (>= 0) to provision the static fleet for the peak")
    capacity = measured_replica_capacity_per_s(params, default_batching(params))
    if capacity <= 0:
        return params.max_replicas
    need = math.ceil(params.peak_rate_per_s / (capacity * params.target_gpu_utilization))
    return max(params.min_replicas, min(params.max_replicas, need))


class StaticController:
    """A fleet sized once for the trace's peak; never changes. Triton default batching."""

    interval_s = 60.0

    def __init__(self, params: SimParams, replicas: int | None = None) -> None:
        self.name = "static"
        self.params = params
        self.replicas = static_replicas_for_peak(params) if replicas is None else replicas
        self.initial_replicas = self.replicas  # the engine starts this fleet ready at t=0 (provisioned)
        self.batching = default_batching(params)
        self.nodes = ClusterAutoscalerNodes(params.gpus_per_node, params.gpus_per_replica)

    def step(self, obs: Observation) -> Action:
        return _action(obs, self.nodes, self.replicas, self.batching, (f"static fleet of {self.replicas}",))


# ---------------------------------------------------------------------------------------------------------
# HPA (autoscalers.md §1; kubernetes pkg/controller/podautoscaler)
# ---------------------------------------------------------------------------------------------------------


def hpa_plain_metric_replicas(
    *,
    current_replicas: int,
    ready_with_metric: int,
    mean_metric: float,
    target: float,
    unready: int = 0,
    missing: int = 0,
    tolerance: float = 0.1,
) -> int:
    """`calcPlainMetricReplicas` of replica_calculator.go for a per-pod (Pods/Resource-like) metric.

    `desired = ceil(ready × mean/target)` unless `|1 − ratio| ≤ tolerance`. Pods without a metric:
    `missing` count as 100 % of target when scaling down and 0 % when scaling up; `unready` (pending,
    starting) count as 0 % on scale-up only. If that recompute lands in the dead-band or flips direction,
    keep `current_replicas`.
    """
    if ready_with_metric <= 0 or not math.isfinite(mean_metric):
        return current_replicas
    ratio = mean_metric / target
    scale_up_with_unready = unready > 0 and ratio > 1.0
    if not scale_up_with_unready and missing == 0:
        if abs(1.0 - ratio) <= tolerance:
            return current_replicas
        return math.ceil(ratio * ready_with_metric)
    total = mean_metric * ready_with_metric
    count = ready_with_metric
    if missing > 0:
        total += (target if ratio < 1.0 else 0.0) * missing
        count += missing
    if scale_up_with_unready:
        count += unready  # each at 0
    new_ratio = total / count / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current_replicas
    new_replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (
        new_ratio > 1.0 and new_replicas < current_replicas
    ):
        return current_replicas
    return new_replicas


def hpa_external_average_value_replicas(
    *, status_replicas: int, total: float, target_per_pod: float, tolerance: float = 0.1
) -> int:
    """`GetExternalPerPodMetricReplicas`: External metric, AverageValue target (how KEDA feeds the HPA).

    `ratio = total / (target × replicas)`; outside the dead-band, `desired = ceil(total / target)`.
    """
    if status_replicas <= 0:
        return math.ceil(total / target_per_pod)
    ratio = total / (target_per_pod * status_replicas)
    if abs(1.0 - ratio) > tolerance:
        return math.ceil(total / target_per_pod)
    return status_replicas


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    kind: Literal["Pods", "Percent"]
    value: int
    period_s: float = 15.0


@dataclass(frozen=True, slots=True)
class ScalingRules:
    stabilization_window_s: float
    policies: tuple[ScalingPolicy, ...]
    select: Literal["Max", "Min", "Disabled"] = "Max"


# autoscalers.md §1 "Default behavior".
DEFAULT_SCALE_UP = ScalingRules(0.0, (ScalingPolicy("Percent", 100), ScalingPolicy("Pods", 4)))
DEFAULT_SCALE_DOWN = ScalingRules(300.0, (ScalingPolicy("Percent", 100),))


@dataclass
class HPABehavior:
    """The HPA's `behavior` stage: stabilisation window, then rate limits (horizontal.go).

    `normalize(now, current, desired)` records the raw recommendation; scale-down takes the HIGHEST
    recommendation within the 300 s window (rolling max), scale-up the lowest within its 0 s window; then
    the per-period policies (select Max ⇒ the policy allowing the biggest change) bound the step.
    """

    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    min_replicas: int = 1
    max_replicas: int = 1000
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    up_events: list[tuple[float, int]] = field(default_factory=list)
    down_events: list[tuple[float, int]] = field(default_factory=list)

    def _stabilize(self, now_s: float, current: int, desired: int) -> int:
        if not self.recommendations:
            # maybeInitScaleDownStabilizationWindow: a new HPA remembers the current count.
            self.recommendations.append((now_s, current))
        up_cut = now_s - self.scale_up.stabilization_window_s
        down_cut = now_s - self.scale_down.stabilization_window_s
        up_rec = desired
        down_rec = desired
        for t, rec in self.recommendations:
            if t > up_cut:
                up_rec = min(up_rec, rec)
            if t > down_cut:
                down_rec = max(down_rec, rec)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > min(up_cut, down_cut)]
        self.recommendations.append((now_s, desired))
        return min(max(current, up_rec), down_rec)

    @staticmethod
    def _change_in_period(events: list[tuple[float, int]], now_s: float, period_s: float) -> int:
        return sum(change for t, change in events if t > now_s - period_s)

    def _up_limit(self, now_s: float, current: int) -> int:
        rules = self.scale_up
        if rules.select == "Disabled":
            return current
        proposals = []
        for p in rules.policies:
            start = (
                current
                - self._change_in_period(self.up_events, now_s, p.period_s)
                + self._change_in_period(self.down_events, now_s, p.period_s)
            )
            proposals.append(start + p.value if p.kind == "Pods" else math.ceil(start * (1 + p.value / 100)))
        return max(proposals) if rules.select == "Max" else min(proposals)

    def _down_limit(self, now_s: float, current: int) -> int:
        rules = self.scale_down
        if rules.select == "Disabled":
            return current
        proposals = []
        for p in rules.policies:
            start = (
                current
                + self._change_in_period(self.down_events, now_s, p.period_s)
                - self._change_in_period(self.up_events, now_s, p.period_s)
            )
            proposals.append(start - p.value if p.kind == "Pods" else int(start * (1 - p.value / 100)))
        return min(proposals) if rules.select == "Max" else max(proposals)

    def normalize(self, now_s: float, current: int, desired: int) -> int:
        """Replicas to set now, given the metric's raw recommendation `desired`."""
        stabilized = self._stabilize(now_s, current, desired)
        lo = max(self.min_replicas, self._down_limit(now_s, current))
        hi = min(self.max_replicas, self._up_limit(now_s, current))
        result = min(max(stabilized, lo), hi)
        # Events only matter within the longest policy period.
        keep = max((p.period_s for p in (*self.scale_up.policies, *self.scale_down.policies)), default=0.0)
        if result > current:
            self.up_events.append((now_s, result - current))
        elif result < current:
            self.down_events.append((now_s, current - result))
        self.up_events = [e for e in self.up_events if e[0] > now_s - keep]
        self.down_events = [e for e in self.down_events if e[0] > now_s - keep]
        return result


class HPAController:
    """Kubernetes HPA on GPU utilisation (autoscalers.md §1), its defaults everywhere.

    Target 70 % (mean busy fraction of the pool's GPUs, e.g. DCGM through Prometheus Adapter as a Pods
    metric), tolerance 0.1, sync 15 s, default `behavior` (300 s scale-down stabilisation, up
    max(100 %, 4 pods)/15 s, down 100 %/15 s). Pods not ready yet are "unready" (0 % on scale-up). When
    the metric is missing or NaN the HPA cannot compute (ScalingActive=False) and leaves the scale alone.
    """

    interval_s = 15.0

    def __init__(self, params: SimParams, target_utilization: float = 0.7, tolerance: float = 0.1):
        self.name = "hpa"
        self.params = params
        self.target = target_utilization
        self.tolerance = tolerance
        self.behavior = HPABehavior(
            min_replicas=max(1, params.min_replicas), max_replicas=params.max_replicas
        )
        self.batching = default_batching(params)
        self.nodes = ClusterAutoscalerNodes(params.gpus_per_node, params.gpus_per_replica)

    def step(self, obs: Observation) -> Action:
        util = obs.signals.gpu_utilization
        current = obs.replicas
        if not math.isfinite(util) or obs.ready_replicas <= 0:
            return _action(obs, self.nodes, current, self.batching, ("hpa: metric unavailable, no scaling",))
        raw = hpa_plain_metric_replicas(
            current_replicas=current,
            ready_with_metric=obs.ready_replicas,
            mean_metric=util,
            target=self.target,
            unready=max(0, current - obs.ready_replicas),
            tolerance=self.tolerance,
        )
        new = self.behavior.normalize(obs.now_s, current, raw)
        why = f"hpa: util {util:.2f} vs target {self.target:.2f}, recommend {raw}, set {new}"
        return _action(obs, self.nodes, new, self.batching, (why,))


class KEDAController:
    """KEDA ScaledObject with a Prometheus trigger (autoscalers.md §2), feeding its HPA.

    Query `sum(nv_inference_pending_request_count{pool})`, metricType AverageValue, threshold 5 pending
    requests per replica. KEDA has no default threshold (it is required); 5 is about one small batch waiting
    per pod, i.e. a queue wait near one batch execution (~60 ms on the default curve), inside a 150 ms
    objective. The HPA KEDA creates syncs every 15 s with the HPA's default behavior. By default
    (`useCachedMetrics: false`) KEDA's metrics server queries the scaler on every HPA request, so each sync
    sees a fresh value and `pollingInterval` (30 s) only paces the operator's 0↔1 activation loop, which
    never acts here because `minReplicaCount` is 1 (GPU model pools keep one warm replica; autoscalers.md
    §0.4); kedacore/keda#2282. With `use_cached_metrics=True` the HPA reuses the value polled every 30 s.
    A missing value is treated as 0 (`ignoreNullValues: true`, the default).
    """

    interval_s = 15.0

    def __init__(
        self,
        params: SimParams,
        threshold: float = 5.0,
        polling_interval_s: float = 30.0,
        tolerance: float = 0.1,
        *,
        use_cached_metrics: bool = False,
    ) -> None:
        if threshold <= 0:
            raise ValueError(f"threshold must be > 0, got {threshold!r}")
        self.name = "keda"
        self.params = params
        self.threshold = threshold
        self.polling_interval_s = polling_interval_s
        self.use_cached_metrics = use_cached_metrics
        self.tolerance = tolerance
        self.behavior = HPABehavior(
            min_replicas=max(1, params.min_replicas), max_replicas=params.max_replicas
        )
        self.batching = default_batching(params)
        self.nodes = ClusterAutoscalerNodes(params.gpus_per_node, params.gpus_per_replica)
        self.last_poll_s: float | None = None
        self.polled_value: float = 0.0

    def poll(self, now_s: float, queue_length: float) -> bool:
        """Read the metric for this HPA sync: always without the cache, else once per polling interval."""
        if (
            self.use_cached_metrics
            and self.last_poll_s is not None
            and now_s - self.last_poll_s < self.polling_interval_s - 1e-9
        ):
            return False
        self.last_poll_s = now_s
        self.polled_value = queue_length if math.isfinite(queue_length) else 0.0
        return True

    def step(self, obs: Observation) -> Action:
        pending = obs.signals.pending_requests
        if not math.isfinite(pending):
            pending = obs.queue_length
        self.poll(obs.now_s, pending)
        current = obs.replicas
        raw = hpa_external_average_value_replicas(
            status_replicas=current,
            total=self.polled_value,
            target_per_pod=self.threshold,
            tolerance=self.tolerance,
        )
        new = self.behavior.normalize(obs.now_s, current, raw)
        why = (
            f"keda: pending {self.polled_value:.1f} / {self.threshold:g} per pod, recommend {raw}, set {new}"
        )
        return _action(obs, self.nodes, new, self.batching, (why,))


# ---------------------------------------------------------------------------------------------------------
# Knative KPA (autoscalers.md §3; knative/serving pkg/autoscaler/scaling/autoscaler.go)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class KPAScaler:
    """The KPA decision on windowed concurrency, with panic mode.

    desired = ceil(avg concurrency over the window / (per-pod target × 70 %)), bounded by max scale-up rate
    1000× and max scale-down rate 2 (at most halve) of ready pods. Panic when the 6 s window wants
    ≥ 200 % of ready pods: then never scale down (keep the max panic count) until 60 s pass without cause.
    """

    per_pod_concurrency: float
    utilization: float = 0.7
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 1000
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    panic_since_s: float | None = None
    max_panic_pods: int = 0

    @property
    def target(self) -> float:
        return self.per_pod_concurrency * self.utilization

    @property
    def in_panic(self) -> bool:
        return self.panic_since_s is not None

    def record(self, now_s: float, concurrency: float) -> None:
        self.samples.append((now_s, concurrency))
        while self.samples and self.samples[0][0] <= now_s - self.stable_window_s:
            self.samples.popleft()

    def _average(self, now_s: float, window_s: float) -> float:
        vals = [c for t, c in self.samples if t > now_s - window_s]
        return sum(vals) / len(vals) if vals else math.nan

    def desired(self, now_s: float, ready_pods: int, current: int) -> int:
        """Pods to run now (autoscaler.go `Scale`); `current` is returned when there is no data yet."""
        stable = self._average(now_s, self.stable_window_s)
        panic = self._average(now_s, self.panic_window_s)
        if not (math.isfinite(stable) and math.isfinite(panic)):
            return current
        ready = max(1.0, float(ready_pods))
        max_up = math.ceil(self.max_scale_up_rate * ready)
        max_down = math.floor(ready / self.max_scale_down_rate)
        dspc = math.ceil(stable / self.target)
        dppc = math.ceil(panic / self.target)
        stable_pods = min(max(dspc, max_down), max_up)
        panic_pods = min(max(dppc, max_down), max_up)
        over = dppc / ready >= self.panic_threshold
        if over:
            self.panic_since_s = now_s  # enter panic, or extend it
        elif self.panic_since_s is not None and now_s - self.panic_since_s > self.stable_window_s:
            self.panic_since_s = None
            self.max_panic_pods = 0
        pods = stable_pods
        if self.panic_since_s is not None:
            # No scale-down in panic: only increases of max(stable, panic) are applied.
            self.max_panic_pods = max(self.max_panic_pods, stable_pods, panic_pods)
            pods = self.max_panic_pods
        return max(self.min_replicas, min(self.max_replicas, pods))


class KPAController:
    """Knative KPA with `config-autoscaler` defaults (autoscalers.md §3).

    Per-pod concurrency target: a Triton pod executes at most `max_batch_size × instance_count` requests at
    once, so that is its `containerConcurrency` equivalent; KPA aims at 70 % of it. Concurrency is what
    the queue-proxy reports (requests in the pod, queued + executing: `obs.in_flight`), sampled every
    2 s tick. `min-scale` 1 (no scale to zero for a GPU model), `max-scale` = the pool's maximum.
    """

    interval_s = 2.0

    def __init__(self, params: SimParams) -> None:
        self.name = "kpa"
        self.params = params
        self.batching = default_batching(params)
        self.scaler = KPAScaler(
            per_pod_concurrency=float(self.batching.max_batch_size * self.batching.instance_count),
            min_replicas=max(1, params.min_replicas),
            max_replicas=params.max_replicas,
        )
        self.nodes = ClusterAutoscalerNodes(params.gpus_per_node, params.gpus_per_replica)

    def step(self, obs: Observation) -> Action:
        if math.isfinite(obs.in_flight):
            self.scaler.record(obs.now_s, obs.in_flight)
        new = self.scaler.desired(obs.now_s, obs.ready_replicas, obs.replicas)
        mode = "panic" if self.scaler.in_panic else "stable"
        why = f"kpa ({mode}): concurrency target {self.scaler.target:.1f}/pod, set {new}"
        return _action(obs, self.nodes, new, self.batching, (why,))


# ---------------------------------------------------------------------------------------------------------
# AIMD adaptive batching (autoscalers.md §13, Clipper)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class AIMDBatching:
    """Clipper's AIMD on Triton's knobs: grow additively while p99 ≤ SLO, cut ×0.9 when it is above.

    Knobs: `max_queue_delay_us` (+`delay_step_us`, capped at `max_delay_us`, 50 ms by our design notes) and
    `max_batch_size` (+`batch_step`, capped at the model's). Back-off multiplies both by 0.9 (Clipper's
    ~10 %, autoscalers.md §13). Starts from Triton's default (delay 0, max batch = the model's).
    """

    model_max_batch_size: int
    delay_step_us: int = 2000
    batch_step: int = 4
    max_delay_us: int = 50_000
    decrease: float = 0.9
    max_batch_size: int = 0
    delay_us: int = 0

    def __post_init__(self) -> None:
        if self.max_batch_size <= 0:
            self.max_batch_size = self.model_max_batch_size

    def update(self, p99_ms: float, slo_ms: float) -> bool:
        """Apply one AIMD step; True when the knobs changed. NaN p99 ⇒ no change."""
        if not math.isfinite(p99_ms):
            return False
        old = (self.delay_us, self.max_batch_size)
        if p99_ms > slo_ms:
            self.delay_us = int(self.delay_us * self.decrease)
            self.max_batch_size = max(1, int(self.max_batch_size * self.decrease))
        else:
            self.delay_us = min(self.max_delay_us, self.delay_us + self.delay_step_us)
            self.max_batch_size = min(self.model_max_batch_size, self.max_batch_size + self.batch_step)
        return (self.delay_us, self.max_batch_size) != old

    def config(self, instance_count: int = 1) -> BatchingConfig:
        return BatchingConfig(
            max_queue_delay_us=self.delay_us,
            max_batch_size=self.max_batch_size,
            preferred_batch_sizes=(self.max_batch_size,),
            instance_count=instance_count,
        )


class AIMDController:
    """Clipper-style adaptive batching with a fixed fleet (the static peak count unless given).

    Each batching change reloads the model on every pod, and the p99 signal is a 1-minute window, so it
    steps once per 60 s (Clipper adapts per batch; Triton cannot reload that often).
    """

    interval_s = 60.0

    def __init__(self, params: SimParams, replicas: int | None = None) -> None:
        self.name = "aimd"
        self.params = params
        self.replicas = static_replicas_for_peak(params) if replicas is None else replicas
        self.initial_replicas = self.replicas  # the engine starts this fleet ready at t=0 (provisioned)
        self.aimd = AIMDBatching(params.model_max_batch_size)
        self.nodes = ClusterAutoscalerNodes(params.gpus_per_node, params.gpus_per_replica)
        self._started = False

    def step(self, obs: Observation) -> Action:
        if self._started:
            self.aimd.update(obs.signals.p99_ms, self.params.slo_ms)
        self._started = True
        cfg = self.aimd.config()
        why = (
            f"aimd: p99 {obs.signals.p99_ms:.0f} ms, delay {cfg.max_queue_delay_us} us, "
            f"max batch {cfg.max_batch_size}"
        )
        return _action(obs, self.nodes, self.replicas, cfg, (why,))


# ---------------------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------------------


def _static(params: SimParams) -> Controller:
    return StaticController(params)


def _hpa(params: SimParams) -> Controller:
    return HPAController(params)


def _keda(params: SimParams) -> Controller:
    return KEDAController(params)


def _kpa(params: SimParams) -> Controller:
    return KPAController(params)


def _aimd(params: SimParams) -> Controller:
    return AIMDController(params)


BASELINES: dict[str, Callable[[SimParams], Controller]] = {
    "static": _static,
    "hpa": _hpa,
    "keda": _keda,
    "kpa": _kpa,
    "aimd": _aimd,
}
