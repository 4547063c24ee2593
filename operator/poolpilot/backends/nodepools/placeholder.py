"""Placeholder pods: a low-priority Deployment whose pods each reserve one whole GPU node.

Any node autoscaler (Cluster Autoscaler, Karpenter) then keeps that many nodes; real Triton pods
pre-empt the placeholders. Node count = the Deployment's replicas (0 when it does not exist yet).
"""

from __future__ import annotations

import asyncio
from typing import Any

from poolpilot.api import types as api
from poolpilot.backends.kube import ClusterError, ObjectRef
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.backends.workloads import KubernetesWorkloads

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def deployment_name(pool_name: str) -> str:
    return f"poolpilot-placeholder-{pool_name}"[:63]


def placeholder_deployment(pool_name: str, spec: api.GPUNodePoolSpec) -> dict[str, Any]:
    """The placeholder Deployment (pure, so its shape is unit-testable)."""
    cfg = spec.provider.placeholder
    assert cfg is not None
    labels = {"app.kubernetes.io/managed-by": "poolpilot", "poolpilot.io/placeholder-for": pool_name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(pool_name), "namespace": cfg.namespace, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": cfg.priority_class_name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "reserve",
                            "image": PAUSE_IMAGE,
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(spec.gpus_per_node)},
                                "limits": {"nvidia.com/gpu": str(spec.gpus_per_node)},
                            },
                        }
                    ],
                },
            },
        },
    }


class PlaceholderNodePool:
    def __init__(self, name: str, spec: api.GPUNodePoolSpec, api_client: Any) -> None:
        cfg = spec.provider.placeholder
        assert cfg is not None
        self._name = name
        self._spec = spec
        self._api_client = api_client
        self._ref = ObjectRef("apps/v1", "Deployment", deployment_name(name), namespace=cfg.namespace)
        self._scaler = KubernetesWorkloads(api_client)

    async def get_nodes(self) -> int:
        try:
            scale = await self._scaler.get_scale(self._ref)
        except ClusterError as exc:
            raise ProviderError(str(exc)) from exc
        return 0 if scale is None else scale.spec_replicas

    async def get_ready_nodes(self) -> int:
        """Ready placeholder pods: each holds a whole node the node autoscaler brought up."""
        try:
            scale = await self._scaler.get_scale(self._ref)
        except ClusterError as exc:
            raise ProviderError(str(exc)) from exc
        return 0 if scale is None else scale.status_replicas

    async def set_nodes(self, count: int) -> None:
        try:
            if await self._scaler.get_scale(self._ref) is None:
                await self._create()
            await self._scaler.set_replicas(self._ref, count)
        except (ClusterError, ValueError) as exc:
            raise ProviderError(str(exc)) from exc

    async def _create(self) -> None:
        from kubernetes import client

        apps: Any = client.AppsV1Api(self._api_client)
        body = placeholder_deployment(self._name, self._spec)
        try:
            await asyncio.to_thread(apps.create_namespaced_deployment, self._ref.namespace, body)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:  # created concurrently: fine
                raise ProviderError(f"cannot create {self._ref}: {exc}") from exc


def build(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> PlaceholderNodePool:
    if spec.provider.placeholder is None:
        raise ProviderError("spec.provider.placeholder: missing")
    if ctx.api_client is None:
        raise ProviderError(f"GPUNodePool {name}: the placeholder provider needs a Kubernetes client")
    return PlaceholderNodePool(name, spec, ctx.api_client)
