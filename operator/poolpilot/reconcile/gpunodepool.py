"""Reconcile a GPUNodePool: validate, ask its provider how many nodes it has, report.

Sizing the pool from the demand of its InferencePools comes with the policy; this version only
reports the provider, its node count and GPUs, with conditions Ready and ProviderReady.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from poolpilot.api import conditions as cond
from poolpilot.api import types as api
from poolpilot.api import validation
from poolpilot.backends.kube import Cluster, ObjectRef
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.reconcile import telemetry
from poolpilot.reconcile.transitions import previous_conditions, transitions


@dataclass(frozen=True, slots=True)
class NodePoolReport:
    status: dict[str, Any]
    events: tuple[tuple[str, str], ...]
    ready: bool


def node_pool_ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = body.get("metadata") or {}
    return ObjectRef(api.API_VERSION, api.GPU_NODE_POOL_KIND, str(meta.get("name", "")), uid=meta.get("uid"))


async def reconcile(
    cluster: Cluster,
    providers: ProviderContext,
    body: Mapping[str, Any],
    *,
    now: dt.datetime,
    previous_status: Mapping[str, Any] | None = None,
) -> NodePoolReport:
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

    status: dict[str, Any] = {"observedGeneration": generation}
    spec, problems = validation.parse_gpu_node_pool(body)
    ready = False
    if spec is None:
        put(cond.READY, False, cond.INVALID_SPEC, "; ".join(map(str, problems)))
    else:
        status["provider"] = spec.provider.name
        try:
            provider = registry.build_provider(ref.name, spec, providers)
            nodes = await provider.get_nodes()
        except ProviderError as exc:
            put(cond.READY, False, cond.PROVIDER_ERROR, str(exc))
            put(cond.PROVIDER_READY, False, cond.PROVIDER_ERROR, str(exc))
        else:
            ready = True
            status["nodes"] = nodes
            status["gpus"] = nodes * spec.gpus_per_node
            put(cond.READY, True, cond.RECONCILED, f"provider {spec.provider.name} reports {nodes} nodes")
            put(cond.PROVIDER_READY, True, cond.RECONCILED, f"{spec.provider.name} provider answered")
    status["conditions"] = [c.to_wire() for c in conds]

    await cluster.patch_status(ref, api.GPU_NODE_POOL_PLURAL, status)
    events = []
    for c, type_ in transitions(before, conds):
        await cluster.emit_event(
            ref, type_=type_, reason=c.reason, message=f"{c.type}={c.status.value}: {c.message}"
        )
        events.append((c.reason, type_))
    telemetry.TICKS.labels("GPUNodePool", "ok" if ready else "invalid").inc()
    return NodePoolReport(status, tuple(events), ready)
