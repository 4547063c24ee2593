"""Cluster API: node count = replicas of a MachineDeployment or MachinePool, via its /scale subresource."""

from __future__ import annotations

import asyncio
from typing import Any

from poolpilot.api import types as api
from poolpilot.backends.kube import ClusterError, ObjectRef
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.backends.workloads import KubernetesWorkloads, plural_of

API_VERSION = "cluster.x-k8s.io/v1beta1"


class ClusterAPINodePool:
    def __init__(self, ref: ObjectRef, scaler: KubernetesWorkloads, api_client: Any) -> None:
        self._ref = ref
        self._scaler = scaler
        self._api_client = api_client

    async def get_ready_nodes(self) -> int:
        """`status.readyReplicas` of the MachineDeployment/MachinePool (machines whose node is Ready)."""
        from kubernetes import client

        custom: Any = client.CustomObjectsApi(self._api_client)
        plural = plural_of(self._ref)
        try:
            obj = await asyncio.to_thread(
                custom.get_namespaced_custom_object,
                self._ref.group,
                self._ref.version,
                self._ref.namespace,
                plural,
                self._ref.name,
            )
        except Exception as exc:
            raise ProviderError(f"cannot read {self._ref}: {exc}") from exc
        ready = (obj.get("status") or {}).get("readyReplicas") or 0
        return int(ready)

    async def get_nodes(self) -> int:
        try:
            scale = await self._scaler.get_scale(self._ref)
        except ClusterError as exc:
            raise ProviderError(str(exc)) from exc
        if scale is None:
            raise ProviderError(f"{self._ref} not found")
        return scale.spec_replicas

    async def set_nodes(self, count: int) -> None:
        try:
            await self._scaler.set_replicas(self._ref, count)
        except (ClusterError, ValueError) as exc:
            raise ProviderError(str(exc)) from exc

    async def sync(self) -> None:
        return None


def build(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> ClusterAPINodePool:
    cfg = spec.provider.cluster_api
    if cfg is None:
        raise ProviderError("spec.provider.clusterAPI: missing")
    if (cfg.machine_deployment is None) == (cfg.machine_pool is None):
        raise ProviderError("spec.provider.clusterAPI: set exactly one of machineDeployment, machinePool")
    if ctx.api_client is None:
        raise ProviderError(f"GPUNodePool {name}: the clusterAPI provider needs a Kubernetes client")
    kind, obj_name = (
        ("MachineDeployment", cfg.machine_deployment)
        if cfg.machine_deployment is not None
        else ("MachinePool", cfg.machine_pool)
    )
    assert obj_name is not None
    ref = ObjectRef(API_VERSION, kind, obj_name, namespace=cfg.namespace)
    return ClusterAPINodePool(ref, KubernetesWorkloads(ctx.api_client), ctx.api_client)
