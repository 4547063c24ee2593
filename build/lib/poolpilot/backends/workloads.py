"""Replicas of a pool's Triton workload, read and written only through the `/scale` subresource.

`/scale` works for Deployments, StatefulSets and any custom resource that declares a scale
subresource, so the operator needs no knowledge of the workload's pod template, and RBAC can be
limited to `deployments/scale`. `FakeWorkloads` is the unit-test twin.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from poolpilot.backends.kube import ClusterError, ObjectRef

KNOWN_PLURALS: Final[dict[tuple[str, str], str]] = {
    ("apps", "Deployment"): "deployments",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "ReplicaSet"): "replicasets",
    ("cluster.x-k8s.io", "MachineDeployment"): "machinedeployments",
    ("cluster.x-k8s.io", "MachinePool"): "machinepools",
}


def plural_of(ref: ObjectRef) -> str:
    """The resource plural for a kind; known kinds explicitly, else the usual lower-case + s."""
    return KNOWN_PLURALS.get((ref.group, ref.kind), ref.kind.lower() + "s")


@dataclass(frozen=True, slots=True)
class Scale:
    """What `/scale` says: desired replicas (spec), current replicas (status), and the version read."""

    spec_replicas: int
    status_replicas: int
    selector: str = ""
    resource_version: str | None = None  # a write conditioned on it fails (409) if someone wrote since


class ScaleConflict(ClusterError):
    """The workload changed since its scale was read (HTTP 409): re-read and decide again next tick."""


@dataclass(frozen=True, slots=True)
class Autoscaler:
    """Another autoscaler that targets the same workload (PoolPilot must not fight it)."""

    kind: str  # HorizontalPodAutoscaler, or the owner's kind (e.g. KEDA's ScaledObject)
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


FIELD_MANAGER = "poolpilot"
"""The field manager of PoolPilot's /scale writes (managedFields: `spec.replicas` owned by `poolpilot`)."""


class WorkloadScaler(Protocol):
    async def get_scale(self, ref: ObjectRef) -> Scale | None:
        """The workload's scale, or None when the workload does not exist."""

    async def set_replicas(
        self, ref: ObjectRef, replicas: int, *, resource_version: str | None = None
    ) -> None:
        """Set spec.replicas through /scale; with `resource_version`, only if nobody wrote since (else
        ScaleConflict). Raises ClusterError on other failures."""

    async def autoscalers_of(self, ref: ObjectRef) -> list[Autoscaler]:
        """HorizontalPodAutoscalers (KEDA's included, named by their ScaledObject) targeting `ref`."""


def _scale_from(obj: Any) -> Scale:
    if not isinstance(obj, dict):
        obj = obj.to_dict() if hasattr(obj, "to_dict") else {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion") or meta.get("resource_version")
    return Scale(
        spec_replicas=int(spec.get("replicas") or 0),
        status_replicas=int(status.get("replicas") or 0),
        selector=str(status.get("selector") or ""),
        resource_version=str(rv) if rv else None,
    )


def hpa_targets(hpa: dict[str, Any], ref: ObjectRef) -> Autoscaler | None:
    """The autoscaler behind an HPA (dict form) if it targets `ref`; KEDA's HPAs name their ScaledObject."""
    spec = hpa.get("spec") or {}
    target = spec.get("scaleTargetRef") or spec.get("scale_target_ref") or {}
    api_version = target.get("apiVersion") or target.get("api_version") or ""
    if target.get("kind") != ref.kind or target.get("name") != ref.name:
        return None
    if api_version and api_version.rpartition("/")[0] != ref.group:
        return None
    meta = hpa.get("metadata") or {}
    for owner in meta.get("ownerReferences") or meta.get("owner_references") or []:
        if owner.get("controller") and owner.get("kind"):
            return Autoscaler(str(owner["kind"]), str(owner.get("name", "")))
    return Autoscaler("HorizontalPodAutoscaler", str(meta.get("name", "")))


class KubernetesWorkloads:
    """`WorkloadScaler` on the official client (calls run in threads, with a timeout)."""

    def __init__(self, api_client: Any, *, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._custom: Any = client.CustomObjectsApi(api_client)
        self._autoscaling: Any = client.AutoscalingV2Api(api_client)
        self._api_client = api_client
        self._timeout_s = request_timeout_s

    async def get_scale(self, ref: ObjectRef) -> Scale | None:
        if ref.namespace is None:
            raise ClusterError(f"{ref}: a workload must be namespaced")
        try:
            obj = await asyncio.to_thread(
                self._custom.get_namespaced_custom_object_scale,
                ref.group,
                ref.version,
                ref.namespace,
                plural_of(ref),
                ref.name,
                _request_timeout=self._timeout_s,
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise ClusterError(f"cannot read the scale of {ref}: {exc}") from exc
        return _scale_from(obj)

    async def set_replicas(
        self, ref: ObjectRef, replicas: int, *, resource_version: str | None = None
    ) -> None:
        if replicas < 0:
            raise ValueError(f"replicas: {replicas} is negative")
        if ref.namespace is None:
            raise ClusterError(f"{ref}: a workload must be namespaced")
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            await asyncio.to_thread(
                self._custom.patch_namespaced_custom_object_scale,
                ref.group,
                ref.version,
                ref.namespace,
                plural_of(ref),
                ref.name,
                body,
                field_manager=FIELD_MANAGER,  # who owns spec.replicas, as GitOps tools see it
                _request_timeout=self._timeout_s,
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 409:
                raise ScaleConflict(f"{ref} changed since it was read; not scaled to {replicas}") from exc
            raise ClusterError(f"cannot scale {ref} to {replicas}: {exc}") from exc

    async def autoscalers_of(self, ref: ObjectRef) -> list[Autoscaler]:
        if ref.namespace is None:
            return []
        try:
            result = await asyncio.to_thread(
                self._autoscaling.list_namespaced_horizontal_pod_autoscaler,
                ref.namespace,
                _request_timeout=self._timeout_s,
            )
        except Exception as exc:
            raise ClusterError(f"cannot list HorizontalPodAutoscalers in {ref.namespace}: {exc}") from exc
        found = []
        for item in result.items:
            hpa = self._api_client.sanitize_for_serialization(item)
            autoscaler = hpa_targets(hpa, ref)
            if autoscaler is not None:
                found.append(autoscaler)
        return found


@dataclass
class FakeWorkloads:
    """In-memory `WorkloadScaler`: scales keyed by (namespace, name); records every write."""

    scales: dict[tuple[str | None, str], Scale] = field(default_factory=dict)
    writes: list[tuple[ObjectRef, int]] = field(default_factory=list)
    autoscalers: dict[tuple[str | None, str], list[Autoscaler]] = field(default_factory=dict)

    async def get_scale(self, ref: ObjectRef) -> Scale | None:
        return self.scales.get((ref.namespace, ref.name))

    async def set_replicas(
        self, ref: ObjectRef, replicas: int, *, resource_version: str | None = None
    ) -> None:
        key = (ref.namespace, ref.name)
        if key not in self.scales:
            raise ClusterError(f"{ref} not found")
        old = self.scales[key]
        if resource_version is not None and old.resource_version not in (None, resource_version):
            raise ScaleConflict(f"{ref} changed since it was read; not scaled to {replicas}")
        self.writes.append((ref, replicas))
        version = str(int(old.resource_version or "0") + 1)
        self.scales[key] = Scale(replicas, old.status_replicas, old.selector, version)

    async def autoscalers_of(self, ref: ObjectRef) -> list[Autoscaler]:
        return list(self.autoscalers.get((ref.namespace, ref.name), []))
