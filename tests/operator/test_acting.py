"""The operator acts (fakes for the cluster, Prometheus and Triton; the real policy and reconcile).

What a team running an `Auto` pool would check: replicas move through /scale, batching reaches every
Ready pod (and is rolled back when a reload fails), the decision survives an operator restart, nothing is
touched in Recommend mode or next to another autoscaler, bad metrics hold the pool with a reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

import pytest

from poolpilot.backends.batching import BatchingError, FakeBatchingActuator, Running
from poolpilot.backends.workloads import Autoscaler, Scale
from poolpilot.policy.persist import state_from_wire
from poolpilot.policy.types import BatchingConfig, Signals
from poolpilot.reconcile import inferencepool as reconcile

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)
TICK = dt.timedelta(seconds=15)


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == type_)
    return found


def signals(p99_ms: float, rate: float, *, batch: float = 4.0, exec_ms: float = 60.0) -> Signals:
    return Signals(
        p99_ms=p99_ms,
        request_rate_per_s=rate,
        inference_rate_per_s=rate,
        gpu_utilization=0.9,
        queue_time_us=20_000.0,
        avg_batch_size=batch,
        compute_us_per_exec=exec_ms * 1000,
        age_s=2.0,
    )


class Driver:
    """Ticks one pool the way the handler does (memo of the last status and write)."""

    def __init__(self, world: Any, body: dict[str, Any]) -> None:
        self.world, self.body = world, body
        self.now = NOW
        self.last: reconcile.TickReport | None = None

    async def tick(self, *, restart: bool = False) -> reconcile.TickReport:
        if restart or self.last is None:  # a fresh operator: what the apiserver holds, no memory
            previous = self.world.cluster.statuses.get(("inferencepools", "team-a", "chat"))
            last_write = None
        else:
            previous, last_write = self.last.status, self.last.last_write
        self.last = await reconcile.tick(
            self.world.services, self.body, now=self.now, previous_status=previous, last_write=last_write
        )
        self.now += TICK
        self.world.clock.now_s += TICK.total_seconds()
        return self.last


async def test_breach_scales_out_through_scale_with_reasons(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=400.0, rate=300.0)
    result = await Driver(world, pool_body()).tick()

    assert result.decision is not None and "scale" in result.decision.actions
    (ref, replicas), *_ = world.workloads.writes
    assert ref.name == "chat-triton" and replicas > 3
    status = world.status_of("chat")
    assert status["replicas"] == replicas and status["desiredReplicas"] == replicas
    assert status["lastDecision"]["action"].startswith("ScaleOut")
    assert "400 ms > 150 ms" in status["lastDecision"]["reasons"][0]
    scaled = [e for e in world.cluster.events if e.reason == "ScaledOut"]
    assert len(scaled) == 1 and f"3→{replicas}" in scaled[0].message
    assert status["nodeDemand"]["gpusNow"] >= replicas  # published for the GPUNodePool's reconcile


async def test_a_conflicting_write_is_not_retried_blindly(world: Any, pool_body: Any) -> None:
    """Someone wrote the Deployment between our read and our write: 409, decide again next tick."""
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=400.0, rate=300.0)
    real_set = world.workloads.set_replicas

    async def racing_set(ref: Any, replicas: int, *, resource_version: str | None = None) -> None:
        old = world.workloads.scales[("team-a", "chat-triton")]
        world.workloads.scales[("team-a", "chat-triton")] = dataclasses.replace(old, resource_version="99")
        await real_set(ref, replicas, resource_version=resource_version)

    world.workloads.set_replicas = racing_set
    await Driver(world, pool_body()).tick()

    assert world.workloads.writes == []
    assert [e.reason for e in world.cluster.events if e.reason.startswith("Scale")] == ["ScaleConflict"]
    state = state_from_wire(world.status_of("chat")["policyState"])
    assert state.replicas == 3 and state.last_scale_change_s is None  # the change did not happen


async def test_batching_reaches_every_ready_pod_and_status_says_so(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    body = pool_body(batching={"preferredBatchSizes": [8, 16]})
    result = await Driver(world, body).tick()

    assert result.decision is not None and "batching" in result.decision.actions
    configs = world.pod_configs()
    assert all(c.preferred_batch_sizes == (8, 16) for c in configs)
    status = world.status_of("chat")
    assert status["batching"]["preferredBatchSize"] == [8, 16]
    assert "rollout" not in status  # finished within the tick
    assert cond(status, "BatchingApplied")["reason"] == "BatchingInSync"
    reasons = [e.reason for e in world.cluster.events]
    assert reasons.index("BatchingRolloutStarted") < reasons.index("BatchingRolledOut")


async def test_a_pod_that_comes_up_later_is_brought_to_the_pool_setting(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    driver = Driver(world, pool_body(batching={"preferredBatchSizes": [8, 16]}))
    await driver.tick()
    world.set_pods(4)  # a fourth pod, started from config.pbtxt
    assert world.pod_configs()[3].preferred_batch_sizes == (64,)

    await driver.tick()

    assert all(c.preferred_batch_sizes == (8, 16) for c in world.pod_configs())
    assert [e.reason for e in world.cluster.events].count("BatchingRolloutStarted") == 1  # no new rollout


async def test_a_failed_reload_rolls_the_changed_pods_back(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    pods = world.pods.pods[("team-a", "app=chat")]
    world.batching.fail_on = {pods[1].url(8000)}  # the second pod runs out of memory on reload

    await Driver(world, pool_body(batching={"preferredBatchSizes": [8, 16]})).tick()

    assert [c.preferred_batch_sizes for c in world.pod_configs()] == [(64,)] * 3  # all back
    assert [a[0] for a in world.batching.applied] == [pods[0].url(8000), pods[0].url(8000)]  # out, back
    status = world.status_of("chat")
    applied = cond(status, "BatchingApplied")
    assert (applied["status"], applied["reason"]) == ("False", "BatchingRolledBack")
    assert pods[1].url(8000) in applied["message"]
    warning = [e for e in world.cluster.events if e.reason == "BatchingRolledBack"]
    assert len(warning) == 1 and warning[0].type == "Warning"
    state = state_from_wire(status["policyState"])
    assert state.latency_model is not None and state.latency_model.tabu  # remembered as failed
    assert "rollout" not in status


class KilledActuator(FakeBatchingActuator):
    """Dies (like an operator process killed) on its `kill_at`-th reload."""

    kill_at: int = 2

    async def apply(self, url: str, model: str, target: BatchingConfig, base: Running) -> None:
        if len(self.applied) + 1 == self.kill_at:
            raise asyncio.CancelledError
        await super().apply(url, model, target, base)


async def test_operator_killed_mid_rollout_finishes_it_after_restart(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    killed = KilledActuator(configs=world.batching.configs)
    world.services = dataclasses.replace(world.services, batching=killed)
    driver = Driver(world, pool_body(batching={"preferredBatchSizes": [8, 16]}))
    with pytest.raises(asyncio.CancelledError):
        await driver.tick()
    mid = world.status_of("chat")
    assert mid["rollout"]["phase"] == "Progressing" and mid["rollout"]["updatedReplicas"] == 1
    started = state_from_wire(mid["policyState"]).last_batching_change_s

    killed.kill_at = 0  # the restarted operator's reloads succeed
    result = await driver.tick(restart=True)

    assert all(c.preferred_batch_sizes == (8, 16) for c in world.pod_configs())
    status = world.status_of("chat")
    assert "rollout" not in status
    assert result.decision is not None and "batching" not in result.decision.actions  # not decided again
    assert state_from_wire(status["policyState"]).last_batching_change_s == started
    assert [e.reason for e in world.cluster.events].count("BatchingRolloutStarted") == 1


async def test_recommend_mode_reports_everything_and_touches_nothing(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=400.0, rate=300.0)
    await Driver(world, pool_body(mode="Recommend", batching={"preferredBatchSizes": [8, 16]})).tick()

    assert world.workloads.writes == [] and world.batching.applied == []
    status = world.status_of("chat")
    assert status["desiredReplicas"] > 3 and status["replicas"] == 3
    assert status["recommendedBatching"]["preferredBatchSize"] == [8, 16]
    assert status["lastDecision"]["action"].startswith("Recommend")
    assert status["nodeDemand"]["hold"] is True  # the node pool must not move for a recommendation
    assert any(e.reason == "Recommendation" for e in world.cluster.events)


async def test_another_autoscaler_on_the_workload_is_not_fought(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=400.0, rate=300.0)
    world.workloads.autoscalers[("team-a", "chat-triton")] = [Autoscaler("ScaledObject", "chat-keda")]
    await Driver(world, pool_body()).tick()

    assert world.workloads.writes == [] and world.batching.applied == []
    active = cond(world.status_of("chat"), "Active")
    assert (active["status"], active["reason"]) == ("False", "ConflictingAutoscaler")
    assert "ScaledObject chat-keda" in active["message"]
    assert any(e.reason == "ConflictingAutoscaler" and e.type == "Warning" for e in world.cluster.events)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"gpu_utilization": -0.5}, "gpu_utilization"),
        ({"p99_ms": float("inf")}, "p99_ms"),
        ({"request_rate_per_s": -3.0}, "request_rate_per_s"),
        ({"avg_batch_size": 0.2}, "avg_batch_size"),
    ],
)
async def test_garbage_metrics_hold_the_pool_with_the_metric_named(
    world: Any, pool_body: Any, bad: dict[str, float], named: str
) -> None:
    world.metrics.signals[("team-a", "chat")] = dataclasses.replace(signals(p99_ms=400.0, rate=300.0), **bad)
    result = await Driver(world, pool_body()).tick()

    assert result.decision is not None and result.decision.hold and not result.decision.actions
    assert world.workloads.writes == []
    metrics = cond(world.status_of("chat"), "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("False", "MetricsInvalid")
    assert named in metrics["message"]
    assert world.status_of("chat")["lastDecision"]["action"] == "Hold"


async def test_prometheus_down_holds_and_the_status_does_not_stay_healthy(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    driver = Driver(world, pool_body())
    await driver.tick()
    assert cond(world.status_of("chat"), "MetricsAvailable")["status"] == "True"

    world.metrics.error = "Prometheus at http://prom:9090 is unreachable: connection refused"
    result = await driver.tick()

    assert result.decision is not None and result.decision.hold
    status = world.status_of("chat")
    assert cond(status, "MetricsAvailable")["reason"] == "MetricsUnreachable"
    assert "p99Ms" not in status["signals"]
    assert status["lastDecision"]["action"] == "Hold"


async def test_a_pod_that_cannot_be_read_is_not_counted_ready(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = signals(p99_ms=100.0, rate=60.0)
    world.batching.down = {world.pods.pods[("team-a", "app=chat")][2].url(8000)}
    await Driver(world, pool_body()).tick()
    assert world.status_of("chat")["readyReplicas"] == 2


async def _run(world: Any, body: dict[str, Any], *, restart_at: set[int]) -> list[tuple[Any, ...]]:
    """Decisions over a rise, a burst and a fall; the operator restarts before the ticks in `restart_at`."""
    driver = Driver(world, body)
    load = [60.0] * 8 + [400.0] * 12 + [900.0] * 6 + [150.0] * 40
    out = []
    for i, rate in enumerate(load):
        replicas = world.workloads.scales[("team-a", "chat-triton")].spec_replicas
        world.set_pods(replicas)
        p99 = 90.0 + 60.0 * rate / (replicas * 100.0)
        world.metrics.signals[("team-a", "chat")] = signals(p99_ms=p99, rate=rate)
        world.clock.now_s += 60  # a fresh fetch every tick
        result = await driver.tick(restart=i in restart_at)
        d = result.decision
        assert d is not None
        out.append((i, d.replicas, d.batching, d.actions, d.hold))
    return out


async def test_a_restarted_operator_decides_as_one_that_never_stopped(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    """The same signals, with and without restarts at several points (rising, bursting, falling, steady)."""
    from tests.operator.conftest import World

    body = pool_body(batching={"preferredBatchSizes": [8, 16]})
    continuous = await _run(world, body, restart_at=set())
    other = World(node_pool_body())
    restarted = await _run(other, body, restart_at={3, 9, 15, 22, 30, 45, 60})

    assert any(actions for _, _, _, actions, _ in continuous)  # the run did decide things
    assert restarted == continuous


async def test_off_mode_reads_nothing_beyond_the_spec(world: Any, pool_body: Any) -> None:
    world.cluster.calls = 0
    await Driver(world, pool_body(mode="Off")).tick()
    # one status patch and the Events of the first conditions; no reads of node pool, namespace, pods, metrics
    assert world.cluster.calls == 1 + len(world.cluster.events)
    assert world.metrics.fetches == [] and world.batching.applied == []


async def test_cost_per_1k_tokens_and_a_binding_ceiling(world: Any, pool_body: Any) -> None:
    s = dataclasses.replace(signals(p99_ms=400.0, rate=300.0), mean_tokens_per_request=500.0)
    world.metrics.signals[("team-a", "chat")] = s
    # 300 req/s x 500 tokens = 150k tokens/s; one replica costs 29.4/8 $/h = 1.02e-3 $/s
    await Driver(world, pool_body(cost={"maxCostPer1kTokensUSD": 0.00003})).tick()

    status = world.status_of("chat")
    expected = 3 * 29.4 / 8 / 3600 / 150.0
    assert status["costPer1kTokensUSD"] == pytest.approx(expected)
    limited = cond(status, "CostLimited")
    cap = int(0.00003 * 150.0 / (29.4 / 8 / 3600))
    assert (limited["status"], limited["reason"]) == ("True", "OverCostCeiling")
    assert status["desiredReplicas"] == cap
    assert world.workloads.writes[-1][1] == cap


def test_batching_error_names_pod() -> None:
    assert "10.0.0.1:8000" in str(BatchingError("10.0.0.1:8000: load of llama failed: OOM"))


def test_scale_keeps_the_selector(world: Any) -> None:
    assert world.workloads.scales[("team-a", "chat-triton")] == Scale(3, 3, "app=chat", "1")
