"""InferencePool handlers: one tick daemon per pool, plus create/update/resume/delete hooks.

Why a daemon and not `@kopf.timer`: a timer's interval is fixed per registration, but each pool
sets its own `spec.tickSeconds`. The daemon sleeps the pool's current tickSeconds (its `body` is a
live view, so a new value applies from the next sleep). Create/update/resume only wake the daemon
when the generation changed, so a spec change is reported at once and the daemon stays the single
writer of the pool's status. Deleting a pool sets kopf's stop flag, which the daemon's sleep
watches, so it exits at once; kopf then removes its finalizer. If a tick hangs, kopf cancels it
after `cancellation_backoff` and abandons it after `cancellation_timeout`: deletion never blocks
forever on the operator's own code.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from typing import Any

import kopf

from poolpilot.api import types as api
from poolpilot.handlers.services import Runtime
from poolpilot.reconcile import inferencepool as reconcile
from poolpilot.reconcile import telemetry

Logger = logging.Logger | logging.LoggerAdapter[Any]


def _wake_event(memo: kopf.Memo) -> asyncio.Event:
    event = memo.get("wake")
    if event is None:
        event = memo["wake"] = asyncio.Event()
    assert isinstance(event, asyncio.Event)
    return event


def _nudge(body: kopf.Body, memo: kopf.Memo) -> None:
    """Wake the pool's daemon unless it is reporting (or has reported) this generation."""
    if memo.get("last_generation") != body.get("metadata", {}).get("generation"):
        _wake_event(memo).set()


async def inferencepool_create(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _nudge(body, memo)


async def inferencepool_update(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _nudge(body, memo)


async def inferencepool_resume(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _nudge(body, memo)


async def inferencepool_delete(
    name: str, namespace: str | None, memo: kopf.Memo, logger: Logger, **_: Any
) -> None:
    """Forget the pool's metric series and gauges (the daemon is stopped by kopf)."""
    runtime: Runtime = memo["runtime"]
    runtime.services.signals.forget(namespace or "", name)
    telemetry.forget_pool(namespace or "", name)
    logger.info("InferencePool deleted; its tick stopped")


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, timeout_s: float) -> None:
    """Until the tick is due, the daemon is woken by a spec change, or kopf asks it to stop."""

    async def until_stopped() -> None:
        await stopped.wait()

    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def inferencepool_tick(
    body: kopf.Body, memo: kopf.Memo, logger: Logger, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """Tick the pool every spec.tickSeconds (or at once when woken) until kopf stops the daemon."""
    runtime: Runtime = memo["runtime"]
    settings = runtime.services.settings
    wake = _wake_event(memo)
    while not stopped:
        wake.clear()
        started = time.monotonic()
        snapshot = copy.deepcopy(dict(body))
        # Claimed before the tick: a create/resume handler racing this first tick must not wake us again.
        memo["last_generation"] = snapshot.get("metadata", {}).get("generation")
        previous = memo.get("last_status") or snapshot.get("status")
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        try:
            result = await reconcile.tick(
                runtime.services,
                snapshot,
                now=now,
                previous_status=previous,
                last_write=memo.get("last_write"),
            )
        except asyncio.CancelledError:
            raise
        except Exception:  # keep ticking: a failed API call must not end the pool's daemon
            telemetry.TICKS.labels(api.INFERENCE_POOL_KIND, "error").inc()
            logger.exception("InferencePool tick failed; retrying at the next tick")
        else:
            memo["last_status"] = result.status
            memo["last_write"] = result.last_write
        tick_s = (body.get("spec") or {}).get("tickSeconds") or settings.default_tick_s
        # Fixed rate, not fixed delay: a tick that took a while (a slow API server) does not stretch the
        # pool's cadence beyond tickSeconds.
        await _sleep(wake, stopped, max(0.0, float(tick_s) - (time.monotonic() - started)))


def register(registry: kopf.OperatorRegistry, *, cancellation_timeout_s: float) -> None:
    """Attach the handlers to an explicit registry (no import-time side effects)."""
    resource = (api.GROUP, api.VERSION, api.INFERENCE_POOL_PLURAL)
    kopf.on.create(*resource, registry=registry)(inferencepool_create)
    kopf.on.update(*resource, registry=registry)(inferencepool_update)
    kopf.on.resume(*resource, registry=registry)(inferencepool_resume)
    kopf.on.delete(*resource, registry=registry, optional=True)(inferencepool_delete)
    kopf.daemon(
        *resource,
        registry=registry,
        cancellation_backoff=cancellation_timeout_s,
        cancellation_timeout=cancellation_timeout_s,
    )(inferencepool_tick)
