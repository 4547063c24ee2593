"""Carry a decision into the next tick's `PoolState`, the same way in the operator and the simulator."""

from __future__ import annotations

from dataclasses import replace

from poolpilot.api.types import InferencePoolSpec
from poolpilot.policy.model import prior_model, with_spec_prior
from poolpilot.policy.params import DEFAULT_PARAMS, PolicyParams
from poolpilot.policy.types import BatchingConfig, Decision, PoolState


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


def batching_failed(
    state: PoolState,
    failed: BatchingConfig,
    previous: BatchingConfig | None,
    now_s: float,
    params: PolicyParams = DEFAULT_PARAMS,
    spec: InferencePoolSpec | None = None,
) -> PoolState:
    """The state after a batching rollout of `failed` was rolled back to `previous` at `now_s`.

    The pods run `previous` again, the rollback counts as a change (its cooldown applies — to a reset the
    spec bounds force too, `last_batching_failure_s`), and the failed (delay, instances) setting joins the
    tabu list: the policy does not propose it again before `params.tabu_s` has passed — a reload that
    failed once (out of memory, a bad config) fails again. `spec`: the pool's, so that a pool not yet
    observed starts from the profile it declares (`spec.model.batchLatency`), as `decide` does.
    """
    if spec is not None:
        params = with_spec_prior(spec, params)
    model = state.latency_model or prior_model(params)
    key = (failed.max_queue_delay_us, failed.instance_count)
    tabu = [e for e in model.tabu if (e[0], e[1]) != key and e[2] > now_s]
    tabu.append((key[0], key[1], now_s + params.tabu_s))
    model = replace(model, tabu=tuple(tabu[-params.tabu_max_entries :]))
    return replace(
        state,
        batching=previous,
        latency_model=model,
        last_batching_change_s=now_s,
        last_batching_failure_s=now_s,
    )
