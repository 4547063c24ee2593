"""Operator-wide dependencies, built once at startup and shared with every handler through `memo`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from poolpilot.backends.batching import TritonBatching
from poolpilot.backends.kube import KubernetesCluster, load_api_client
from poolpilot.backends.metrics.prometheus import PrometheusSource
from poolpilot.backends.nodepools.base import ProviderContext
from poolpilot.backends.pods import KubernetesPods
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

    async def close(self) -> None:
        await self.services.signals.close()
        await self.services.batching.close()
        if self.api_client is not None:
            self.api_client.close()


def build_runtime(settings: OperatorSettings) -> Runtime:
    api_client = load_api_client()
    timeout_s = settings.request_timeout_s
    source = PrometheusSource(settings.prometheus)
    services = Services(
        cluster=KubernetesCluster(api_client, request_timeout_s=timeout_s),
        workloads=KubernetesWorkloads(api_client, request_timeout_s=timeout_s),
        signals=SignalCache(source, min_refresh_s=settings.prometheus.min_refresh_s, clock=time.monotonic),
        settings=settings,
        pods=KubernetesPods(api_client, request_timeout_s=timeout_s),
        batching=TritonBatching(
            read_timeout_s=settings.batching_read_timeout_s, load_timeout_s=settings.batching_load_timeout_s
        ),
    )
    return Runtime(services=services, providers=ProviderContext(api_client=api_client), api_client=api_client)
