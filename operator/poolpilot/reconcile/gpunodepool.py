"""Reconcile a GPUNodePool: size it from the demand of every pool that draws on it, through its provider.

Each InferencePool publishes its GPU demand (now, and one node lead time ahead) in `status.nodeDemand`;
this reconcile, on the node pool's own timer, sums the demands of the pools that reference it and that
its `namespaceSelector` admits (re-checked here: a pool in a namespace that is not admitted cannot raise
the node count), packs them into whole nodes with `poolpilot.policy.size_node_pool` — the function the
simulator uses — within `nodes.min..max`, and asks the provider for that many nodes. A demand that is
on hold (metrics missing, Recommend mode) or too old never lets the pool shrink.

Status: provider, nodes (provider's count), desiredNodes (asked), readyNodes, gpus, demandGPUs, pools,
lastScaleTime; conditions Ready, ProviderReady, NodesReady (Provisioning, ProvisioningTimedOut) and
NodesLimited (AtMaxNodes). Events when nodes are ordered or released, with the reasons.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poolpilot.api import conditions as cond
from poolpilot.api import types as api
from poolpilot.api import validation
from poolpilot.backends.kube import Cluster, ClusterError, ObjectRef
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import NodePoolProvider, ProviderContext, ProviderError
from poolpilot.policy.nodes import size_node_pool
from poolpilot.policy.types import NodePoolDecision, NodePoolDemand
from poolpilot.reconcile import telemetry
from poolpilot.reconcile.status import StatusWriter
from poolpilot.reconcile.transitions import NORMAL, previous_conditions, transitions

# How long past `provisioningSeconds` a missing node is still "on its way" rather than "timed out".
PROVISIONING_GRACE_FACTOR = 2.0
PROVISIONING_GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class NodePoolReport:
    status: dict[str, Any]
    events: tuple[tuple[str, str], ...]
    ready: bool
    decision: NodePoolDecision | None = None
    wrote: bool = False
    last_write: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One pool's demand as this node pool counts it."""

    namespace: str
    name: str
    demand: NodePoolDemand
    stale: bool


def node_pool_ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = body.get("metadata") or {}
    return ObjectRef(api.API_VERSION, api.GPU_NODE_POOL_KIND, str(meta.get("name", "")), uid=meta.get("uid"))


def _parse_time(raw: Any) -> dt.datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def collect_demands(
    name: str,
    spec: api.GPUNodePoolSpec,
    pools: Sequence[Mapping[str, Any]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    *,
    now: dt.datetime,
    max_age_s: float,
) -> list[PoolEntry]:
    """The demands of the admitted, non-Off pools referencing `name` (pure)."""
    out = []
    for body in pools:
        pool_spec = body.get("spec") or {}
        if (pool_spec.get("nodePool") or {}).get("name") != name or pool_spec.get(
            "mode"
        ) == api.Mode.OFF.value:
            continue
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        if not spec.admits_namespace(namespace_labels.get(namespace, {})):
            continue  # re-checked here: a pool that is not admitted never raises the node count
        raw = (body.get("status") or {}).get("nodeDemand") or {}
        if raw.get("nodePool") != name:
            continue
        try:
            demand = api.NodeDemand.model_validate(raw)
        except ValueError:
            continue
        stale = (now - demand.time).total_seconds() > max_age_s
        out.append(
            PoolEntry(
                namespace,
                str(meta.get("name", "")),
                node_pool_demand(demand, stale=stale),
                stale,
            )
        )
    return out


def node_pool_demand(demand: api.NodeDemand, *, stale: bool = False) -> NodePoolDemand:
    """A pool's published demand as `size_node_pool` takes it (a stale demand holds the node pool)."""
    return NodePoolDemand(
        node_pool=demand.node_pool,
        gpus_now=demand.gpus_now,
        gpus_ahead=demand.gpus_ahead,
        gpus_per_replica=demand.gpus_per_replica,
        hold=demand.hold or stale,
    )


def _nodes_ready_condition(
    spec: api.GPUNodePoolSpec, desired: int, ready: int | None, since: dt.datetime | None, now: dt.datetime
) -> tuple[bool, str, str]:
    if ready is None:
        return False, cond.PROVIDER_ERROR, "the provider cannot tell how many nodes are Ready"
    if ready >= desired:
        return True, cond.NODES_PROVISIONED, f"{ready}/{desired} nodes Ready"
    waited_s = (now - since).total_seconds() if since is not None else math.inf
    limit_s = spec.provisioning_seconds * PROVISIONING_GRACE_FACTOR + PROVISIONING_GRACE_S
    if waited_s > limit_s:
        return (
            False,
            cond.PROVISIONING_TIMED_OUT,
            f"{ready}/{desired} nodes Ready {waited_s:.0f} s after the last change "
            f"(expected within {spec.provisioning_seconds} s): check the provider",
        )
    return False, cond.PROVISIONING, f"{ready}/{desired} nodes Ready, {waited_s:.0f} s after the last change"


async def reconcile(
    cluster: Cluster,
    providers: ProviderContext,
    body: Mapping[str, Any],
    *,
    now: dt.datetime,
    previous_status: Mapping[str, Any] | None = None,
    namespaces: tuple[str, ...] = (),
    demand_max_age_s: float = 120.0,
    heartbeat_s: float = 60.0,
    last_write: dt.datetime | None = None,
) -> NodePoolReport:
    """Size one node pool from its pools' demands (see the module docstring)."""
    ref = node_pool_ref(body)
    generation = (body.get("metadata") or {}).get("generation")
    before = previous_conditions(previous_status)
    conds = before

    def put(type_: str, status: bool, reason: str, message: str) -> None:
        nonlocal conds
        conds = cond.set_condition(
            conds,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            now=now,
            observed_generation=generation,
        )

    prev = dict(previous_status or {})
    status: dict[str, Any] = {"observedGeneration": generation}
    for key in ("lastScaleTime", "desiredNodes"):
        if key in prev:
            status[key] = prev[key]
    events: list[tuple[str, str, str]] = []
    decision = None
    spec, problems = validation.parse_gpu_node_pool(body)
    ready = False
    if spec is None:
        put(cond.READY, False, cond.INVALID_SPEC, "; ".join(map(str, problems)))
    else:
        status["provider"] = spec.provider.name
        try:
            provider = registry.build_provider(ref.name, spec, providers)
            decision, entries = await _size(cluster, provider, ref, spec, namespaces, now, demand_max_age_s)
            events.extend(await _apply(provider, decision, ref, events_only=False))
            await provider.sync()
            ready_nodes = await provider.get_ready_nodes()
        except (ProviderError, ClusterError) as exc:
            put(cond.READY, False, cond.PROVIDER_ERROR, str(exc))
            put(cond.PROVIDER_READY, False, cond.PROVIDER_ERROR, str(exc))
        else:
            ready = True
            if decision.changed:
                status["lastScaleTime"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
            _fill_status(status, spec, decision, entries, ready_nodes)
            put(cond.READY, True, cond.RECONCILED, f"provider {spec.provider.name}: {decision.reasons[0]}")
            put(cond.PROVIDER_READY, True, cond.RECONCILED, f"{spec.provider.name} provider answered")
            ok, reason, message = _nodes_ready_condition(
                spec, decision.nodes, ready_nodes, _parse_time(status.get("lastScaleTime")), now
            )
            put(cond.NODES_READY, ok, reason, message)
            wanted_over = decision.gpus_ahead > spec.nodes.max * spec.gpus_per_node
            if wanted_over:
                put(cond.NODES_LIMITED, True, cond.AT_MAX_NODES, "; ".join(decision.reasons))
            else:
                put(
                    cond.NODES_LIMITED,
                    False,
                    cond.WITHIN_RANGE,
                    f"demand fits within nodes.max {spec.nodes.max}",
                )
            telemetry.record_node_pool(
                ref.name,
                desired=decision.nodes,
                current=decision.current_nodes,
                ready=ready_nodes,
                max_nodes=spec.nodes.max,
                demand_now=decision.gpus_now,
                demand_ahead=decision.gpus_ahead,
            )
    status["conditions"] = [c.to_wire() for c in conds]

    writer = StatusWriter(
        cluster,
        ref,
        api.GPU_NODE_POOL_PLURAL,
        last=previous_status,
        last_write=last_write,
        heartbeat_s=heartbeat_s,
    )
    wrote = await writer.write(status, now=now)
    if wrote:
        telemetry.STATUS_WRITES.labels(api.GPU_NODE_POOL_KIND).inc()
    for c, type_ in transitions(before, conds):
        events.append((type_, c.reason, f"{c.type}={c.status.value}: {c.message}"))
    for type_, reason, message in events:
        await cluster.emit_event(ref, type_=type_, reason=reason, message=message)
    telemetry.TICKS.labels(api.GPU_NODE_POOL_KIND, "ok" if ready else "invalid").inc()
    return NodePoolReport(
        writer.last, tuple((r, t) for t, r, _ in events), ready, decision, wrote, writer.last_write
    )


async def _size(
    cluster: Cluster,
    provider: NodePoolProvider,
    ref: ObjectRef,
    spec: api.GPUNodePoolSpec,
    namespaces: tuple[str, ...],
    now: dt.datetime,
    demand_max_age_s: float,
) -> tuple[NodePoolDecision, list[PoolEntry]]:
    current = await provider.get_nodes()
    pools = await cluster.list_custom_objects(api.API_VERSION, api.INFERENCE_POOL_PLURAL, namespaces)
    labels = await cluster.list_namespace_labels()
    entries = collect_demands(ref.name, spec, pools, labels, now=now, max_age_s=demand_max_age_s)
    decision = size_node_pool(spec, [e.demand for e in entries], current, name=ref.name)
    stale = [f"{e.namespace}/{e.name}" for e in entries if e.stale]
    if stale:
        decision = NodePoolDecision(
            decision.nodes,
            decision.current_nodes,
            decision.gpus_now,
            decision.gpus_ahead,
            (*decision.reasons, f"demand of {', '.join(stale)} is older than {demand_max_age_s:.0f} s: held"),
            decision.hold,
        )
    return decision, entries


async def _apply(
    provider: NodePoolProvider, decision: NodePoolDecision, ref: ObjectRef, *, events_only: bool
) -> list[tuple[str, str, str]]:
    if not decision.changed:
        return []
    await provider.set_nodes(decision.nodes)
    up = decision.nodes > decision.current_nodes
    telemetry.NODEPOOL_CHANGES.labels(ref.name, "up" if up else "down").inc()
    reason = "NodesOrdered" if up else "NodesReleased"
    return [(NORMAL, reason, "; ".join(decision.reasons))]


def _fill_status(
    status: dict[str, Any],
    spec: api.GPUNodePoolSpec,
    decision: NodePoolDecision,
    entries: Sequence[PoolEntry],
    ready_nodes: int,
) -> None:
    status.update(
        nodes=decision.current_nodes,
        desiredNodes=decision.nodes,
        readyNodes=ready_nodes,
        gpus=decision.current_nodes * spec.gpus_per_node,
        demandGPUs=decision.gpus_now,
        pools=[
            api.PoolDemand(
                namespace=e.namespace,
                name=e.name,
                gpus=e.demand.gpus_now,
                gpus_ahead=e.demand.gpus_ahead,
                gpus_per_replica=e.demand.gpus_per_replica,
                hold=e.demand.hold or None,
            ).to_wire()
            for e in sorted(entries, key=lambda e: (e.namespace, e.name))
        ][: api.POOLS_MAX_ITEMS],
    )
