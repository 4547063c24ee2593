"""The operator's own Prometheus metrics (served by `poolpilot run --metrics-port`).

A dedicated registry, so tests and an embedding process see only PoolPilot's series.
"""

from __future__ import annotations

import contextlib
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

TICKS = Counter(
    "poolpilot_ticks",
    "Reconcile ticks by kind and outcome (ok, invalid, error).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
TICK_SECONDS = Histogram(
    "poolpilot_tick_duration_seconds",
    "Wall time of one reconcile tick.",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
METRIC_FETCHES = Counter(
    "poolpilot_metric_fetches",
    "Batched metric fetches (one set of PromQL queries for all pools) by outcome.",
    ["outcome"],
    registry=REGISTRY,
)
POOL_READY = Gauge(
    "poolpilot_pool_ready",
    "1 when the InferencePool's Ready condition is True.",
    ["namespace", "pool"],
    registry=REGISTRY,
)
POOL_REPLICAS = Gauge(
    "poolpilot_pool_replicas", "Replicas of the pool's target.", ["namespace", "pool"], registry=REGISTRY
)
POOL_P99_MS = Gauge(
    "poolpilot_pool_latency_ms",
    "Measured latency at the pool's objective quantile, in ms (NaN when unknown).",
    ["namespace", "pool"],
    registry=REGISTRY,
)


def forget_pool(namespace: str, pool: str) -> None:
    """Drop a deleted pool's series so they do not linger at their last value."""
    for gauge in (POOL_READY, POOL_REPLICAS, POOL_P99_MS):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, pool)


def record_pool(namespace: str, pool: str, *, ready: bool, replicas: int | None, p99_ms: float) -> None:
    POOL_READY.labels(namespace, pool).set(1.0 if ready else 0.0)
    POOL_REPLICAS.labels(namespace, pool).set(math.nan if replicas is None else float(replicas))
    POOL_P99_MS.labels(namespace, pool).set(p99_ms)
