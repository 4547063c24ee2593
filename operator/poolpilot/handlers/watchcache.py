"""Feed `WatchCache` from kopf's watch streams: GPUNodePools and Namespaces, as they change.

`kopf.on.event` sees every event of the watch (the initial listing included, as events without a type),
and keeps no state on the objects (no annotations, no finalizer). The GPUNodePool watch is the one the
node-pool timers already run on; the Namespace watch is one more stream (the chart's ClusterRole already
grants list and watch on namespaces, for admission).
"""

from __future__ import annotations

from typing import Any

import kopf

from poolpilot.api import types as api
from poolpilot.handlers.services import Runtime


async def gpunodepool_event(
    event: kopf.RawEvent, name: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    if event.get("type") == "DELETED":
        runtime.cache.drop_object(api.GPU_NODE_POOL_PLURAL, name or "")
    else:
        runtime.cache.put_object(api.GPU_NODE_POOL_PLURAL, dict(body))


async def namespace_event(
    event: kopf.RawEvent, name: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo["runtime"]
    if event.get("type") == "DELETED":
        runtime.cache.drop_namespace(name or "")
    else:
        runtime.cache.put_namespace(name or "", dict(labels))


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(api.GROUP, api.VERSION, api.GPU_NODE_POOL_PLURAL, registry=registry)(gpunodepool_event)
    kopf.on.event("", "v1", "namespaces", registry=registry)(namespace_event)
