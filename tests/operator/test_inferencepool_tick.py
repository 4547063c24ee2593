"""What a user sees in an InferencePool's status and Events after a tick (fakes, no cluster)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from poolpilot.policy.types import Signals
from poolpilot.reconcile import inferencepool as reconcile

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC)


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    matches = [c for c in status.get("conditions", []) if c["type"] == type_]
    assert len(matches) == 1, f"expected one {type_} condition in {status.get('conditions')}"
    found: dict[str, Any] = matches[0]
    return found


def fresh_signals(p99_ms: float = 120.0) -> Signals:
    return Signals(
        p99_ms=p99_ms,
        request_rate_per_s=40.0,
        inference_rate_per_s=40.0,
        gpu_utilization=0.5,
        queue_time_us=2500.0,
        avg_batch_size=4.0,
        age_s=3.0,
    )


async def test_valid_pool_is_ready_and_reports_what_it_observed(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = fresh_signals(p99_ms=120.0)
    body = pool_body(generation=4)

    result = await reconcile.tick(world.services, body, now=NOW)

    status = world.status_of("chat")
    assert cond(status, "Ready")["status"] == "True"
    assert status["observedGeneration"] == 4
    assert status["mode"] == "Auto"
    assert status["replicas"] == 3  # from the Deployment's /scale
    assert cond(status, "Active")["status"] == "True"
    assert cond(status, "MetricsAvailable")["status"] == "True"
    assert status["signals"]["p99Ms"] == 120.0
    assert status["signals"]["queueTimeMs"] == 2.5
    assert status["lastDecision"]["reasons"]  # every decision says why
    assert status["policyState"]["version"] == 1  # the policy's memory is in the status
    assert status["desiredReplicas"] >= 1
    assert status["readyReplicas"] == 3
    assert result.ready
    json.dumps(status)  # the status must be plain JSON (no NaN, no datetimes)


async def test_missing_node_pool_is_named_in_condition_and_warning_event(world: Any, pool_body: Any) -> None:
    body = pool_body(nodePool={"name": "does-not-exist"})

    await reconcile.tick(world.services, body, now=NOW)

    ready = cond(world.status_of("chat"), "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "NodePoolNotFound"
    assert "spec.nodePool.name" in ready["message"]
    assert "does-not-exist" in ready["message"]
    warnings = [e for e in world.cluster.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["NodePoolNotFound"]
    assert "lastDecision" not in world.status_of("chat")


async def test_namespace_not_admitted_by_node_pool_selector(world: Any, pool_body: Any) -> None:
    world.workloads.scales[("team-b", "chat-triton")] = world.workloads.scales[("team-a", "chat-triton")]
    body = pool_body(namespace="team-b")

    await reconcile.tick(world.services, body, now=NOW)

    ready = cond(world.status_of("chat", "team-b"), "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "NamespaceNotAdmitted"
    assert "spec.nodePool.name" in ready["message"]


async def test_missing_target_deployment(world: Any, pool_body: Any) -> None:
    body = pool_body(targetRef={"kind": "Deployment", "name": "nope"})

    await reconcile.tick(world.services, body, now=NOW)

    status = world.status_of("chat")
    ready = cond(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound")
    assert "spec.targetRef.name" in ready["message"]
    assert "replicas" not in status


async def test_invalid_spec_names_the_field_without_a_traceback(world: Any, pool_body: Any) -> None:
    body = pool_body(replicas={"min": 5, "max": 2})

    await reconcile.tick(world.services, body, now=NOW)

    ready = cond(world.status_of("chat"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.replicas.min" in ready["message"]
    assert "Traceback" not in ready["message"]
    assert world.metrics.fetches == []  # nothing is queried for a pool that cannot be decided on


async def test_off_mode_touches_nothing_and_says_so(world: Any, pool_body: Any) -> None:
    body = pool_body(mode="Off")

    await reconcile.tick(world.services, body, now=NOW)

    status = world.status_of("chat")
    active = cond(status, "Active")
    assert (active["status"], active["reason"]) == ("False", "ModeOff")
    assert cond(status, "Ready")["status"] == "True"
    assert status["mode"] == "Off"
    assert "lastDecision" not in status
    assert world.metrics.fetches == []
    assert world.workloads.writes == []


async def test_recommend_mode_reports_a_decision_but_is_not_active(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = fresh_signals()
    await reconcile.tick(world.services, pool_body(mode="Recommend"), now=NOW)

    status = world.status_of("chat")
    assert cond(status, "Active")["reason"] == "ModeRecommend"
    assert status["lastDecision"]["reasons"]
    assert "recommendedBatching" in status and "desiredReplicas" in status
    assert world.workloads.writes == []
    assert world.batching.applied == []


async def test_events_only_on_transitions(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = fresh_signals()
    body = pool_body()

    first = await reconcile.tick(world.services, body, now=NOW)
    n_after_first = len(world.cluster.events)
    later = NOW + dt.timedelta(seconds=15)
    world.clock.now_s += 15
    await reconcile.tick(world.services, body, now=later, previous_status=first.status)

    assert n_after_first > 0
    assert len(world.cluster.events) == n_after_first  # nothing changed → no new Event
    ready = cond(world.status_of("chat"), "Ready")
    assert ready["lastTransitionTime"] == cond(first.status, "Ready")["lastTransitionTime"]

    world.metrics.error = "Prometheus at http://prom:9090 is unreachable: connection refused"
    world.clock.now_s += 15
    third = await reconcile.tick(
        world.services, body, now=later + dt.timedelta(seconds=15), previous_status=world.status_of("chat")
    )
    assert third.events == (("MetricsUnreachable", "Warning"),)


async def test_unreachable_prometheus_is_reported_not_raised(world: Any, pool_body: Any) -> None:
    world.metrics.error = "Prometheus at http://127.0.0.1:1 is unreachable: connection refused"

    await reconcile.tick(world.services, pool_body(), now=NOW)

    status = world.status_of("chat")
    metrics = cond(status, "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("False", "MetricsUnreachable")
    assert "http://127.0.0.1:1" in metrics["message"]
    assert cond(status, "Ready")["status"] == "True"  # the pool itself is fine
    assert "p99Ms" not in status["signals"]


async def test_pool_without_series_says_how_pods_must_be_labelled(world: Any, pool_body: Any) -> None:
    await reconcile.tick(world.services, pool_body(), now=NOW)

    metrics = cond(world.status_of("chat"), "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("False", "MetricsMissing")
    assert "poolpilot.io/pool" in metrics["message"]


async def test_stale_metrics(world: Any, pool_body: Any) -> None:
    stale = Signals(
        p99_ms=100.0, request_rate_per_s=1.0, age_s=world.settings.prometheus.max_sample_age_s + 1
    )
    world.metrics.signals[("team-a", "chat")] = stale

    await reconcile.tick(world.services, pool_body(), now=NOW)

    assert cond(world.status_of("chat"), "MetricsAvailable")["reason"] == "MetricsStale"


async def test_missing_signal_is_removed_from_status_not_left_stale(world: Any, pool_body: Any) -> None:
    world.metrics.signals[("team-a", "chat")] = fresh_signals(p99_ms=90.0)
    body = pool_body()
    first = await reconcile.tick(world.services, body, now=NOW)
    assert world.status_of("chat")["signals"]["p99Ms"] == 90.0

    world.metrics.signals[("team-a", "chat")] = Signals(request_rate_per_s=3.0, age_s=1.0)
    world.clock.now_s += 30
    await reconcile.tick(world.services, body, now=NOW, previous_status=first.status)

    signals = world.status_of("chat")["signals"]
    assert "p99Ms" not in signals
    assert signals["requestRatePerSecond"] == 3.0


async def test_api_calls_per_steady_tick_are_bounded(world: Any, pool_body: Any) -> None:
    """A steady pool reads its two references and writes at most its status; no Events."""
    world.metrics.signals[("team-a", "chat")] = fresh_signals()
    body = pool_body()
    result = await reconcile.tick(world.services, body, now=NOW)
    for i in range(1, 6):
        world.clock.now_s += 15
        world.cluster.calls = 0
        result = await reconcile.tick(
            world.services,
            body,
            now=NOW + dt.timedelta(seconds=15 * i),
            previous_status=result.status,
            last_write=result.last_write,
        )
        assert result.decision is not None and not result.decision.actions
        # GPUNodePool + namespace reads, and the status only if the policy's memory moved.
        assert world.cluster.calls == 2 + int(result.wrote)
        assert not result.events


async def test_signals_alone_are_refreshed_on_the_heartbeat_not_every_tick(world: Any) -> None:
    from poolpilot.backends.kube import ObjectRef
    from poolpilot.reconcile.status import StatusWriter

    ref = ObjectRef("poolpilot.io/v1alpha1", "InferencePool", "chat", "team-a")
    base = {"mode": "Auto", "policyState": {"version": 1, "replicas": 3}, "signals": {"p99Ms": 120.0}}
    writer = StatusWriter(world.cluster, ref, "inferencepools", last=None, last_write=None, heartbeat_s=60)
    assert await writer.write(base, now=NOW)
    moved = {**base, "signals": {"p99Ms": 121.5}}
    assert not await writer.write(moved, now=NOW + dt.timedelta(seconds=15))  # only signals moved
    learned = {**moved, "policyState": {"version": 1, "replicas": 3, "aMs": 51.0}}
    assert await writer.write(learned, now=NOW + dt.timedelta(seconds=30))  # the memory is written at once

    def entry(t: float, replicas: int, rate: float) -> dict[str, Any]:
        return {"timeS": t, "replicas": replicas, "ratePerS": rate, "replicasAhead": 0}

    state = {"version": 1, "replicas": 3, "aMs": 51.0, "history": [entry(30, 3, 100.0)]}
    assert await writer.write({**learned, "policyState": state}, now=NOW + dt.timedelta(seconds=31))
    # A steady tick's entry repeats the last one (same replicas, demand within 5 %): not worth a write …
    state = {**state, "history": [entry(30, 3, 100.0), entry(45, 3, 102.0)]}
    later = {**learned, "policyState": state, "signals": {"p99Ms": 119.0}}
    assert not await writer.write(later, now=NOW + dt.timedelta(seconds=45))
    # … until the heartbeat; an entry that says something new (demand up 20 %) is written at once.
    assert await writer.write(later, now=NOW + dt.timedelta(seconds=91))  # heartbeat
    assert world.cluster.statuses[("inferencepools", "team-a", "chat")]["signals"] == {"p99Ms": 119.0}
    risen = {**later, "policyState": {**state, "history": [*state["history"], entry(105, 3, 120.0)]}}
    assert await writer.write(risen, now=NOW + dt.timedelta(seconds=105))
