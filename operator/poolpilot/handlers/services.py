"""Operator-wide dependencies, built once at startup and shared with every handler through `memo`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from poolpilot.api import types as api
from poolpilot.backends.batching import TritonBatching
from poolpilot.backends.kube import KubernetesCluster, load_api_client
from poolpilot.backends.metrics.prometheus import PrometheusSource
from poolpilot.backends.nodepools.base import ProviderContext
from poolpilot.backends.pods import KubernetesPods
from poolpilot.backends.watchcache import CachedCluster, WatchCache
from poolpilot.backends.workloads import KubernetesWorkloads
from poolpilot.reconcile.inferencepool import Services
from poolpilot.reconcile.signals import SignalCache
from poolpilot.settings import OperatorSettings


@dataclass
class Runtime:
    """What handlers find in `memo.runtime`: the reconcile services and the provider context."""

    services: Services
    providers: ProviderContext
    api_client: Any = field(repr=False, default=None)
    cache: WatchCache = field(default_factory=WatchCache)
    """GPUNodePools and namespace labels from the watches (`handlers.watchcache`), read by every tick."""

    async def close(self) -> None:
        await self.services.signals.close()
        await self.services.batching.close()
        if self.api_client is not None:
            self.api_client.close()


def build_runtime(settings: OperatorSettings) -> Runtime:
    api_client = load_api_client()
    timeout_s = settings.request_timeout_s
    source = PrometheusSource(settings.prometheus)
    cache = WatchCache()
    cluster = KubernetesCluster(api_client, request_timeout_s=timeout_s)
    services = Services(
        cluster=CachedCluster(cluster, cache, frozenset({api.GPU_NODE_POOL_PLURAL})),
        workloads=KubernetesWorkloads(api_client, request_timeout_s=timeout_s),
        signals=SignalCache(source, min_refresh_s=settings.prometheus.min_refresh_s, clock=time.monotonic),
        settings=settings,
        pods=KubernetesPods(api_client, request_timeout_s=timeout_s),
        batching=TritonBatching(
            read_timeout_s=settings.batching_read_timeout_s, load_timeout_s=settings.batching_load_timeout_s
        ),
    )
    return Runtime(
        services=services,
        providers=ProviderContext(api_client=api_client),
        api_client=api_client,
        cache=cache,
    )


async def ensure_peering(runtime: Runtime, settings: OperatorSettings) -> None:
    """Create the kopf peering object(s) the replicas coordinate through, if missing.

    kopf keeps its keep-alives in the object's status but never creates it; without it, mandatory peering
    would keep every replica paused. Cluster-wide operators use a ClusterKopfPeering, namespaced ones a
    KopfPeering in each watched namespace (kopf's own choice).
    """
    import asyncio

    from kubernetes import client

    assert settings.peering_name is not None
    custom: Any = client.CustomObjectsApi(runtime.api_client)
    name = settings.peering_name

    async def create(call: Any, *args: Any) -> None:
        try:
            await asyncio.to_thread(call, *args, _request_timeout=settings.request_timeout_s)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:  # 409: another replica created it first
                raise

    if settings.all_namespaces:
        body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        await create(custom.create_cluster_custom_object, "kopf.dev", "v1", "clusterkopfpeerings", body)
        return
    for ns in settings.namespaces:
        body = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": name, "namespace": ns},
        }
        await create(custom.create_namespaced_custom_object, "kopf.dev", "v1", ns, "kopfpeerings", body)
