"""One tick of an InferencePool: observe → decide → act → report.

- observe (`reconcile.observe`): the spec and what it refers to, the workload's `/scale`, its Ready pods and
  what each runs, the pool's signals, autoscalers it would fight;
- decide: the policy's memory is read back from `status.policyState` and `poolpilot.policy.pool_tick` —
  the same tick the simulator runs — decides;
- act (Auto mode only, and only without a conflicting autoscaler): replicas through `/scale` (conditioned
  on the resourceVersion read this tick), batching rolled out pod by pod (`reconcile.rollout`), and the
  GPU demand published in `status.nodeDemand` for the GPUNodePool's own reconcile;
- report: the status (written only when something changed, `reconcile.status`), Events for decisions and
  condition transitions, the operator's metrics.

Nothing raised by a backend reaches kopf as a traceback: API errors become conditions and holds.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from poolpilot.api import conditions as cond
from poolpilot.api import types as api
from poolpilot.backends.batching import same_batching
from poolpilot.backends.kube import Cluster, ClusterError, ObjectRef
from poolpilot.backends.workloads import ScaleConflict
from poolpilot.policy import PoolTick, batching_failed, paid_replicas_on, pool_tick
from poolpilot.policy.nodes import size_node_pool
from poolpilot.policy.persist import StateFormatError, state_from_wire, state_to_wire
from poolpilot.policy.types import BatchingConfig, Decision, NodePoolDemand, PolicyAction, PoolState, Signals
from poolpilot.reconcile import rollout as ro
from poolpilot.reconcile import telemetry
from poolpilot.reconcile.gpunodepool import node_pool_demand
from poolpilot.reconcile.observe import (
    Observed,
    PodView,
    Services,
    common_batching,
    observe,
    pool_ref,
    target_ref,
    tokens_per_s,
)
from poolpilot.reconcile.status import StatusWriter
from poolpilot.reconcile.transitions import NORMAL, WARNING, previous_conditions, transitions

logger = logging.getLogger(__name__)

__all__ = ["Services", "TickReport", "pool_ref", "tick"]


@dataclass(frozen=True, slots=True)
class TickReport:
    """What the tick concluded and wrote."""

    status: dict[str, Any]  # the status as the apiserver holds it after the tick (as far as we know)
    events: tuple[tuple[str, str], ...] = ()  # (reason, type) of the Events emitted
    ready: bool = False
    wrote: bool = False
    last_write: dt.datetime | None = None
    decision: Decision | None = None
    conditions: tuple[api.Condition, ...] = ()


# -------------------------------------------------------------------------------------------- decide


@dataclass(frozen=True, slots=True)
class Cost:
    """Cost per 1k tokens now, and the replica cap the cost ceiling implies (None = no cap)."""

    per_1k_tokens_usd: float = math.nan
    cap_replicas: int | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The decision and everything the tick needs to act on it and explain it."""

    tick: PoolTick
    setting_before: BatchingConfig | None  # what the pods were to run before this tick
    ready_on_setting: int
    refused: str | None  # a conflicting autoscaler: decided as Recommend, nothing applied
    cost: Cost
    state_note: str | None  # the policy memory could not be read back

    @property
    def decision(self) -> Decision:
        return self.tick.decision


def _restore_state(previous: Mapping[str, Any] | None) -> tuple[PoolState | None, str | None]:
    doc = (previous or {}).get("policyState")
    if not doc:
        return None, None
    try:
        return state_from_wire(doc), None
    except StateFormatError as exc:
        return None, f"policy memory in status unreadable ({exc}): starting fresh"


def _paid_replicas(observed: Observed, ref: ObjectRef, previous: Mapping[str, Any] | None) -> int | None:
    """Replicas this pool may run on the node pool's requested GPUs left by its other tenants, once the
    node pool has read the demand this pool published last tick.

    The node pool reconciles on its own clock, so its `desiredNodes` can predate this pool's last
    demand. Read as it stands, a node this pool just released still looks paid for, and "fill paid
    nodes" puts the released replicas straight back (seen on the sandbox: 8→4 by a release, 4→8 five
    seconds later, the node never removed). Sized again with that demand by the node pool's own rule
    (`size_node_pool`), the paid nodes are those the simulator sees, where the node pool is sized
    inside the tick.
    """
    spec, np = observed.spec, observed.node_pool
    if spec is None or np is None or spec.node_pool is None:
        return None
    status = observed.node_pool_status
    nodes = status.get("desiredNodes", status.get("nodes"))
    if not isinstance(nodes, int):
        return None
    pools = status.get("pools") or []
    key = (ref.namespace, ref.name)
    others_gpus = sum(int(p.get("gpus") or 0) for p in pools if (p.get("namespace"), p.get("name")) != key)
    own = _own_demand(previous, spec.node_pool.name)
    # A full list may have been truncated: other tenants missing from it would be sized as absent.
    if own is not None and len(pools) < api.POOLS_MAX_ITEMS:
        mine = next((p for p in pools if (p.get("namespace"), p.get("name")) == key), None)
        read = _recorded_demand(mine) if mine is not None else None
        if read is None or not _same_demand(own, read):  # only then are the others parsed
            others = [_recorded_demand(p) for p in pools if p is not mine]
            nodes = size_node_pool(np, [*(d for d in others if d is not None), own], nodes).nodes
    return paid_replicas_on(np, nodes, others_gpus, spec.node_pool.gpus_per_replica)


def _recorded_demand(raw: Any) -> NodePoolDemand | None:
    """One pool's demand as the node pool recorded it in its status (None when unreadable)."""
    try:
        entry = api.PoolDemand.model_validate(raw)
    except ValueError:
        return None
    return NodePoolDemand(
        node_pool="",
        gpus_now=entry.gpus,
        gpus_ahead=entry.gpus_ahead if entry.gpus_ahead is not None else entry.gpus,
        gpus_per_replica=entry.gpus_per_replica or 1,
        hold=bool(entry.hold),
    )


def _own_demand(previous: Mapping[str, Any] | None, node_pool: str) -> NodePoolDemand | None:
    """The demand this pool published last tick on `node_pool` (None when there is none)."""
    raw = (previous or {}).get("nodeDemand")
    if not raw:
        return None
    try:
        demand = api.NodeDemand.model_validate(raw)
    except ValueError:
        return None
    return node_pool_demand(demand) if demand.node_pool == node_pool else None


def _same_demand(a: NodePoolDemand, b: NodePoolDemand) -> bool:
    """Whether the node pool has read this demand (what it sizes on: GPUs now and ahead, hold)."""
    return (a.gpus_now, max(a.gpus_ahead, a.gpus_now), a.hold) == (
        b.gpus_now,
        max(b.gpus_ahead, b.gpus_now),
        b.hold,
    )


def _cost(observed: Observed) -> Cost:
    """GPU cost per 1k tokens of the pool at its current size, and the cost ceiling as a replica cap."""
    spec, np, scale = observed.spec, observed.node_pool, observed.scale
    if spec is None or np is None or scale is None or spec.node_pool is None:
        return Cost(note="no node pool: GPU price unknown")
    gpr = spec.node_pool.gpus_per_replica
    usd_per_replica_s = gpr * np.price_per_node_hour_usd / np.gpus_per_node / 3600.0
    tokens = tokens_per_s(observed)
    if not (math.isfinite(tokens) and tokens > 0):
        return Cost(note="no token throughput metric for this pool")
    per_1k = scale.spec_replicas * usd_per_replica_s / (tokens / 1000.0)
    ceiling = spec.cost.max_cost_per_1k_tokens_usd
    if ceiling is None or usd_per_replica_s <= 0:
        return Cost(per_1k)
    cap = max(spec.replicas.min, math.floor(ceiling * tokens / 1000.0 / usd_per_replica_s))
    return Cost(per_1k, cap, f"${ceiling:g}/1k tokens at {tokens:.0f} tokens/s allows {cap} replicas")


def _hold_reason(observed: Observed) -> str | None:
    obs = observed.observation
    if obs is not None and obs.error is not None:
        return f"metrics unavailable ({obs.error})"
    if observed.metric_problems:
        return "Prometheus returned values no fleet can report: " + "; ".join(observed.metric_problems)
    if observed.pods_error is not None:
        return f"cannot list the target's pods ({observed.pods_error})"
    return None


def decide(observed: Observed, ref: ObjectRef, previous: Mapping[str, Any] | None, now: dt.datetime) -> Plan:
    """The policy's decision for an active pool, with its memory restored from the status."""
    spec, scale, obs = observed.spec, observed.scale, observed.observation
    assert spec is not None and scale is not None and obs is not None
    prior, state_note = _restore_state(previous)
    setting = prior.batching if prior is not None else common_batching(observed.pods)
    ready = len(ro.split(observed.pods, setting).on_target)
    signals = replace(obs.signals, ready_replicas=ready if observed.pods_error is None else None)
    cost = _cost(observed)
    effective = spec
    if cost.cap_replicas is not None and cost.cap_replicas < spec.replicas.max:
        effective = effective.model_copy(
            update={"replicas": spec.replicas.model_copy(update={"max": cost.cap_replicas})}
        )
    refused = None
    if observed.autoscalers:
        names = ", ".join(map(str, observed.autoscalers))
        refused = (
            f"{names} also scales {spec.target_ref.kind} {spec.target_ref.name}: PoolPilot does not fight it"
        )
        effective = effective.model_copy(update={"mode": api.Mode.RECOMMEND})
    result = pool_tick(
        effective,
        prior,
        signals if math.isfinite(signals.age_s) or obs.error is None else Signals(age_s=math.inf),
        now.timestamp(),
        replicas=scale.spec_replicas,
        batching=setting,
        node_pool=observed.node_pool,
        paid_replicas=_paid_replicas(observed, ref, previous),
        hold_reason=_hold_reason(observed),
    )
    return Plan(result, setting, ready, refused, cost, state_note)


# ----------------------------------------------------------------------------------------------- act


@dataclass
class Acted:
    """What acting did (mutable while the tick acts). Decision Events are sent as they happen: an
    operator killed mid-rollout has already said that the rollout started."""

    applied: tuple[PolicyAction, ...] = ()
    state: PoolState | None = None
    rollout: api.Rollout | None = None
    rolled_back: str | None = None  # why, when a rollout was rolled back this tick
    rollout_done: bool = False
    convergence_error: str | None = None
    on_target: int = 0
    events: list[tuple[str, str, str]] | None = None  # (type, reason, message), already sent
    cluster: Cluster | None = None
    ref: ObjectRef | None = None

    async def event(self, type_: str, reason: str, message: str) -> None:
        if self.events is None:
            self.events = []
        self.events.append((type_, reason, message))
        if self.cluster is not None and self.ref is not None:
            await self.cluster.emit_event(self.ref, type_=type_, reason=reason, message=message)


def _may_act(observed: Observed, plan: Plan) -> bool:
    spec = observed.spec
    return spec is not None and spec.mode is api.Mode.AUTO and plan.refused is None


async def act(
    svc: Services,
    observed: Observed,
    plan: Plan,
    ref: ObjectRef,
    writer: StatusWriter,
    previous: Mapping[str, Any] | None,
    now: dt.datetime,
) -> Acted:
    """Apply the decision (Auto only): replicas, then the batching rollout/convergence."""
    acted = Acted(state=plan.tick.state, on_target=plan.ready_on_setting, cluster=svc.cluster, ref=ref)
    acted.rollout = _previous_rollout(previous)
    if not _may_act(observed, plan):
        acted.state = plan.tick.state
        return acted
    decision = plan.decision
    applied = set(decision.actions)
    if "scale" in decision.actions and not await _scale(svc, observed, decision, ref, acted):
        applied.discard("scale")
    acted.applied = tuple(a for a in decision.actions if a in applied)
    acted.state = plan.tick.state_after(acted.applied)
    await _batching(svc, observed, plan, writer, now, acted)
    return acted


async def _scale(svc: Services, observed: Observed, decision: Decision, ref: ObjectRef, acted: Acted) -> bool:
    spec, scale = observed.spec, observed.scale
    assert spec is not None and scale is not None
    target = target_ref(spec, ref.namespace or "")
    before = scale.spec_replicas
    try:
        await svc.workloads.set_replicas(target, decision.replicas, resource_version=scale.resource_version)
    except ScaleConflict as exc:
        await acted.event(NORMAL, "ScaleConflict", f"{exc}; deciding again next tick")
        return False
    except ClusterError as exc:
        await acted.event(WARNING, "ScaleFailed", str(exc))
        return False
    direction = "ScaledOut" if decision.replicas > before else "ScaledIn"
    await acted.event(NORMAL, direction, f"replicas {before}→{decision.replicas}: {decision.reasons[0]}")
    telemetry.DECISIONS.labels(
        ref.namespace, ref.name, "scale_out" if direction == "ScaledOut" else "scale_in"
    ).inc()
    return True


def _previous_rollout(previous: Mapping[str, Any] | None) -> api.Rollout | None:
    raw = (previous or {}).get("rollout")
    if not raw:
        return None
    try:
        return api.Rollout.model_validate(raw)
    except ValueError:
        return None


async def _batching(
    svc: Services, observed: Observed, plan: Plan, writer: StatusWriter, now: dt.datetime, acted: Acted
) -> None:
    """Start a rollout if the decision changed the setting, then converge the pods (or roll back)."""
    assert acted.state is not None
    ns, name = writer.ref.namespace or "", writer.ref.name
    if "batching" in acted.applied:
        target = plan.decision.batching
        previous = plan.setting_before
        if acted.rollout is not None and acted.rollout.previous is not None:
            previous = ro.from_status(acted.rollout.previous)  # the last setting every pod ran
        on = len(ro.split(observed.pods, target).on_target)
        acted.rollout = ro.started(target, previous, now, len(observed.pods), on)
        await acted.event(
            NORMAL, "BatchingRolloutStarted", f"{describe(target)}: {_batching_reason(plan.decision)}"
        )
        telemetry.ROLLOUTS.labels(ns, name, "started").inc()
        telemetry.DECISIONS.labels(ns, name, "batching").inc()
        # Durable before the first pod is touched: a restart resumes this rollout, never re-decides it.
        await writer.patch(_rollout_patch(acted), now=now)
    if acted.rollout is not None and acted.rollout.phase is api.RolloutPhase.ROLLING_BACK:
        await _roll_back(svc, observed, observed.pods, writer, now, acted)
        return
    if acted.state.batching is None:
        return
    target = acted.state.batching
    step = await _converge(svc, observed, observed.pods, writer, now, acted, target)
    if step.failed is not None:
        if acted.rollout is None:  # a pod that came up later does not take the pool's setting: retry
            acted.convergence_error = step.failed
            return
        await _fail_rollout(svc, observed, writer, now, acted, target, step)
        return
    if step.remaining or (acted.rollout is not None and ro.split(observed.pods, target).unknown):
        return  # more next tick (time budget spent, or pods that could not be read yet)
    if acted.rollout is not None:
        acted.rollout_done = True
        await acted.event(NORMAL, "BatchingRolledOut", f"every Ready pod runs {describe(target)}")
        telemetry.ROLLOUTS.labels(ns, name, "completed").inc()
        acted.rollout = None
        await writer.patch({"rollout": None}, now=now)


async def _converge(
    svc: Services,
    observed: Observed,
    pods: tuple[PodView, ...],
    writer: StatusWriter,
    now: dt.datetime,
    acted: Acted,
    target: BatchingConfig,
) -> ro.Step:
    spec = observed.spec
    assert spec is not None

    async def progress(on_target: int) -> None:
        acted.on_target = on_target
        if acted.rollout is not None:
            acted.rollout = ro.replace_rollout(acted.rollout, updated_replicas=on_target)
            await writer.patch({"rollout": acted.rollout.to_wire()}, now=now)

    step = await ro.converge(
        svc.batching,
        pods,
        model=spec.model.name,
        port=spec.model.http_port,
        target=target,
        parallelism=svc.settings.batching_parallelism,
        budget_s=float(spec.tick_seconds),
        on_progress=progress,
    )
    acted.on_target = step.on_target
    return step


async def _fail_rollout(
    svc: Services,
    observed: Observed,
    writer: StatusWriter,
    now: dt.datetime,
    acted: Acted,
    target: BatchingConfig,
    step: ro.Step,
) -> None:
    """A reload failed mid-rollout: remember the setting as failed, then roll the changed pods back."""
    assert acted.state is not None and acted.rollout is not None and step.failed is not None
    previous = ro.from_status(acted.rollout.previous) if acted.rollout.previous is not None else None
    acted.state = batching_failed(acted.state, target, previous, now.timestamp(), spec=observed.spec)
    acted.rollout = ro.rolling_back(acted.rollout, step.failed)
    acted.rolled_back = step.failed
    telemetry.ROLLOUTS.labels(writer.ref.namespace or "", writer.ref.name, "rolled_back").inc()
    await writer.patch(_rollout_patch(acted), now=now)
    pods = ro.after(observed.pods, step.changed, target)
    rolled = len(ro.split(pods, target).on_target)
    await acted.event(
        WARNING,
        cond.BATCHING_ROLLED_BACK,
        f"{describe(target)} failed on {step.failed}; rolling {rolled} pod{'s' if rolled != 1 else ''} "
        f"back to {describe(previous)}; the setting is not proposed again for a while",
    )
    await _roll_back(svc, observed, pods, writer, now, acted)


async def _roll_back(
    svc: Services,
    observed: Observed,
    pods: tuple[PodView, ...],
    writer: StatusWriter,
    now: dt.datetime,
    acted: Acted,
) -> None:
    assert acted.rollout is not None
    if acted.rollout.previous is None:  # the pods ran nothing known before: nothing to go back to
        acted.rollout = None
        await writer.patch({"rollout": None}, now=now)
        return
    previous = ro.from_status(acted.rollout.previous)
    step = await _converge(svc, observed, pods, writer, now, acted, previous)
    if step.failed is not None:
        acted.convergence_error = step.failed
        return
    if not step.remaining:
        acted.rollout = None
        await writer.patch({"rollout": None}, now=now)


def _rollout_patch(acted: Acted) -> dict[str, Any]:
    assert acted.state is not None
    return {
        "rollout": acted.rollout.to_wire() if acted.rollout is not None else None,
        "policyState": state_to_wire(acted.state),
        "batching": ro.to_status(acted.state.batching).to_wire() if acted.state.batching else None,
    }


def describe(b: BatchingConfig | None) -> str:
    """A batching setting in words (Events, conditions)."""
    if b is None:
        return "Triton's default batching"
    instances = f"{b.instance_count} instance{'s' if b.instance_count != 1 else ''}"
    return f"queue delay {b.max_queue_delay_us} µs, {instances}, max batch {b.max_batch_size}"


def _batching_reason(decision: Decision) -> str:
    return next(
        (r for r in decision.reasons if r.startswith(("batching", "cut queue delay"))), decision.reasons[0]
    )


# -------------------------------------------------------------------------------------------- report


def _iso(t_s: float | None) -> str | None:
    if t_s is None or not math.isfinite(t_s):
        return None
    return dt.datetime.fromtimestamp(t_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _action(observed: Observed, plan: Plan) -> str:
    """The decision in one word for `lastDecision.action`: Hold, Steady, ScaleOut, ScaleIn,
    ChangeBatching (joined with And), prefixed Recommend when nothing is applied."""
    d = plan.decision
    if d.hold:
        return "Hold"
    assert observed.scale is not None
    parts = []
    if d.replicas > observed.scale.spec_replicas:
        parts.append("ScaleOut")
    elif d.replicas < observed.scale.spec_replicas:
        parts.append("ScaleIn")
    before = plan.tick.prior.batching
    if before is None or not same_batching(d.batching, before):
        parts.append("ChangeBatching")
    if not parts:
        return "Steady"
    word = "And".join(parts)
    return word if _may_act(observed, plan) else f"Recommend{word}"


def _node_demand(observed: Observed, plan: Plan, now: dt.datetime) -> dict[str, Any] | None:
    spec, scale = observed.spec, observed.scale
    if spec is None or spec.node_pool is None or scale is None:
        return None
    demand = plan.decision.node_demand
    gpr = spec.node_pool.gpus_per_replica
    if demand is None or not _may_act(observed, plan):
        # Recommend mode or a conflicting autoscaler: the pods that run hold their GPUs, nothing more.
        now_gpus, ahead_gpus, hold = scale.spec_replicas * gpr, scale.spec_replicas * gpr, True
    else:
        now_gpus, ahead_gpus, hold = demand.gpus_now, demand.gpus_ahead, demand.hold
    return api.NodeDemand(
        node_pool=spec.node_pool.name,
        gpus_now=now_gpus,
        gpus_ahead=ahead_gpus,
        gpus_per_replica=gpr,
        hold=hold,
        time=now,
    ).to_wire()


def _status_signals(signals: Signals, now: dt.datetime) -> dict[str, Any]:
    observed_at = None
    if math.isfinite(signals.age_s):
        observed_at = now - dt.timedelta(seconds=signals.age_s)

    def valid(x: float) -> float:  # what no fleet can report is shown as absent (the condition names it)
        return x if math.isfinite(x) and x >= 0 else math.nan

    return api.StatusSignals(
        p99_ms=valid(signals.p99_ms),
        request_rate_per_second=valid(signals.request_rate_per_s),
        gpu_utilization=valid(signals.gpu_utilization),
        queue_time_ms=valid(signals.queue_time_us) / 1000.0,
        avg_batch_size=valid(signals.avg_batch_size),
        observed_at=observed_at,
    ).to_wire()


def _decided_status(observed: Observed, plan: Plan, acted: Acted, now: dt.datetime) -> dict[str, Any]:
    """The status fields of an active pool after its decision (conditions are added by `report`)."""
    d = plan.decision
    state = acted.state or plan.tick.state
    assert observed.scale is not None and observed.observation is not None
    replicas = d.replicas if "scale" in acted.applied else observed.scale.spec_replicas
    model = state.latency_model
    status: dict[str, Any] = {
        "replicas": replicas,
        "readyReplicas": acted.on_target,
        "desiredReplicas": d.replicas,
        "batching": ro.to_status(state.batching).to_wire() if state.batching else None,
        "recommendedBatching": ro.to_status(d.batching).to_wire(),
        "rollout": acted.rollout.to_wire() if acted.rollout is not None else None,
        "nodeDemand": _node_demand(observed, plan, now),
        "signals": _status_signals(observed.observation.signals, now),
        "predictedP99Ms": d.predicted_p99_ms if math.isfinite(d.predicted_p99_ms) else None,
        "costPer1kTokensUSD": plan.cost.per_1k_tokens_usd
        if math.isfinite(plan.cost.per_1k_tokens_usd)
        else None,
        "latencyModel": api.StatusLatencyModel(
            a_ms=model.a_ms,
            b_ms=model.b_ms,
            correction=max(model.correction, 1e-9),
            offset_ms=model.offset_ms,
        ).to_wire()
        if model is not None
        else None,
        "lastDecision": api.LastDecision(
            time=now,
            action=_action(observed, plan),
            reasons=[r[:1024] for r in _reasons(plan)][: api.REASONS_MAX_ITEMS],
        ).to_wire(),
        "lastBatchingChangeTime": _iso(state.last_batching_change_s),
        "lastScaleTime": _iso(state.last_scale_change_s),
        "policyState": state_to_wire(state),
    }
    return {k: v for k, v in status.items() if v is not None}


def _reasons(plan: Plan) -> list[str]:
    reasons = list(plan.decision.reasons)
    if plan.refused is not None:
        reasons.insert(0, f"refused: {plan.refused}")
    if plan.state_note is not None:
        reasons.append(plan.state_note)
    if plan.cost.note and plan.cost.cap_replicas is not None:
        reasons.append(f"cost ceiling: {plan.cost.note}")
    return reasons


@dataclass
class _Conditions:
    """Conditions being set this tick, with the generation they were computed from."""

    items: tuple[api.Condition, ...]
    generation: int | None
    now: dt.datetime

    def put(self, type_: str, status: api.ConditionStatus | bool, reason: str, message: str) -> None:
        self.items = cond.set_condition(
            self.items,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            now=self.now,
            observed_generation=self.generation,
        )

    def keep(self, type_: str) -> api.Condition | None:
        return cond.get_condition(self.items, type_)


def _readiness_conditions(c: _Conditions, observed: Observed, plan: Plan | None) -> None:
    if observed.problems:
        reason = observed.problem_reason or cond.INVALID_SPEC
        c.put(cond.READY, False, reason, "; ".join(map(str, observed.problems)))
    else:
        c.put(cond.READY, True, cond.RECONCILED, "spec valid; target and node pool found")
    mode = observed.spec.mode if observed.spec is not None else None
    if mode is api.Mode.OFF:
        c.put(
            cond.ACTIVE, False, cond.MODE_OFF, "mode is Off: PoolPilot observes nothing and changes nothing"
        )
    elif mode is api.Mode.RECOMMEND:
        c.put(
            cond.ACTIVE,
            False,
            cond.MODE_RECOMMEND,
            "mode is Recommend: decisions are reported, nothing is changed",
        )
    elif plan is not None and plan.refused is not None:
        c.put(cond.ACTIVE, False, cond.CONFLICTING_AUTOSCALER, plan.refused)
    elif mode is api.Mode.AUTO:
        c.put(
            cond.ACTIVE,
            True,
            cond.MODE_AUTO,
            "mode is Auto: PoolPilot may change batching, replicas and nodes",
        )


def _metrics_condition(c: _Conditions, observed: Observed, max_age_s: float, ref: ObjectRef) -> None:
    spec, obs = observed.spec, observed.observation
    if spec is not None and spec.mode is api.Mode.OFF:
        c.put(
            cond.METRICS_AVAILABLE,
            api.ConditionStatus.UNKNOWN,
            cond.MODE_OFF,
            "metrics are not read in Off mode",
        )
        return
    if obs is None:
        c.put(
            cond.METRICS_AVAILABLE,
            api.ConditionStatus.UNKNOWN,
            cond.POOL_NOT_READY,
            "metrics are not read until the pool is Ready",
        )
        return
    if obs.error is not None:
        c.put(cond.METRICS_AVAILABLE, False, cond.METRICS_UNREACHABLE, f"{obs.error}; holding")
        return
    if observed.metric_problems:
        c.put(
            cond.METRICS_AVAILABLE,
            False,
            cond.METRICS_INVALID,
            "; ".join(observed.metric_problems) + "; holding",
        )
        return
    s = obs.signals
    if math.isinf(s.age_s):
        model = spec.model.name if spec else "?"
        c.put(
            cond.METRICS_AVAILABLE,
            False,
            cond.METRICS_MISSING,
            f"no Triton series with namespace={ref.namespace!r}, pool={ref.name!r}, model={model!r}; "
            "are the pods labelled poolpilot.io/pool and scraped with that label relabelled to `pool`?",
        )
    elif s.age_s > max_age_s:
        c.put(
            cond.METRICS_AVAILABLE,
            False,
            cond.METRICS_STALE,
            f"newest sample is {s.age_s:.0f} s old (limit {max_age_s:.0f} s)",
        )
    elif math.isnan(s.p99_ms) and s.request_rate_per_s > 0:
        c.put(
            cond.METRICS_AVAILABLE,
            False,
            cond.METRICS_MISSING,
            "request counters present but no latency series (enable Triton summary or histogram latencies)",
        )
    else:
        c.put(cond.METRICS_AVAILABLE, True, cond.METRICS_PRESENT, f"signals {s.age_s:.0f} s old")


def _batching_condition(c: _Conditions, observed: Observed, plan: Plan, acted: Acted) -> None:
    if not _may_act(observed, plan):
        c.put(
            cond.BATCHING_APPLIED,
            api.ConditionStatus.UNKNOWN,
            cond.NOT_ACTING,
            "PoolPilot does not change batching now",
        )
        return
    total = len(observed.pods)
    setting = describe((acted.state or plan.tick.state).batching)
    if acted.rolled_back is not None:
        c.put(
            cond.BATCHING_APPLIED,
            False,
            cond.BATCHING_ROLLED_BACK,
            f"rolled back to {setting}: {acted.rolled_back}",
        )
    elif acted.rollout is not None:
        r = acted.rollout
        what = "rolling back" if r.phase is api.RolloutPhase.ROLLING_BACK else "rolling out"
        reason = (
            cond.BATCHING_ROLLED_BACK
            if r.phase is api.RolloutPhase.ROLLING_BACK
            else cond.BATCHING_ROLLING_OUT
        )
        c.put(
            cond.BATCHING_APPLIED, False, reason, f"{what}: {acted.on_target}/{total} Ready pods on {setting}"
        )
    elif acted.convergence_error is not None:
        c.put(
            cond.BATCHING_APPLIED,
            False,
            cond.POD_NOT_CONVERGED,
            f"{acted.on_target}/{total} Ready pods on {setting}; {acted.convergence_error}",
        )
    else:
        old = c.keep(cond.BATCHING_APPLIED)
        if old is not None and old.reason == cond.BATCHING_ROLLED_BACK and not acted.rollout_done:
            return  # the failure stays visible until a new setting is rolled out
        c.put(
            cond.BATCHING_APPLIED,
            True,
            cond.BATCHING_IN_SYNC,
            f"{acted.on_target}/{total} Ready pods run {setting}",
        )


def _limit_conditions(c: _Conditions, observed: Observed, plan: Plan) -> None:
    spec, d = observed.spec, plan.decision
    assert spec is not None
    short = math.isfinite(d.predicted_p99_ms) and d.predicted_p99_ms > spec.slo.latency_target_ms
    if d.replicas >= spec.replicas.max and short:
        c.put(
            cond.SCALING_LIMITED,
            True,
            cond.AT_MAX_REPLICAS,
            f"at replicas.max {spec.replicas.max}: predicted p99 {d.predicted_p99_ms:.0f} ms",
        )
    else:
        c.put(
            cond.SCALING_LIMITED,
            False,
            cond.WITHIN_RANGE,
            f"{d.replicas} replicas within [{spec.replicas.min}, {spec.replicas.max}]",
        )
    if spec.cost.max_cost_per_1k_tokens_usd is None:
        return
    cap = plan.cost.cap_replicas
    if cap is None:
        c.put(
            cond.COST_LIMITED,
            api.ConditionStatus.UNKNOWN,
            cond.COST_UNKNOWN,
            f"{plan.cost.note}: the cost ceiling cannot be enforced",
        )
    elif d.replicas >= cap and cap < spec.replicas.max and short:
        c.put(cond.COST_LIMITED, True, cond.OVER_COST_CEILING, f"{plan.cost.note}; the objective needs more")
    else:
        c.put(cond.COST_LIMITED, False, cond.WITHIN_COST, plan.cost.note)


def _carried(previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """What an inactive pool keeps of its status: the policy's memory and an unfinished rollout."""
    prev = previous or {}
    return {k: prev[k] for k in ("policyState", "latencyModel", "rollout", "batching") if k in prev}


async def tick(
    svc: Services,
    body: Mapping[str, Any],
    *,
    now: dt.datetime,
    previous_status: Mapping[str, Any] | None = None,
    last_write: dt.datetime | None = None,
) -> TickReport:
    """One full tick for one pool. Raises only on API-server errors reading the pool's own references."""
    with telemetry.TICK_SECONDS.labels(api.INFERENCE_POOL_KIND).time():
        ref = pool_ref(body)
        generation = (body.get("metadata") or {}).get("generation")
        writer = StatusWriter(
            svc.cluster,
            ref,
            api.INFERENCE_POOL_PLURAL,
            last=previous_status,
            last_write=last_write,
            heartbeat_s=svc.settings.status_heartbeat_s,
        )
        observed = await observe(svc, body)
        plan = decide(observed, ref, previous_status, now) if observed.active else None
        acted = (
            await act(svc, observed, plan, ref, writer, previous_status, now) if plan is not None else None
        )
        report = await _report(svc, body, observed, plan, acted, writer, previous_status, now, generation)
    outcome = "ok" if report.ready else "invalid"
    telemetry.TICKS.labels(api.INFERENCE_POOL_KIND, outcome).inc()
    return report


async def _report(
    svc: Services,
    body: Mapping[str, Any],
    observed: Observed,
    plan: Plan | None,
    acted: Acted | None,
    writer: StatusWriter,
    previous: Mapping[str, Any] | None,
    now: dt.datetime,
    generation: int | None,
) -> TickReport:
    ref = writer.ref
    before = previous_conditions(previous)
    c = _Conditions(before, generation, now)
    _readiness_conditions(c, observed, plan)
    _metrics_condition(c, observed, svc.settings.prometheus.max_sample_age_s, ref)
    mode = observed.spec.mode if observed.spec is not None else None
    status: dict[str, Any] = {"observedGeneration": generation, "mode": mode.value if mode else None}
    if observed.scale is not None:
        status["replicas"] = observed.scale.spec_replicas
    if plan is not None and acted is not None:
        _batching_condition(c, observed, plan, acted)
        _limit_conditions(c, observed, plan)
        status.update(_decided_status(observed, plan, acted, now))
    else:
        status.update(_carried(previous))
        for type_ in (cond.BATCHING_APPLIED, cond.SCALING_LIMITED, cond.COST_LIMITED):
            c.items = cond.remove_condition(c.items, type_)
    status["conditions"] = [x.to_wire() for x in c.items]
    status = {k: v for k, v in status.items() if v is not None}

    wrote = await writer.write(status, now=now)
    if wrote:
        telemetry.STATUS_WRITES.labels(api.INFERENCE_POOL_KIND).inc()
    events = await _emit(svc, ref, before, c.items, plan, acted, previous, status)
    _record(ref, observed, plan, acted, status)
    return TickReport(
        status=writer.last,
        events=tuple(events),
        ready=not observed.problems,
        wrote=wrote,
        last_write=writer.last_write,
        decision=plan.decision if plan is not None else None,
        conditions=c.items,
    )


async def _emit(
    svc: Services,
    ref: ObjectRef,
    before: tuple[api.Condition, ...],
    after: tuple[api.Condition, ...],
    plan: Plan | None,
    acted: Acted | None,
    previous: Mapping[str, Any] | None,
    status: Mapping[str, Any],
) -> list[tuple[str, str]]:
    """Recommendation and condition-transition Events (decision Events were sent while acting)."""
    sent = list(acted.events or []) if acted is not None else []
    out: list[tuple[str, str, str]] = []
    if plan is not None and (plan.decision.mode != "Auto" or plan.refused is not None):
        prev = previous or {}
        changed = prev.get("desiredReplicas") != status.get("desiredReplicas") or prev.get(
            "recommendedBatching"
        ) != status.get("recommendedBatching")
        action = (status.get("lastDecision") or {}).get("action", "")
        if changed and action not in ("Hold", "Steady"):
            out.append((NORMAL, "Recommendation", "; ".join(_reasons(plan))[:1024]))
            telemetry.DECISIONS.labels(ref.namespace, ref.name, "recommend").inc()
    already = {reason for _, reason, _ in sent}
    for c, type_ in transitions(before, after):
        if c.reason not in already:  # a rollback's Warning already said it
            out.append((type_, c.reason, f"{c.type}={c.status.value}: {c.message}"))
    for type_, reason, message in out:
        await svc.cluster.emit_event(ref, type_=type_, reason=reason, message=message)
    return [(reason, type_) for type_, reason, _ in [*sent, *out]]


def _record(
    ref: ObjectRef, observed: Observed, plan: Plan | None, acted: Acted | None, status: Mapping[str, Any]
) -> None:
    ns, name = ref.namespace or "", ref.name
    spec = observed.spec
    signals = observed.observation.signals if observed.observation is not None else Signals(age_s=math.inf)
    state = (acted.state if acted is not None else None) or (plan.tick.state if plan is not None else None)
    b = state.batching if state is not None else None
    gpr = spec.node_pool.gpus_per_replica if spec is not None and spec.node_pool is not None else 1
    replicas = status.get("replicas")
    telemetry.record_pool(
        ns,
        name,
        ready=not observed.problems,
        active=plan is not None and _may_act(observed, plan),
        metrics_available=any(
            x.get("type") == cond.METRICS_AVAILABLE and x.get("status") == "True"
            for x in status.get("conditions", [])
        ),
        replicas=replicas,
        ready_replicas=status.get("readyReplicas"),
        desired_replicas=status.get("desiredReplicas"),
        p99_ms=signals.p99_ms,
        objective_ms=spec.slo.latency_target_ms if spec is not None else None,
        predicted_p99_ms=plan.decision.predicted_p99_ms if plan is not None else None,
        queue_delay_us=b.max_queue_delay_us if b else None,
        instances=b.instance_count if b else None,
        max_batch_size=b.max_batch_size if b else None,
        gpus=replicas * gpr if isinstance(replicas, int) else None,
        cost_per_1k_tokens_usd=plan.cost.per_1k_tokens_usd if plan is not None else None,
    )
    if plan is not None and isinstance(replicas, int) and spec is not None:
        telemetry.add_gpu_seconds(ns, name, replicas * gpr, float(spec.tick_seconds))
    if plan is not None and plan.decision.hold:
        telemetry.DECISIONS.labels(ns, name, "hold").inc()
