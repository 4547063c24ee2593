"""One pool tick, the same in the operator and in the simulator: carry state, decide, advance.

The operator's reconcile and the simulator's PoolPilot controller both call `pool_tick` (and size node
pools with `poolpilot.policy.nodes.size_node_pool` from the demands it returns), so every simulator
figure is evidence about the operator's decisions. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from poolpilot.api.types import GPUNodePoolSpec, InferencePoolSpec
from poolpilot.policy.decide import decide
from poolpilot.policy.params import DEFAULT_PARAMS, PolicyParams
from poolpilot.policy.state import advance
from poolpilot.policy.types import BatchingConfig, Decision, PolicyAction, PoolState, Signals


@dataclass(frozen=True, slots=True)
class PoolTick:
    """A tick's outcome: the decision (apply only its `actions`) and the state to persist.

    `state` assumes every action was applied; when the caller could apply only some (a scale refused with
    a conflict, say), `state_after(applied)` is the state to persist instead.
    """

    decision: Decision
    state: PoolState
    prior: PoolState
    now_s: float

    def state_after(self, applied: tuple[PolicyAction, ...]) -> PoolState:
        """The state to persist when only `applied` of the decision's actions took effect."""
        if set(applied) == set(self.decision.actions):
            return self.state
        return advance(self.prior, replace(self.decision, actions=applied), self.now_s)


def pool_tick(
    spec: InferencePoolSpec,
    state: PoolState | None,
    signals: Signals,
    now_s: float,
    *,
    replicas: int,
    batching: BatchingConfig | None,
    node_pool: GPUNodePoolSpec | None = None,
    paid_replicas: int | None = None,
    params: PolicyParams = DEFAULT_PARAMS,
    hold_reason: str | None = None,
) -> PoolTick:
    """Decide for one pool at `now_s` and return the state to carry into the next tick.

    `replicas` is the workload's desired replicas read this tick (the truth: a person or another
    controller may have changed it). `batching` is what the pods run, used only on the first tick
    (`state` None); afterwards the state carries the last applied setting, which the caller converges
    the pods to. `paid_replicas`: replicas this pool may run on node GPUs already paid for (see
    `paid_replicas_on`), None when unknown. `hold_reason`: hold, saying why (the caller cannot trust
    the signals).
    """
    if state is None:
        state = PoolState(replicas=replicas, batching=batching)
    state = replace(state, replicas=replicas)
    decision = decide(
        spec,
        state,
        signals,
        now_s,
        node_pool=node_pool,
        params=params,
        paid_replicas=paid_replicas,
        hold_reason=hold_reason,
    )
    return PoolTick(decision=decision, state=advance(state, decision, now_s), prior=state, now_s=now_s)


def paid_replicas_on(node_pool: GPUNodePoolSpec, nodes: int, other_gpus: int, gpus_per_replica: int) -> int:
    """Replicas of one pool that fit on the GPUs of `nodes` requested nodes left by the other tenants.

    Nodes are bought whole, so a GPU paid for and unused is free capacity for the pool that asks
    (`other_gpus`: GPUs the other pools drawing on the node pool demand now).
    """
    gpr = max(1, gpus_per_replica)
    per_node = node_pool.gpus_per_node // gpr
    free_gpus = max(0, nodes * node_pool.gpus_per_node - max(0, other_gpus))
    return min(nodes * per_node, free_gpus // gpr)
