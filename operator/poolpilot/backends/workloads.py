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
    """What `/scale` says: desired replicas (spec) and current replicas (status)."""

    spec_replicas: int
    status_replicas: int
    selector: str = ""


class WorkloadScaler(Protocol):
    async def get_scale(self, ref: ObjectRef) -> Scale | None:
        """The workload's scale, or None when the workload does not exist."""

    async def set_replicas(self, ref: ObjectRef, replicas: int) -> None:
        """Set spec.replicas through /scale. Idempotent; raises ClusterError on failure."""


def _scale_from(obj: Any) -> Scale:
    if not isinstance(obj, dict):
        obj = obj.to_dict() if hasattr(obj, "to_dict") else {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return Scale(
        spec_replicas=int(spec.get("replicas") or 0),
        status_replicas=int(status.get("replicas") or 0),
        selector=str(status.get("selector") or ""),
    )


class KubernetesWorkloads:
    """`WorkloadScaler` on the official client (calls run in threads, with a timeout)."""

    def __init__(self, api_client: Any, *, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._custom: Any = client.CustomObjectsApi(api_client)
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

    async def set_replicas(self, ref: ObjectRef, replicas: int) -> None:
        if replicas < 0:
            raise ValueError(f"replicas: {replicas} is negative")
        if ref.namespace is None:
            raise ClusterError(f"{ref}: a workload must be namespaced")
        try:
            await asyncio.to_thread(
                self._custom.patch_namespaced_custom_object_scale,
                ref.group,
                ref.version,
                ref.namespace,
                plural_of(ref),
                ref.name,
                {"spec": {"replicas": replicas}},
                _request_timeout=self._timeout_s,
            )
        except Exception as exc:
            raise ClusterError(f"cannot scale {ref} to {replicas}: {exc}") from exc


@dataclass
class FakeWorkloads:
    """In-memory `WorkloadScaler`: scales keyed by (namespace, name); records every write."""

    scales: dict[tuple[str | None, str], Scale] = field(default_factory=dict)
    writes: list[tuple[ObjectRef, int]] = field(default_factory=list)

    async def get_scale(self, ref: ObjectRef) -> Scale | None:
        return self.scales.get((ref.namespace, ref.name))

    async def set_replicas(self, ref: ObjectRef, replicas: int) -> None:
        key = (ref.namespace, ref.name)
        if key not in self.scales:
            raise ClusterError(f"{ref} not found")
        self.writes.append((ref, replicas))
        old = self.scales[key]
        self.scales[key] = Scale(replicas, old.status_replicas, old.selector)
