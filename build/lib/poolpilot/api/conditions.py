"""Condition types, reasons and pure helpers to set them on a status.

Kubernetes conditions have one rule people rely on: `lastTransitionTime` moves only when `status`
changes. `set_condition` keeps that rule; the caller passes `now` (no clock here).
Reasons are CamelCase constants so dashboards and alerts can match on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from poolpilot.api import types

MESSAGE_MAX_CHARS: Final = 32768  # metav1.Condition.message limit; longer messages are cut, not rejected

# ---- condition types
READY: Final = "Ready"  # both kinds: the object is being reconciled without a blocking problem
METRICS_AVAILABLE: Final = "MetricsAvailable"  # InferencePool: the signals needed to decide were present
BATCHING_APPLIED: Final = "BatchingApplied"  # InferencePool: every pod runs the desired batching config
SCALING_LIMITED: Final = "ScalingLimited"  # InferencePool: the decision was clamped by min/max or cost
COST_LIMITED: Final = "CostLimited"  # InferencePool: meeting the objective would exceed the cost ceiling
NODES_LIMITED: Final = "NodesLimited"  # GPUNodePool: demand exceeds nodes.max
PROVIDER_READY: Final = "ProviderReady"  # GPUNodePool: the provider accepted the last change
NODES_READY: Final = "NodesReady"  # GPUNodePool: every node asked for is Ready
ACTIVE: Final = "Active"  # InferencePool: may the operator change anything (False in Recommend, Off)

# ---- reasons
RECONCILED: Final = "Reconciled"
INVALID_SPEC: Final = "InvalidSpec"
TARGET_NOT_FOUND: Final = "TargetNotFound"
NODE_POOL_NOT_FOUND: Final = "NodePoolNotFound"
NAMESPACE_NOT_ADMITTED: Final = "NamespaceNotAdmitted"
REPLICA_DOES_NOT_FIT: Final = "ReplicaDoesNotFitNode"
MODE_OFF: Final = "ModeOff"
MODE_AUTO: Final = "ModeAuto"
MODE_RECOMMEND: Final = "ModeRecommend"
METRICS_PRESENT: Final = "MetricsPresent"
METRICS_MISSING: Final = "MetricsMissing"
METRICS_STALE: Final = "MetricsStale"
METRICS_UNREACHABLE: Final = "MetricsUnreachable"
NODE_POOL_INVALID: Final = "NodePoolInvalid"
OBSERVE_ONLY: Final = "ObserveOnly"
POOL_NOT_READY: Final = "PoolNotReady"
BATCHING_IN_SYNC: Final = "BatchingInSync"
BATCHING_ROLLING_OUT: Final = "BatchingRollingOut"
BATCHING_ROLLED_BACK: Final = "BatchingRolledBack"
AT_MIN_REPLICAS: Final = "AtMinReplicas"
AT_MAX_REPLICAS: Final = "AtMaxReplicas"
WITHIN_RANGE: Final = "DesiredWithinRange"
OVER_COST_CEILING: Final = "OverCostCeiling"
AT_MAX_NODES: Final = "AtMaxNodes"
PROVIDER_ERROR: Final = "ProviderError"
PROVISIONING: Final = "Provisioning"
PROVISIONING_TIMED_OUT: Final = "ProvisioningTimedOut"
NODES_PROVISIONED: Final = "NodesProvisioned"
METRICS_INVALID: Final = "MetricsInvalid"
CONFLICTING_AUTOSCALER: Final = "ConflictingAutoscaler"
NOT_ACTING: Final = "NotActing"
POD_NOT_CONVERGED: Final = "PodNotConverged"
COST_UNKNOWN: Final = "CostUnknown"
WITHIN_COST: Final = "WithinCostCeiling"


def get_condition(conditions: Sequence[types.Condition], type_: str) -> types.Condition | None:
    """The condition of `type_`, or None."""
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: Sequence[types.Condition],
    *,
    type_: str,
    status: types.ConditionStatus | bool,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> tuple[types.Condition, ...]:
    """Conditions with `type_` set (added or replaced, order kept).

    `lastTransitionTime` is `now` only when the status changes (or the condition is new); a new reason
    or message alone does not move it, as in Kubernetes' meta.SetStatusCondition.
    """
    if isinstance(status, bool):
        status = types.ConditionStatus.TRUE if status else types.ConditionStatus.FALSE
    old = get_condition(conditions, type_)
    transition = now if old is None or old.status != status else old.last_transition_time
    new = types.Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message[:MESSAGE_MAX_CHARS],
        last_transition_time=transition,
        observed_generation=observed_generation,
    )
    if old is None:
        return (*conditions, new)
    return tuple(new if c.type == type_ else c for c in conditions)


def remove_condition(conditions: Sequence[types.Condition], type_: str) -> tuple[types.Condition, ...]:
    """Conditions without `type_`."""
    return tuple(c for c in conditions if c.type != type_)


def is_true(conditions: Sequence[types.Condition], type_: str) -> bool:
    """Whether the condition exists and is True."""
    cond = get_condition(conditions, type_)
    return cond is not None and cond.status == types.ConditionStatus.TRUE
