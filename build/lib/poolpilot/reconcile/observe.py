"""Observe one InferencePool: its spec and references, its workload's scale and pods, what each Ready pod
runs, its signals, and any autoscaler it would fight. No decision here, and no writes.

API calls per tick are bounded and independent of the fleet size: the GPUNodePool, the namespace's labels,
the workload's `/scale`, one pod list and (Auto mode) one HorizontalPodAutoscaler list. The pods' model
configs are read from Triton, concurrently, at the pods' own addresses.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from poolpilot.api import conditions as cond
from poolpilot.api import types as api
from poolpilot.api import validation
from poolpilot.backends.batching import BatchingActuator, BatchingError, Running
from poolpilot.backends.kube import Cluster, ClusterError, ObjectRef
from poolpilot.backends.metrics.base import PoolKey
from poolpilot.backends.pods import PodInfo, PodLister
from poolpilot.backends.workloads import Autoscaler, Scale, WorkloadScaler
from poolpilot.reconcile.signals import Observation, SignalCache, signal_problems
from poolpilot.settings import OperatorSettings


@dataclass(frozen=True, slots=True)
class Services:
    """What a tick may touch; built once by the handlers (real clients) or by tests (fakes)."""

    cluster: Cluster
    workloads: WorkloadScaler
    signals: SignalCache
    settings: OperatorSettings
    pods: PodLister
    batching: BatchingActuator


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod as the tick sees it: its identity and what its model runs (None = unknown)."""

    pod: PodInfo
    running: Running | None = None
    error: str | None = None  # why the pod could not be asked

    @property
    def name(self) -> str:
        return self.pod.name


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the tick learned, before deciding."""

    spec: api.InferencePoolSpec | None
    problems: tuple[validation.Problem, ...]
    problem_reason: str | None
    scale: Scale | None = None
    observation: Observation | None = None  # None in Off mode or when the spec is unusable
    node_pool: api.GPUNodePoolSpec | None = None
    node_pool_status: Mapping[str, Any] = field(default_factory=dict)
    pods: tuple[PodView, ...] = ()  # Ready pods, sorted by name, with what they run
    pods_error: str | None = None
    autoscalers: tuple[Autoscaler, ...] = ()
    metric_problems: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Whether the pool is to be decided on (valid, references found, not Off)."""
        return self.spec is not None and not self.problems and self.spec.mode is not api.Mode.OFF


def pool_ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = body.get("metadata") or {}
    return ObjectRef(
        api.API_VERSION,
        api.INFERENCE_POOL_KIND,
        str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=meta.get("uid"),
    )


def target_ref(spec: api.InferencePoolSpec, namespace: str) -> ObjectRef:
    t = spec.target_ref
    return ObjectRef(t.api_version, t.kind, t.name, namespace)


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
        return Observed(None, tuple(problems), cond.INVALID_SPEC)
    if spec.mode is api.Mode.OFF:  # Off: nothing is read beyond the spec
        return Observed(spec, (), None)

    node_pool_body: dict[str, Any] | None = None
    namespace_labels: dict[str, str] = {}
    if spec.node_pool is not None:
        node_pool_body = await svc.cluster.get_custom_object(
            ObjectRef(api.API_VERSION, api.GPU_NODE_POOL_KIND, spec.node_pool.name), api.GPU_NODE_POOL_PLURAL
        )
        if node_pool_body is not None:
            namespace_labels = await svc.cluster.get_namespace_labels(ref.namespace or "") or {}
    target = target_ref(spec, ref.namespace or "")
    scale = await svc.workloads.get_scale(target)
    problems = validation.check_inference_pool(
        body,
        namespace_labels=namespace_labels,
        target=None if scale is None else {"kind": spec.target_ref.kind},
        node_pool=node_pool_body,
    )
    if problems:
        return Observed(spec, tuple(problems), _classify(problems[0], node_pool_body), scale)
    assert scale is not None

    node_pool = None
    if node_pool_body is not None:
        node_pool, _ = validation.parse_gpu_node_pool(node_pool_body)
    key = PoolKey(ref.namespace or "", ref.name, spec.model.name, spec.slo.latency_quantile)
    observation, (pods, pods_error), autoscalers = await asyncio.gather(
        svc.signals.get(key),
        _pods(svc, spec, ref.namespace or "", scale),
        _autoscalers(svc, spec, target),
    )
    metric_problems = () if observation.error else tuple(signal_problems(observation.signals))
    return Observed(
        spec,
        (),
        None,
        scale,
        observation,
        node_pool,
        (node_pool_body or {}).get("status") or {},
        pods,
        pods_error,
        autoscalers,
        metric_problems,
    )


async def _pods(
    svc: Services, spec: api.InferencePoolSpec, namespace: str, scale: Scale
) -> tuple[tuple[PodView, ...], str | None]:
    """Ready pods of the target with what their model runs (read concurrently, bounded)."""
    try:
        pods = await svc.pods.list_pods(namespace, scale.selector)
    except ClusterError as exc:
        return (), str(exc)
    ready = [p for p in pods if p.ready]
    limit = asyncio.Semaphore(16)

    async def view(pod: PodInfo) -> PodView:
        async with limit:
            try:
                running = await svc.batching.read(pod.url(spec.model.http_port), spec.model.name)
            except BatchingError as exc:
                return PodView(pod, None, str(exc))
            return PodView(pod, running, None if running is not None else f"{spec.model.name} not ready")

    views = await asyncio.gather(*(view(p) for p in ready))
    await svc.batching.forget({p.url(spec.model.http_port) for p in ready})
    return tuple(views), None


async def _autoscalers(
    svc: Services, spec: api.InferencePoolSpec, target: ObjectRef
) -> tuple[Autoscaler, ...]:
    """Autoscalers on the same workload; only Auto mode would fight them, so only Auto looks."""
    if spec.mode is not api.Mode.AUTO:
        return ()
    return tuple(await svc.workloads.autoscalers_of(target))


def common_batching(pods: Sequence[PodView]) -> Any:
    """The setting most Ready pods run (the pool's de-facto setting before PoolPilot set one), or None."""
    counts: dict[Any, int] = {}
    for view in pods:
        if view.running is not None and view.running.batching is not None:
            counts[view.running.batching] = counts.get(view.running.batching, 0) + 1
    if not counts:
        return None
    return max(counts.items(), key=lambda kv: (kv[1], repr(kv[0])))[0]


def tokens_per_s(observed: Observed) -> float:
    """Tokens served per second by the pool (NaN when no token metric answers)."""
    if observed.observation is None:
        return math.nan
    s = observed.observation.signals
    return s.mean_tokens_per_request * s.request_rate_per_s
