"""Carry a decision into the next tick's `PoolState`, the same way in the operator and the simulator."""

from __future__ import annotations

from dataclasses import replace

from poolpilot.policy.types import Decision, PoolState


def advance(state: PoolState, decision: Decision, now_s: float) -> PoolState:
    """The state after `decision` was applied at `now_s` (only its `actions` count as applied).

    Model and history are always carried (Recommend mode keeps learning); replicas, batching and the
    change times move only for the actions taken.
    """
    new = replace(state, latency_model=decision.latency_model, history=decision.history)
    if "scale" in decision.actions and decision.replicas != state.replicas:
        new = replace(
            new,
            replicas=decision.replicas,
            last_scale_change_s=now_s,
            last_scale_up_s=now_s if decision.replicas > state.replicas else state.last_scale_up_s,
        )
    if "batching" in decision.actions:
        new = replace(new, batching=decision.batching, last_batching_change_s=now_s)
    return new
