"""Bring every Ready pod of a pool to the pool's batching setting, one pod (or a few) at a time.

A rollout is a change of the pool's setting (the policy decided it); convergence is the same work for a
pod that came up later with its `config.pbtxt` (a scale-out, a restart: Triton forgets an override when it
restarts). Each step is a reload through Triton's model-repository API, read back and checked ready
(`poolpilot.backends.batching`). A failure during a rollout rolls the pods already changed back to the
previous setting, and the failed setting joins the policy's tabu list (`policy.batching_failed`).

The rollout lives in `status.rollout` (phase, target, previous) and is written before the first pod is
touched, then after every pod: an operator killed mid-rollout reads it back and finishes the rollout (or
the rollback) from what the pods run — the pods' configs, read every tick, are the truth.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from poolpilot.api import types as api
from poolpilot.backends.batching import (
    BatchingActuator,
    BatchingError,
    Running,
    batching_of,
    same_batching,
    with_batching,
)
from poolpilot.policy.types import BatchingConfig
from poolpilot.reconcile.observe import PodView

logger = logging.getLogger(__name__)


def to_status(b: BatchingConfig) -> api.StatusBatching:
    return api.StatusBatching(
        max_queue_delay_microseconds=b.max_queue_delay_us,
        max_batch_size=b.max_batch_size,
        preferred_batch_size=list(b.preferred_batch_sizes) or None,
        instance_count=b.instance_count,
        queue_timeout_microseconds=b.queue_timeout_us,
        max_queue_size=b.max_queue_size or None,
    )


def from_status(s: api.StatusBatching) -> BatchingConfig:
    return BatchingConfig(
        max_queue_delay_us=s.max_queue_delay_microseconds or 0,
        max_batch_size=s.max_batch_size or 0,
        preferred_batch_sizes=tuple(s.preferred_batch_size or ()),
        instance_count=s.instance_count or 1,
        queue_timeout_us=s.queue_timeout_microseconds,
        max_queue_size=s.max_queue_size or 0,
    )


@dataclass(frozen=True, slots=True)
class Split:
    """Ready pods by what they run relative to a setting."""

    on_target: tuple[PodView, ...]
    to_change: tuple[PodView, ...]
    unknown: tuple[PodView, ...]  # could not be read, or the model is not ready there


def split(pods: Sequence[PodView], target: BatchingConfig | None) -> Split:
    """Which pods run `target` (None = no setting yet: every readable pod counts as on target)."""
    on, change, unknown = [], [], []
    for view in pods:
        if view.running is None:
            unknown.append(view)
        elif target is None or same_batching(view.running.batching, target):
            on.append(view)
        else:
            change.append(view)
    return Split(tuple(on), tuple(change), tuple(unknown))


@dataclass(frozen=True, slots=True)
class Step:
    """What one convergence pass did."""

    changed: tuple[str, ...]  # pods reloaded onto the target
    failed: str | None  # the pod (and why) whose reload failed; the pass stopped there
    remaining: int  # pods still to change (time budget spent, or stopped by a failure)
    on_target: int  # Ready pods that run the target after the pass


ProgressFn = Callable[[int], Awaitable[None]]


async def converge(
    actuator: BatchingActuator,
    pods: Sequence[PodView],
    *,
    model: str,
    port: int,
    target: BatchingConfig,
    parallelism: int,
    budget_s: float,
    on_progress: ProgressFn | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Step:
    """Reload the pods that do not run `target`, `parallelism` at a time, until done, a failure, or
    `budget_s` has passed (the rest continues next tick). Calls `on_progress(on_target)` after each group."""
    parts = split(pods, target)
    todo = list(parts.to_change)
    on_target = len(parts.on_target)
    changed: list[str] = []
    start = clock()
    while todo and clock() - start < budget_s:
        group, todo = todo[:parallelism], todo[parallelism:]
        results = await _apply_group(actuator, group, model=model, port=port, target=target)
        for view, error in zip(group, results, strict=True):
            if error is None:
                changed.append(view.name)
                on_target += 1
        failure = next((f"{v.name}: {e}" for v, e in zip(group, results, strict=True) if e), None)
        if on_progress is not None:
            await on_progress(on_target)
        if failure is not None:
            return Step(tuple(changed), failure, len(todo), on_target)
    return Step(tuple(changed), None, len(todo), on_target)


async def _apply_group(
    actuator: BatchingActuator,
    group: Sequence[PodView],
    *,
    model: str,
    port: int,
    target: BatchingConfig,
) -> list[str | None]:
    async def one(view: PodView) -> str | None:
        assert view.running is not None
        try:
            await actuator.apply(view.pod.url(port), model, target, view.running)
        except BatchingError as exc:
            logger.warning("batching reload failed on pod %s: %s", view.name, exc)
            return str(exc)
        return None

    return list(await asyncio.gather(*(one(v) for v in group)))


def after(pods: Sequence[PodView], changed: Sequence[str], target: BatchingConfig) -> tuple[PodView, ...]:
    """The pods as they are once those named in `changed` were reloaded onto `target`."""
    names = set(changed)
    out = []
    for view in pods:
        if view.name in names and view.running is not None:
            config = with_batching(view.running.config, target)
            view = replace(view, running=Running(config, batching_of(config)))
        out.append(view)
    return tuple(out)


def started(
    target: BatchingConfig, previous: BatchingConfig | None, now: dt.datetime, total: int, on_target: int
) -> api.Rollout:
    return api.Rollout(
        phase=api.RolloutPhase.PROGRESSING,
        target=to_status(target),
        previous=to_status(previous) if previous is not None else None,
        started_at=now,
        updated_replicas=on_target,
        total_replicas=total,
        message=f"rolling out to {total} Ready pods, {on_target} already on the new setting",
    )


def rolling_back(rollout: api.Rollout, failure: str) -> api.Rollout:
    return replace_rollout(
        rollout,
        phase=api.RolloutPhase.ROLLING_BACK,
        message=f"reload failed ({failure}); rolling the changed pods back to the previous setting",
    )


def replace_rollout(rollout: api.Rollout, **changes: object) -> api.Rollout:
    return rollout.model_copy(update=changes)


__all__ = [
    "Split",
    "Step",
    "after",
    "converge",
    "from_status",
    "rolling_back",
    "split",
    "started",
    "to_status",
]
