"""Embed kopf: PoolPilot's registry, kopf settings and logging, run until signalled.

`poolpilot run` (poolpilot.runner) parses flags into `OperatorSettings` and calls `run()`; nothing
shells out to `kopf run`, so the same settings apply in tests, the sandbox and production.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from poolpilot.handlers import gpunodepool, inferencepool, watchcache
from poolpilot.handlers.services import Runtime, build_runtime, ensure_peering
from poolpilot.settings import ANNOTATION_PREFIX, FINALIZER, LogFormat, OperatorSettings

logger = logging.getLogger(__name__)


def configure_logging(settings: OperatorSettings) -> None:
    """kopf's formatter for every logger: JSON lines (with the object's reference under `k8s`) or plain."""
    fmt = kopf.LogFormat.JSON if settings.log_format is LogFormat.JSON else kopf.LogFormat.PLAIN
    kopf.configure(verbose=settings.verbose, log_format=fmt, log_refkey="k8s")


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    """kopf's settings for production: bounded watches and requests, our finalizer and annotations."""
    ks = kopf.OperatorSettings()
    # Reconnect watches regularly: a load balancer can silently freeze a long watch (kopf docs).
    ks.watching.server_timeout = settings.watch_server_timeout_s
    ks.watching.client_timeout = settings.watch_client_timeout_s
    ks.watching.connect_timeout = 30
    ks.networking.request_timeout = settings.request_timeout_s
    ks.networking.connect_timeout = 30
    # kopf's own Events (handler failures) at WARNING: our reconcilers post the meaningful ones.
    ks.posting.level = logging.WARNING
    ks.posting.reporting_component = "poolpilot"
    ks.posting.event_name_prefix = "poolpilot-"
    ks.persistence.finalizer = FINALIZER
    # Progress and diff-base in annotations only: status belongs to PoolPilot's own schema (and is
    # pruned by it), so kopf must not try to keep state there.
    ks.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    ks.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    ks.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    return ks


API_THREADS = 32
"""Threads for blocking Kubernetes client calls (I/O-bound: they wait on the API server, not the CPU)."""


def build_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    inferencepool.register(registry, cancellation_timeout_s=settings.daemon_cancellation_timeout_s)
    gpunodepool.register(registry, interval_s=settings.node_pool_interval_s)
    watchcache.register(registry)

    async def startup(memo: kopf.Memo, **_: Any) -> None:
        # The Kubernetes client blocks: its calls run in the loop's default executor, whose stock size
        # (CPUs + 4) would queue hundreds of pools' reads behind a handful of threads.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="poolpilot-api")
        )
        memo["runtime"] = build_runtime(settings)
        if settings.peering_name:
            await ensure_peering(memo["runtime"], settings)
        logger.info(
            "PoolPilot operator started: namespaces=%s prometheus=%s",
            ",".join(settings.namespaces) or "*",
            settings.prometheus.url,
        )

    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime: Runtime | None = memo.get("runtime")
        if runtime is not None:
            await runtime.close()

    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account first, else $KUBECONFIG (kopf's native logins, no client library)."""
        info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs)
        return info or kopf.login_with_kubeconfig(**kwargs)

    # An explicit registry does not get kopf's implicit login handlers: register ours.
    kopf.on.login(registry=registry, id="poolpilot_login")(login)
    kopf.on.startup(registry=registry, id="poolpilot_startup")(startup)
    kopf.on.cleanup(registry=registry, id="poolpilot_cleanup")(cleanup)
    return registry


def run(settings: OperatorSettings) -> int:
    """Run the operator in this thread until SIGINT/SIGTERM; returns the process exit code."""
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    kopf.run(
        registry=build_registry(settings),
        settings=kopf_settings(settings),
        memo=kopf.Memo(),
        clusterwide=settings.all_namespaces,
        namespaces=list(settings.namespaces),
        standalone=settings.standalone,
        peering_name=settings.peering_name,
        priority=settings.peering_priority or 0,
        liveness_endpoint=liveness,
    )
    return 0
