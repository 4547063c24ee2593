"""A GPUNodePool is sized from the demands its admitted pools publish (fakes; the real reconcile)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from poolpilot.backends.nodepools.base import ProviderContext
from poolpilot.reconcile import gpunodepool

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)


def _pool(
    world: Any, pool_body: Any, name: str, namespace: str, *, now_gpus: int, ahead: int, **kw: Any
) -> None:
    body = pool_body(name=name, namespace=namespace, **kw.pop("spec", {}))
    world.cluster.add("inferencepools", body)
    demand = {
        "nodePool": "a100",
        "gpusNow": now_gpus,
        "gpusAhead": ahead,
        "gpusPerReplica": 1,
        "hold": kw.get("hold", False),
        "time": (kw.get("time", NOW)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    world.cluster.statuses[("inferencepools", namespace, name)] = {"nodeDemand": demand}


async def _size(world: Any, body: dict[str, Any], ctx: ProviderContext) -> gpunodepool.NodePoolReport:
    return await gpunodepool.reconcile(world.cluster, ctx, body, now=NOW)


async def test_demands_of_admitted_pools_are_summed_and_packed(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    body = node_pool_body(provider={"fake": {"nodes": 1}}, nodes={"min": 0, "max": 4})
    ctx = ProviderContext()
    _pool(world, pool_body, "chat", "team-a", now_gpus=6, ahead=6)
    _pool(world, pool_body, "code", "team-a", now_gpus=5, ahead=7)
    result = await _size(world, body, ctx)

    assert result.decision is not None and result.decision.nodes == 2  # 6 + 7 = 13 GPUs → 2 nodes of 8
    assert ctx.fake_nodes["a100"] == 2
    status = world.cluster.statuses[("gpunodepools", None, "a100")]
    assert status["desiredNodes"] == 2 and status["demandGPUs"] == 11
    assert [(p["name"], p["gpus"]) for p in status["pools"]] == [("chat", 6), ("code", 5)]
    ordered = [e for e in world.cluster.events if e.reason == "NodesOrdered"]
    assert len(ordered) == 1 and "1→2" in ordered[0].message


async def test_a_pool_in_a_namespace_not_admitted_cannot_raise_nodes(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    """team-b is labelled gpu-tier=t4; the node pool admits gpu-tier=a100 only."""
    body = node_pool_body(provider={"fake": {"nodes": 1}}, nodes={"min": 1, "max": 4})
    ctx = ProviderContext()
    _pool(world, pool_body, "greedy", "team-b", now_gpus=32, ahead=32)
    result = await _size(world, body, ctx)

    assert result.decision is not None and result.decision.nodes == 1
    assert ctx.fake_nodes["a100"] == 1
    assert world.cluster.statuses[("gpunodepools", None, "a100")]["pools"] == []


async def test_held_or_stale_demands_never_shrink_the_pool(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    body = node_pool_body(provider={"fake": {"nodes": 3}}, nodes={"min": 0, "max": 4})
    ctx = ProviderContext()
    _pool(world, pool_body, "chat", "team-a", now_gpus=2, ahead=2, time=NOW - dt.timedelta(minutes=10))
    result = await _size(world, body, ctx)
    assert result.decision is not None and result.decision.nodes == 3
    assert any("older than" in r for r in result.decision.reasons)

    _pool(world, pool_body, "chat", "team-a", now_gpus=2, ahead=2, hold=True)
    result = await _size(world, body, ctx)
    assert result.decision is not None and result.decision.nodes == 3

    _pool(world, pool_body, "chat", "team-a", now_gpus=2, ahead=2)
    result = await _size(world, body, ctx)
    assert result.decision is not None and result.decision.nodes == 1
    assert any(e.reason == "NodesReleased" for e in world.cluster.events)


async def test_demand_over_max_is_capped_and_reported(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    body = node_pool_body(provider={"fake": {"nodes": 1}}, nodes={"min": 0, "max": 2})
    _pool(world, pool_body, "chat", "team-a", now_gpus=30, ahead=30)
    await _size(world, body, ProviderContext())

    status = world.cluster.statuses[("gpunodepools", None, "a100")]
    limited = next(c for c in status["conditions"] if c["type"] == "NodesLimited")
    assert (limited["status"], limited["reason"]) == ("True", "AtMaxNodes")
    assert status["desiredNodes"] == 2
    assert any(e.reason == "AtMaxNodes" and e.type == "Warning" for e in world.cluster.events)


async def test_off_pools_are_not_counted(world: Any, pool_body: Any, node_pool_body: Any) -> None:
    body = node_pool_body(provider={"fake": {"nodes": 1}}, nodes={"min": 0, "max": 4})
    _pool(world, pool_body, "chat", "team-a", now_gpus=20, ahead=20, spec={"mode": "Off"})
    result = await _size(world, body, ProviderContext())
    assert result.decision is not None and result.decision.nodes == 0


async def test_nodes_not_ready_long_after_the_order_is_reported_as_timed_out(
    world: Any, pool_body: Any, node_pool_body: Any
) -> None:
    from poolpilot.backends.nodepools import fake

    body = node_pool_body(provider={"fake": {"nodes": 1}}, nodes={"min": 0, "max": 4}, provisioningSeconds=60)
    ctx = ProviderContext()
    _pool(world, pool_body, "chat", "team-a", now_gpus=12, ahead=12)

    async def never_ready(self: Any) -> int:
        return 1

    original = fake.FakeNodePool.get_ready_nodes
    fake.FakeNodePool.get_ready_nodes = never_ready  # type: ignore[method-assign]
    try:
        first = await gpunodepool.reconcile(world.cluster, ctx, body, now=NOW)
        nodes_ready = next(c for c in first.status["conditions"] if c["type"] == "NodesReady")
        assert (nodes_ready["status"], nodes_ready["reason"]) == ("False", "Provisioning")
        later = NOW + dt.timedelta(seconds=400)
        _pool(world, pool_body, "chat", "team-a", now_gpus=12, ahead=12, time=later)
        second = await gpunodepool.reconcile(
            world.cluster, ctx, body, now=later, previous_status=first.status
        )
    finally:
        fake.FakeNodePool.get_ready_nodes = original  # type: ignore[method-assign]
    nodes_ready = next(c for c in second.status["conditions"] if c["type"] == "NodesReady")
    assert (nodes_ready["status"], nodes_ready["reason"]) == ("False", "ProvisioningTimedOut")
    assert any(e.reason == "ProvisioningTimedOut" and e.type == "Warning" for e in world.cluster.events)
