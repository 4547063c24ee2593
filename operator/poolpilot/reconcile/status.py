"""Write a status only when it changed, and only what changed.

A steady pool must not cost an API write per tick: its signals move a little every tick, but nothing a
person or another controller acts on. So the status is written at once when something *material* changes
(a decision, a condition's status or reason, a rollout step, the node demand), and otherwise refreshed at
least every `heartbeat_s` (signals, the policy's memory, messages with figures). The write is the RFC 7386
merge patch from what the apiserver has to what we want: keys that disappear are sent as null.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from poolpilot.backends.kube import Cluster, ObjectRef, merge_patch

# Parts of an InferencePool/GPUNodePool status that move on a steady pool; refreshed on the heartbeat.
# `policyState` is NOT among them: a restarted operator must find the policy's memory, so its fit, floors,
# tabu list and cooldowns are written when they change. Its history gets one entry per tick; on a steady
# pool the new entries repeat the last one (same replicas, rate within HISTORY_RATE_STEP), so the history
# counts as changed only when an entry says something new — see `_history_signature`.
_VOLATILE_KEYS = frozenset({"signals", "latencyModel", "costPer1kTokensUSD", "predictedP99Ms", "gpus"})
HISTORY_RATE_STEP = 0.05
"""Relative demand change that makes a history entry new (5 %: below what the policy's margin covers)."""


def merge_patch_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns `old` into `new` (objects recursed, lists and scalars replaced)."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch_diff(before, value)
            if sub:
                patch[key] = sub
        elif before != value or key not in old:
            patch[key] = copy.deepcopy(value)
    return patch


def material(status: Mapping[str, Any]) -> dict[str, Any]:
    """What of a status matters between heartbeats (see module docstring)."""
    out: dict[str, Any] = {k: v for k, v in status.items() if k not in _VOLATILE_KEYS}
    out["conditions"] = sorted(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []
    )
    decision = status.get("lastDecision")
    if isinstance(decision, Mapping):
        out["lastDecision"] = decision.get("action")
    demand = status.get("nodeDemand")
    if isinstance(demand, Mapping):
        out["nodeDemand"] = {k: v for k, v in demand.items() if k != "time"}
    state = status.get("policyState")
    if isinstance(state, Mapping):
        out["policyState"] = {k: v for k, v in state.items() if k != "history"}
        out["policyState"]["history"] = _history_signature(state.get("history"))
    return out


def _history_signature(history: Any) -> list[tuple[Any, ...]]:
    """The history as runs of like entries: (replicas, replicasAhead, ready, demand at the run's start).

    An entry joins the current run when it has the same replicas, node ask and ready count (the policy
    learns only once the ready count has held: a restarted operator must see when it changed) and its
    demand is within
    HISTORY_RATE_STEP of the run's first; so a restarted operator misses at most the entries written since
    the last heartbeat, each like the last one it finds.
    """
    runs: list[tuple[Any, ...]] = []
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, Mapping):
            continue
        key = (entry.get("replicas"), entry.get("replicasAhead"), entry.get("ready"))
        rate = entry.get("ratePerS")
        if runs and runs[-1][:3] == key and _close(runs[-1][3], rate):
            continue
        runs.append((*key, rate))
    return runs


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and math.isfinite(a) and math.isfinite(b):
        return abs(b - a) <= HISTORY_RATE_STEP * max(abs(a), 1e-9)
    return bool(a == b)


class StatusWriter:
    """Tracks what the apiserver holds for one object's status and writes the difference."""

    def __init__(
        self,
        cluster: Cluster,
        ref: ObjectRef,
        plural: str,
        *,
        last: Mapping[str, Any] | None,
        last_write: dt.datetime | None,
        heartbeat_s: float,
    ) -> None:
        self._cluster = cluster
        self.ref = ref
        self._plural = plural
        self.last: dict[str, Any] = copy.deepcopy(dict(last or {}))
        self.last_write = last_write
        self._heartbeat_s = heartbeat_s
        self.writes = 0

    async def patch(self, partial: Mapping[str, Any], *, now: dt.datetime) -> None:
        """Write `partial` now (a rollout step: must be durable before the next pod is touched)."""
        patch = merge_patch_diff(
            {k: self.last[k] for k in partial if k in self.last},
            {k: v for k, v in partial.items() if v is not None},
        )
        if not patch:
            return
        await self._cluster.patch_status(self.ref, self._plural, patch)
        self.last = merge_patch(self.last, patch)
        self.writes += 1
        self.last_write = now

    async def write(self, status: Mapping[str, Any], *, now: dt.datetime) -> bool:
        """Write `status` (the whole desired status) if it changed materially or the heartbeat is due."""
        patch = merge_patch_diff(self.last, status)
        if not patch:
            return False
        due = self.last_write is None or (now - self.last_write).total_seconds() >= self._heartbeat_s
        if not due and material(self.last) == material(status):
            return False
        await self._cluster.patch_status(self.ref, self._plural, patch)
        self.last = merge_patch(self.last, patch)
        self.writes += 1
        self.last_write = now
        return True
