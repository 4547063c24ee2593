"""GPUNodePool handlers: validate and report provider state on create/update/resume.

No daemon and no required delete handler, so kopf puts no finalizer on node pools: deleting one
never waits for the operator. InferencePools that referenced it report NodePoolNotFound on their
next tick.
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


async def _reconcile(body: kopf.Body, memo: kopf.Memo) -> None:
    runtime: Runtime = memo["runtime"]
    snapshot = copy.deepcopy(dict(body))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = await reconcile.reconcile(
        runtime.services.cluster,
        runtime.providers,
        snapshot,
        now=now,
        previous_status=snapshot.get("status"),
    )
    memo["last_status"] = result.status


async def gpunodepool_create(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _reconcile(body, memo)


async def gpunodepool_update(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _reconcile(body, memo)


async def gpunodepool_resume(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await _reconcile(body, memo)


async def gpunodepool_delete(
    name: str, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> None:
    logger.info("GPUNodePool %s deleted; pools referencing it will report NodePoolNotFound", name)


def register(registry: kopf.OperatorRegistry) -> None:
    resource = (api.GROUP, api.VERSION, api.GPU_NODE_POOL_PLURAL)
    kopf.on.create(*resource, registry=registry)(gpunodepool_create)
    kopf.on.update(*resource, registry=registry)(gpunodepool_update)
    kopf.on.resume(*resource, registry=registry)(gpunodepool_resume)
    kopf.on.delete(*resource, registry=registry, optional=True)(gpunodepool_delete)
