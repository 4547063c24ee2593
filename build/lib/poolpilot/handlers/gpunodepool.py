"""GPUNodePool handlers: a timer per node pool sizes it from the demands of its pools.

A timer, not event handlers: demand changes arrive in InferencePool statuses, not in the node pool's own
object, so the node pool is sized on its own clock (`settings.node_pool_interval_s`). No required delete
handler, so kopf puts no finalizer on node pools: deleting one never waits for the operator (its pools
report NodePoolNotFound on their next tick).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from typing import Any

import kopf

from poolpilot.api import types as api
from poolpilot.handlers.services import Runtime
from poolpilot.reconcile import gpunodepool as reconcile
from poolpilot.reconcile import telemetry


async def gpunodepool_timer(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo["runtime"]
    settings = runtime.services.settings
    snapshot = copy.deepcopy(dict(body))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = await reconcile.reconcile(
        runtime.services.cluster,
        runtime.providers,
        snapshot,
        now=now,
        previous_status=memo.get("last_status") or snapshot.get("status"),
        namespaces=settings.namespaces,
        demand_max_age_s=settings.demand_max_age_s,
        heartbeat_s=settings.status_heartbeat_s,
        last_write=memo.get("last_write"),
    )
    memo["last_status"] = result.status
    memo["last_write"] = result.last_write


async def gpunodepool_delete(
    name: str, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> None:
    telemetry.forget_node_pool(name)
    logger.info("GPUNodePool %s deleted; pools referencing it will report NodePoolNotFound", name)


def register(registry: kopf.OperatorRegistry, *, interval_s: float) -> None:
    resource = (api.GROUP, api.VERSION, api.GPU_NODE_POOL_PLURAL)
    kopf.timer(*resource, registry=registry, interval=interval_s, initial_delay=0)(gpunodepool_timer)
    kopf.on.delete(*resource, registry=registry, optional=True)(gpunodepool_delete)
