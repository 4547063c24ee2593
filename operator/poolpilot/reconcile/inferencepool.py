"""One tick of an InferencePool: observe → decide → act → report.

- observe: parse the spec, fetch what it refers to (GPUNodePool, namespace labels, the target's
  /scale) and the pool's signals (from the operator-wide batched metric fetch);
- decide: for now "observe only" — the policy (`poolpilot.policy.decide`) slots in here;
- act: nothing yet (Auto will apply the decision; Recommend and Off never act);
- report: one status patch (observedGeneration, mode, replicas, signals, conditions, lastDecision)
  and Events only when a condition changes.

API calls per tick are bounded: ≤ 3 reads, 1 status patch, ≤ 3 Events (transitions only).
Problems are reported in conditions with the field path; this module never lets a traceback reach
the status.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolpilot.api import conditions as cond
from poolpilot.api import types as api
from poolpilot.api import validation
from poolpilot.backends.kube import Cluster, ObjectRef
from poolpilot.backends.metrics.base import PoolKey
from poolpilot.backends.workloads import Scale, WorkloadScaler
from poolpilot.policy.types import Signals
from poolpilot.reconcile import telemetry
from poolpilot.reconcile.signals import Observation, SignalCache
from poolpilot.reconcile.transitions import previous_conditions, transitions
from poolpilot.settings import OperatorSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Services:
    """What a tick may touch; built once by the handlers (real clients) or by tests (fakes)."""

    cluster: Cluster
    workloads: WorkloadScaler
    signals: SignalCache
    settings: OperatorSettings


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the tick learned, before deciding."""

    spec: api.InferencePoolSpec | None
    problems: tuple[validation.Problem, ...]
    problem_reason: str | None
    scale: Scale | None
    observation: Observation | None  # None in Off mode or when the spec is unusable


@dataclass(frozen=True, slots=True)
class TickReport:
    """What the tick wrote: the status patch and the Events it emitted (reason, type)."""

    status: dict[str, Any]
    events: tuple[tuple[str, str], ...] = ()
    ready: bool = False
    conditions: tuple[api.Condition, ...] = field(default=())


def pool_ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = body.get("metadata") or {}
    return ObjectRef(
        api.API_VERSION,
        api.INFERENCE_POOL_KIND,
        str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=meta.get("uid"),
    )


# ------------------------------------------------------------------------------------------- observe


def _classify(problem: validation.Problem, node_pool_body: Mapping[str, Any] | None) -> str:
    """The condition reason of one reference problem (validation gives the path and message)."""
    if problem.field_path.startswith("spec.targetRef"):
        return cond.TARGET_NOT_FOUND if problem.field_path == "spec.targetRef.name" else cond.INVALID_SPEC
    if problem.field_path == "spec.nodePool.gpusPerReplica":
        return cond.REPLICA_DOES_NOT_FIT
    if problem.field_path == "spec.nodePool.name":
        if node_pool_body is None:
            return cond.NODE_POOL_NOT_FOUND
        parsed, _ = validation.parse_gpu_node_pool(node_pool_body)
        if parsed is None:
            return cond.NODE_POOL_INVALID
        return cond.NAMESPACE_NOT_ADMITTED
    return cond.INVALID_SPEC


async def observe(svc: Services, body: Mapping[str, Any]) -> Observed:
    ref = pool_ref(body)
    spec, problems = validation.parse_inference_pool(body)
    if spec is None:
        return Observed(None, tuple(problems), cond.INVALID_SPEC, None, None)

    node_pool_body: dict[str, Any] | None = None
    namespace_labels: dict[str, str] = {}
    if spec.node_pool is not None:
        node_pool_body = await svc.cluster.get_custom_object(
            ObjectRef(api.API_VERSION, api.GPU_NODE_POOL_KIND, spec.node_pool.name), api.GPU_NODE_POOL_PLURAL
        )
        if node_pool_body is not None:
            namespace_labels = await svc.cluster.get_namespace_labels(ref.namespace or "") or {}
    target = ObjectRef(spec.target_ref.api_version, spec.target_ref.kind, spec.target_ref.name, ref.namespace)
    scale = await svc.workloads.get_scale(target)
    problems = validation.check_inference_pool(
        body,
        namespace_labels=namespace_labels,
        target=None if scale is None else {"kind": spec.target_ref.kind},
        node_pool=node_pool_body,
    )
    reason = _classify(problems[0], node_pool_body) if problems else None

    observation = None
    if spec.mode is not api.Mode.OFF and not problems:
        key = PoolKey(ref.namespace or "", ref.name, spec.model.name, spec.slo.latency_quantile)
        observation = await svc.signals.get(key)
    return Observed(spec, tuple(problems), reason, scale, observation)


# -------------------------------------------------------------------------------------------- decide


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the tick concluded (the slot `policy.decide` will fill)."""

    action: str
    reasons: tuple[str, ...]


def decide(observed: Observed) -> Verdict | None:
    """Observe-only for now: explain what was seen; None when there is nothing to decide on."""
    if observed.spec is None or observed.problems or observed.spec.mode is api.Mode.OFF:
        return None
    reasons = ["observe only: the policy is not enabled in this version, nothing is changed"]
    obs = observed.observation
    if obs is not None and obs.error is None:
        s = obs.signals
        reasons.append(
            f"p{observed.spec.slo.latency_quantile:g} {_fmt(s.p99_ms)} ms vs target "
            f"{observed.spec.slo.latency_target_ms:g} ms; {_fmt(s.request_rate_per_s)} req/s; "
            f"GPU {_fmt(s.gpu_utilization)}; batch {_fmt(s.avg_batch_size)}"
        )
    return Verdict(cond.OBSERVE_ONLY, tuple(reasons))


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.3g}"


# -------------------------------------------------------------------------------------------- report


def _metrics_condition(
    observed: Observed, max_age_s: float, pool: ObjectRef
) -> tuple[api.ConditionStatus, str, str]:
    spec = observed.spec
    if spec is not None and spec.mode is api.Mode.OFF:
        return api.ConditionStatus.UNKNOWN, cond.MODE_OFF, "metrics are not read in Off mode"
    obs = observed.observation
    if obs is None:
        return (
            api.ConditionStatus.UNKNOWN,
            cond.POOL_NOT_READY,
            "metrics are not read until the pool is Ready",
        )
    if obs.error is not None:
        return api.ConditionStatus.FALSE, cond.METRICS_UNREACHABLE, obs.error
    s = obs.signals
    if math.isinf(s.age_s):
        model = spec.model.name if spec else "?"
        return (
            api.ConditionStatus.FALSE,
            cond.METRICS_MISSING,
            f"no Triton series with namespace={pool.namespace!r}, pool={pool.name!r}, model={model!r}; "
            "are the pods labelled poolpilot.io/pool and scraped with that label relabelled to `pool`?",
        )
    if s.age_s > max_age_s:
        return (
            api.ConditionStatus.FALSE,
            cond.METRICS_STALE,
            f"newest sample is {s.age_s:.0f} s old (limit {max_age_s:.0f} s)",
        )
    if math.isnan(s.p99_ms):
        return (
            api.ConditionStatus.FALSE,
            cond.METRICS_MISSING,
            "request counters present but no latency series (enable Triton summary or histogram latencies)",
        )
    return api.ConditionStatus.TRUE, cond.METRICS_PRESENT, f"signals {s.age_s:.0f} s old"


def _status_signals(signals: Signals, now: dt.datetime) -> dict[str, Any]:
    """Every signals field, None (→ removed by the merge patch) where the series is missing."""
    observed_at = None
    if math.isfinite(signals.age_s):
        observed_at = now - dt.timedelta(seconds=signals.age_s)
    model = api.StatusSignals(
        p99_ms=signals.p99_ms,
        request_rate_per_second=signals.request_rate_per_s,
        gpu_utilization=signals.gpu_utilization,
        queue_time_ms=signals.queue_time_us / 1000.0,
        avg_batch_size=signals.avg_batch_size,
        observed_at=observed_at,
    )
    wire = model.model_dump(mode="json", by_alias=True)
    return {k: v for k, v in wire.items()}


async def report(
    svc: Services,
    body: Mapping[str, Any],
    observed: Observed,
    verdict: Verdict | None,
    *,
    now: dt.datetime,
    previous_status: Mapping[str, Any] | None,
) -> TickReport:
    ref = pool_ref(body)
    generation = (body.get("metadata") or {}).get("generation")
    before = previous_conditions(previous_status)
    conds: tuple[api.Condition, ...] = before

    def put(type_: str, status: api.ConditionStatus | bool, reason: str, message: str) -> None:
        nonlocal conds
        conds = cond.set_condition(
            conds,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            now=now,
            observed_generation=generation,
        )

    ready = not observed.problems
    if ready:
        put(cond.READY, True, cond.RECONCILED, "spec valid; target and node pool found")
    else:
        put(
            cond.READY,
            False,
            observed.problem_reason or cond.INVALID_SPEC,
            "; ".join(map(str, observed.problems)),
        )

    mode = observed.spec.mode if observed.spec is not None else None
    if mode is api.Mode.OFF:
        put(cond.ACTIVE, False, cond.MODE_OFF, "mode is Off: PoolPilot observes nothing and changes nothing")
    elif mode is api.Mode.RECOMMEND:
        put(
            cond.ACTIVE,
            False,
            cond.MODE_RECOMMEND,
            "mode is Recommend: decisions are reported, nothing is changed",
        )
    elif mode is api.Mode.AUTO:
        put(
            cond.ACTIVE,
            True,
            cond.MODE_AUTO,
            "mode is Auto: PoolPilot may change batching, replicas and nodes",
        )

    m_status, m_reason, m_message = _metrics_condition(
        observed, svc.settings.prometheus.max_sample_age_s, ref
    )
    put(cond.METRICS_AVAILABLE, m_status, m_reason, m_message)

    status: dict[str, Any] = {
        "observedGeneration": generation,
        "mode": mode.value if mode is not None else None,
        "replicas": observed.scale.spec_replicas if observed.scale is not None else None,
        "conditions": [c.to_wire() for c in conds],
    }
    signals = observed.observation.signals if observed.observation is not None else Signals(age_s=math.inf)
    status["signals"] = _status_signals(signals, now)
    if verdict is not None:
        status["lastDecision"] = api.LastDecision(
            time=now, action=verdict.action, reasons=list(verdict.reasons)
        ).to_wire()

    await svc.cluster.patch_status(ref, api.INFERENCE_POOL_PLURAL, status)
    telemetry.record_pool(
        ref.namespace or "",
        ref.name,
        ready=ready,
        replicas=status["replicas"],
        p99_ms=signals.p99_ms,
    )

    events = []
    for c, type_ in transitions(before, conds):
        message = f"{c.type}={c.status.value}: {c.message}"
        await svc.cluster.emit_event(ref, type_=type_, reason=c.reason, message=message)
        events.append((c.reason, type_))

    return TickReport(status=status, events=tuple(events), ready=ready, conditions=conds)


# ---------------------------------------------------------------------------------------------- tick


async def tick(
    svc: Services,
    body: Mapping[str, Any],
    *,
    now: dt.datetime,
    previous_status: Mapping[str, Any] | None = None,
) -> TickReport:
    """One full tick for one pool. Raises only on API-server errors (the caller logs and retries)."""
    with telemetry.TICK_SECONDS.labels("InferencePool").time():
        observed = await observe(svc, body)
        verdict = decide(observed)
        # act: nothing in this version — Off and Recommend never act; Auto will apply `verdict` here.
        result = await report(svc, body, observed, verdict, now=now, previous_status=previous_status)
    telemetry.TICKS.labels("InferencePool", "ok" if result.ready else "invalid").inc()
    return result
