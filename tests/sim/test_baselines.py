"""Each baseline follows the real system's documented rule (autoscalers.md §1–§3, §13) on hand-built input."""

from __future__ import annotations

import math

import pytest

from poolpilot.policy.types import BatchingConfig, Signals
from poolpilot.sim.baselines import (
    BASELINES,
    DEFAULT_SCALE_DOWN,
    AIMDBatching,
    AIMDController,
    ClusterAutoscalerNodes,
    HPABehavior,
    HPAController,
    KEDAController,
    KPAController,
    KPAScaler,
    ScalingRules,
    StaticController,
    hpa_external_average_value_replicas,
    hpa_plain_metric_replicas,
    static_replicas_for_peak,
)
from poolpilot.sim.engine import default_batching
from poolpilot.sim.oracle import evaluate_fleet, measured_replica_capacity_per_s, poisson_load
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Observation

SETTINGS = SimParams(peak_rate_per_s=2000.0)  # defaults: 150 ms, curve 50 + 2.19·batch ms, max batch 64
DEFAULT = default_batching(SETTINGS)


def obs(
    now_s: float,
    *,
    replicas: int,
    ready: int | None = None,
    util: float = math.nan,
    p99_ms: float = math.nan,
    pending: float = math.nan,
    queue_length: float = 0.0,
    in_flight: float = 0.0,
    nodes: int | None = None,
    batching: BatchingConfig = DEFAULT,
) -> Observation:
    ready = replicas if ready is None else ready
    node_count = math.ceil(replicas / 8) if nodes is None else nodes
    return Observation(
        now_s=now_s,
        signals=Signals(p99_ms=p99_ms, gpu_utilization=util, pending_requests=pending, ready_replicas=ready),
        replicas=replicas,
        ready_replicas=ready,
        batching=batching,
        nodes=node_count,
        ready_nodes=node_count,
        gpus_per_node=8,
        gpus_per_replica=1,
        queue_length=queue_length,
        in_flight=in_flight,
    )


def replicas_after(action_replicas: int | None, current: int) -> int:
    return current if action_replicas is None else action_replicas


# --- registry -------------------------------------------------------------------------------------------


def test_registry_names_and_contract() -> None:
    assert set(BASELINES) == {"static", "hpa", "keda", "kpa", "aimd"}
    for name, factory in BASELINES.items():
        controller = factory(SETTINGS)
        assert controller.name == name
        assert controller.interval_s > 0


# --- static ---------------------------------------------------------------------------------------------


def test_static_is_the_fewest_replicas_covering_the_peak_at_target_utilisation() -> None:
    n = static_replicas_for_peak(SETTINGS)
    per_replica = measured_replica_capacity_per_s(SETTINGS, DEFAULT) * SETTINGS.target_gpu_utilization
    assert n * per_replica >= SETTINGS.peak_rate_per_s
    assert (n - 1) * per_replica < SETTINGS.peak_rate_per_s


def test_measured_capacity_is_the_knee_of_the_latency_curve() -> None:
    """One replica meets the objective below its measured capacity and misses it above (other seeds)."""
    cap = measured_replica_capacity_per_s(SETTINGS, DEFAULT)
    assert cap > 0

    def p99_at(rate: float, seed: int) -> float:
        load = poisson_load(rate, 300.0, seed)
        return evaluate_fleet(
            load.arrival_s, load.context_tokens, load.generated_tokens, 300.0, 1, DEFAULT, SETTINGS
        ).p99_ms

    for seed in (1, 2):
        assert p99_at(cap * 0.7, seed) <= SETTINGS.slo_ms
        assert p99_at(cap * 1.5, seed) > SETTINGS.slo_ms


def test_static_holds_its_fleet_and_triton_default_batching() -> None:
    c = StaticController(SETTINGS, replicas=12)
    a = c.step(obs(0.0, replicas=1, nodes=1, batching=BatchingConfig(5000, 32, (32,), 2)))
    assert a.replicas == 12
    assert a.batching == BatchingConfig(0, 64, (64,), 1)
    assert a.nodes == 2  # 12 GPUs on 8-GPU nodes
    a = c.step(obs(60.0, replicas=12, util=0.05))
    assert a.replicas is None and a.batching is None


def test_static_without_peak_rate_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="peak_rate_per_s"):
        StaticController(SimParams())


# --- HPA ------------------------------------------------------------------------------------------------


def test_hpa_tolerance_dead_band() -> None:
    # ratio 0.75/0.7 = 1.07 is inside the 10 % band: no change.
    assert (
        hpa_plain_metric_replicas(current_replicas=10, ready_with_metric=10, mean_metric=0.75, target=0.7)
        == 10
    )
    assert (
        hpa_plain_metric_replicas(current_replicas=10, ready_with_metric=10, mean_metric=0.64, target=0.7)
        == 10
    )
    # ratio 0.8/0.7 = 1.14 is outside: ceil(10 × 1.14) = 12.
    assert (
        hpa_plain_metric_replicas(current_replicas=10, ready_with_metric=10, mean_metric=0.8, target=0.7)
        == 12
    )


def test_hpa_missing_pods_count_as_target_when_scaling_down() -> None:
    # 4 pods at half the target, 4 pods without a metric (taken as 100 % of target): ratio (2+4)/8 = 0.75.
    got = hpa_plain_metric_replicas(
        current_replicas=8, ready_with_metric=4, mean_metric=0.35, target=0.7, missing=4
    )
    assert got == 6
    # Without the missing-pod rule it would have been ceil(4 × 0.5) = 2.
    assert (
        hpa_plain_metric_replicas(current_replicas=8, ready_with_metric=4, mean_metric=0.35, target=0.7) == 2
    )


def test_hpa_unready_pods_count_as_zero_on_scale_up() -> None:
    # 4 ready pods at 2× target, 4 pods still starting: (4×1.4 + 0)/8 = 0.7 ⇒ inside the band ⇒ hold.
    got = hpa_plain_metric_replicas(
        current_replicas=8, ready_with_metric=4, mean_metric=1.4, target=0.7, unready=4
    )
    assert got == 8
    # Fewer unready pods: (4×1.4)/5/0.7 = 1.6 ⇒ ceil(1.6 × 5) = 8.
    got = hpa_plain_metric_replicas(
        current_replicas=5, ready_with_metric=4, mean_metric=1.4, target=0.7, unready=1
    )
    assert got == 8


def test_hpa_scale_down_stabilisation_is_a_rolling_max() -> None:
    b = HPABehavior()
    assert b.normalize(0.0, 10, 10) == 10
    assert b.normalize(15.0, 10, 14) == 14  # up at once (0 s up window)
    current = 14
    seen = []
    for t in range(30, 400, 15):
        current = b.normalize(float(t), current, 3)
        seen.append((t, current))
    # The 14 recommended at t=15 holds every scale-down until it leaves the 300 s window.
    assert all(r == 14 for t, r in seen if t < 15 + 300)
    assert all(r == 3 for t, r in seen if t > 15 + 300)


def test_hpa_rolling_max_takes_the_highest_recommendation_in_the_window() -> None:
    b = HPABehavior()
    b.normalize(0.0, 20, 20)
    b.normalize(100.0, 20, 12)
    b.normalize(200.0, 20, 8)
    # At t=350 the 20 (t=0) has left the window; the highest left is 12 (t=100).
    assert b.normalize(350.0, 20, 5) == 12


def test_hpa_scale_up_policy_is_max_of_100_percent_and_4_pods_per_15s() -> None:
    assert HPABehavior().normalize(0.0, 2, 50) == 6  # 2 + 4 pods beats 2 × 2
    assert HPABehavior().normalize(0.0, 10, 50) == 20  # 100 % beats 4 pods
    b = HPABehavior()
    assert b.normalize(0.0, 2, 50) == 6
    # Within the same 15 s period the limit counts from the period start (2): no further growth.
    assert b.normalize(5.0, 6, 50) == 6
    # The next sync 15 s later may double again.
    assert b.normalize(15.0, 6, 50) == 12


def test_hpa_scale_down_policy_allows_100_percent_and_respects_min_replicas() -> None:
    b = HPABehavior(scale_down=ScalingRules(0.0, DEFAULT_SCALE_DOWN.policies))
    assert b.normalize(0.0, 10, 0) == 1  # 100 % per 15 s, clamped to minReplicas 1


def test_hpa_controller_holds_on_missing_metric() -> None:
    c = HPAController(SETTINGS)
    a = c.step(obs(0.0, replicas=6, util=math.nan))
    assert a.replicas is None
    a = c.step(obs(15.0, replicas=6, util=0.95))
    assert a.replicas == 9  # ceil(6 × 0.95/0.7)


def test_hpa_controller_does_not_scale_down_within_300s() -> None:
    c = HPAController(SETTINGS)
    replicas = 10
    for t in range(0, 300, 15):
        a = c.step(obs(float(t), replicas=replicas, util=0.1))
        replicas = replicas_after(a.replicas, replicas)
        assert replicas == 10
    a = c.step(obs(315.0, replicas=replicas, util=0.1))
    assert a.replicas is not None and a.replicas < 10


# --- KEDA -----------------------------------------------------------------------------------------------


def test_keda_external_average_value() -> None:
    assert hpa_external_average_value_replicas(status_replicas=4, total=100.0, target_per_pod=5.0) == 20
    # 21/(5×4) = 1.05: inside the dead-band.
    assert hpa_external_average_value_replicas(status_replicas=4, total=21.0, target_per_pod=5.0) == 4


def test_keda_default_reads_a_fresh_value_at_every_15s_hpa_sync() -> None:
    c = KEDAController(SETTINGS)
    assert c.interval_s == 15.0
    a = c.step(obs(0.0, replicas=4, pending=20.0))  # 20 / 5 = 4 pods: in band
    assert a.replicas is None
    a = c.step(obs(15.0, replicas=4, pending=200.0))  # the metrics server queries Prometheus now
    assert c.polled_value == 200.0
    assert a.replicas == 8  # 40 wanted, up-limited to max(2 × 4, 4 + 4)


def test_keda_with_cached_metrics_polls_every_30s_while_the_hpa_syncs_every_15s() -> None:
    c = KEDAController(SETTINGS, use_cached_metrics=True)
    replicas = 4
    a = c.step(obs(0.0, replicas=replicas, pending=20.0))  # polled: 20 ⇒ 4 pods, in band
    replicas = replicas_after(a.replicas, replicas)
    assert replicas == 4
    # At 15 s the queue exploded, but the HPA still sees the value polled at 0 s.
    a = c.step(obs(15.0, replicas=replicas, pending=200.0))
    assert a.replicas is None
    assert c.polled_value == 20.0
    # At 30 s KEDA polls again: 200 / 5 = 40, up-limited to max(8, 4+4) = 8.
    a = c.step(obs(30.0, replicas=replicas, pending=200.0))
    assert c.polled_value == 200.0
    assert a.replicas == 8


# --- KPA ------------------------------------------------------------------------------------------------


def test_kpa_stable_mode_targets_70_percent_of_per_pod_concurrency() -> None:
    k = KPAScaler(per_pod_concurrency=10.0)
    for t in range(0, 60, 2):
        k.record(float(t), 100.0)
    # 100 concurrent / (10 × 0.7) = 14.3 ⇒ 15 pods (the ACK docs' example), scale-up rate is not binding.
    assert k.desired(58.0, ready_pods=15, current=15) == 15
    assert not k.in_panic


def test_kpa_enters_panic_and_never_scales_down_in_panic() -> None:
    k = KPAScaler(per_pod_concurrency=10.0)
    for t in range(0, 54, 2):
        k.record(float(t), 14.0)  # 2 pods' worth
    assert k.desired(52.0, ready_pods=2, current=2) == 2
    for t_s in (54.0, 56.0, 58.0):
        k.record(t_s, 70.0)  # 6 s window: 70/7 = 10 pods ≥ 200 % of 2 ready
    got = k.desired(58.0, ready_pods=2, current=2)
    assert k.in_panic
    assert got == 10
    # Load vanishes: still panicking, and the count must not go down.
    for t in range(60, 110, 2):
        k.record(float(t), 1.0)
        assert k.desired(float(t), ready_pods=10, current=10) == 10
    # 60 s after the last over-threshold tick (58 s), panic ends and the stable rule may halve (rate 2).
    for t in range(110, 122, 2):
        k.record(float(t), 1.0)
    got = k.desired(121.0, ready_pods=10, current=10)
    assert not k.in_panic
    assert got == 5  # max scale-down rate 2: at most halve the ready pods


def test_kpa_controller_uses_in_flight_and_batch_capacity() -> None:
    c = KPAController(SETTINGS)
    assert c.interval_s == 2.0
    assert c.scaler.per_pod_concurrency == 64.0
    replicas = 2
    for t in range(0, 60, 2):
        a = c.step(obs(float(t), replicas=replicas, in_flight=200.0))
        replicas = replicas_after(a.replicas, replicas)
    assert replicas == math.ceil(200.0 / (64 * 0.7))


# --- AIMD -----------------------------------------------------------------------------------------------


def test_aimd_additive_increase_then_multiplicative_decrease() -> None:
    a = AIMDBatching(model_max_batch_size=64)
    assert (a.delay_us, a.max_batch_size) == (0, 64)
    assert a.update(p99_ms=80.0, slo_ms=150.0)
    assert a.update(p99_ms=90.0, slo_ms=150.0)
    assert a.delay_us == 2 * a.delay_step_us
    assert a.max_batch_size == 64  # capped at the model's
    assert a.update(p99_ms=200.0, slo_ms=150.0)
    assert a.delay_us == int(2 * a.delay_step_us * 0.9)
    assert a.max_batch_size == int(64 * 0.9)
    assert not a.update(p99_ms=math.nan, slo_ms=150.0)


def test_aimd_delay_is_capped() -> None:
    a = AIMDBatching(model_max_batch_size=8, max_delay_us=5000)
    for _ in range(10):
        a.update(p99_ms=10.0, slo_ms=150.0)
    assert a.delay_us == 5000


def test_aimd_controller_keeps_fixed_replicas_and_moves_triton_knobs() -> None:
    c = AIMDController(SETTINGS, replicas=6)
    a = c.step(obs(0.0, replicas=6, p99_ms=50.0))
    assert a.replicas is None and a.batching is None  # starts on Triton's default
    a = c.step(obs(60.0, replicas=6, p99_ms=50.0))
    assert a.replicas is None
    assert a.batching is not None and a.batching.max_queue_delay_us > 0
    cfg = a.batching
    a = c.step(obs(120.0, replicas=6, p99_ms=400.0, batching=cfg))
    assert a.batching is not None
    assert a.batching.max_queue_delay_us < cfg.max_queue_delay_us
    assert a.batching.max_batch_size < cfg.max_batch_size
    assert a.batching.preferred_batch_sizes == (a.batching.max_batch_size,)


# --- Cluster Autoscaler nodes ---------------------------------------------------------------------------


def test_nodes_follow_pods_up_at_once_and_down_after_10_minutes() -> None:
    ca = ClusterAutoscalerNodes(gpus_per_node=8, gpus_per_replica=1)
    assert ca.step(0.0, replicas=4, current_nodes=1) == 1
    assert ca.step(15.0, replicas=20, current_nodes=1) == 3
    # Demand drops; nodes stay for scale-down-delay-after-add and unneeded-time (600 s each).
    assert ca.step(30.0, replicas=4, current_nodes=3) == 3
    assert ca.step(600.0, replicas=4, current_nodes=3) == 3
    assert ca.step(629.0, replicas=4, current_nodes=3) == 3
    assert ca.step(631.0, replicas=4, current_nodes=3) == 1


def test_nodes_unneeded_timer_resets_when_demand_returns() -> None:
    ca = ClusterAutoscalerNodes(gpus_per_node=8, gpus_per_replica=2, delay_after_add_s=0.0)
    assert ca.step(0.0, replicas=8, current_nodes=2) == 2
    assert ca.step(10.0, replicas=2, current_nodes=2) == 2
    assert ca.step(400.0, replicas=8, current_nodes=2) == 2  # needed again: timer resets
    assert ca.step(500.0, replicas=2, current_nodes=2) == 2
    assert ca.step(1000.0, replicas=2, current_nodes=2) == 2
    assert ca.step(1100.0, replicas=2, current_nodes=2) == 1


def test_nodes_pack_whole_pods() -> None:
    # 3-GPU pods on 8-GPU nodes: two pods per node, so 5 pods need 3 nodes (not ceil(15/8) = 2).
    ca = ClusterAutoscalerNodes(gpus_per_node=8, gpus_per_replica=3)
    assert ca.step(0.0, replicas=5, current_nodes=0) == 3
