"""Condition bookkeeping shared by both kinds: read the previous conditions, find what changed.

Events are emitted only for changes, so a pool stuck in one state does not flood the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from poolpilot.api import conditions as cond
from poolpilot.api import types as api

NORMAL: Final = "Normal"
WARNING: Final = "Warning"

_BAD_WHEN_FALSE: Final = frozenset({cond.READY, cond.METRICS_AVAILABLE, cond.PROVIDER_READY})
# Reasons a person must look at whatever the condition type (reported as Warning Events).
_WARNING_REASONS: Final = frozenset(
    {
        cond.CONFLICTING_AUTOSCALER,
        cond.PROVISIONING_TIMED_OUT,
        cond.POD_NOT_CONVERGED,
        cond.OVER_COST_CEILING,
        cond.AT_MAX_REPLICAS,
        cond.AT_MAX_NODES,
    }
)


def previous_conditions(previous_status: Mapping[str, Any] | None) -> tuple[api.Condition, ...]:
    """Conditions of the last written status; unparsable entries are dropped (and so rewritten)."""
    out = []
    for raw in (previous_status or {}).get("conditions") or []:
        try:
            out.append(api.Condition.model_validate(raw))
        except ValueError:
            continue
    return tuple(out)


def transitions(
    before: Sequence[api.Condition], after: Sequence[api.Condition]
) -> list[tuple[api.Condition, str]]:
    """Conditions whose status or reason changed, with the Event type to report them with."""
    changed = []
    for new in after:
        old = cond.get_condition(before, new.type)
        if old is not None and old.status == new.status and old.reason == new.reason:
            continue
        bad = (new.type in _BAD_WHEN_FALSE and new.status == api.ConditionStatus.FALSE) or (
            new.reason in _WARNING_REASONS and new.status != api.ConditionStatus.FALSE
            if new.type in (cond.SCALING_LIMITED, cond.COST_LIMITED, cond.NODES_LIMITED)
            else new.reason in _WARNING_REASONS
        )
        changed.append((new, WARNING if bad else NORMAL))
    return changed
