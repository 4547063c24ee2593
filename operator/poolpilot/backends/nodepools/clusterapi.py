"""Cluster API: node count = replicas of a MachineDeployment or MachinePool, via its /scale subresource."""

from __future__ import annotations

from poolpilot.api import types as api
from poolpilot.backends.kube import ClusterError, ObjectRef
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.backends.workloads import KubernetesWorkloads

API_VERSION = "cluster.x-k8s.io/v1beta1"


class ClusterAPINodePool:
    def __init__(self, ref: ObjectRef, scaler: KubernetesWorkloads) -> None:
        self._ref = ref
        self._scaler = scaler

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
    return ClusterAPINodePool(ref, KubernetesWorkloads(ctx.api_client))
