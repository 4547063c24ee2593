"""The operator's own Prometheus metrics (served by `poolpilot run --metrics-port`).

A dedicated registry, so tests and an embedding process see only PoolPilot's series. Names follow
Prometheus' conventions: base units (`_seconds`), `_total` on counters, one unit per metric. The chart's
dashboard and PrometheusRule use these names (docs/operations.md lists them).
"""

from __future__ import annotations

import contextlib
import math
import platform
from collections.abc import Iterable
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, ...

_POOL = ["namespace", "pool"]


def _version() -> str:
    try:
        return metadata.version("poolpilot")
    except metadata.PackageNotFoundError:
        return "unknown"


BUILD_INFO = Gauge(
    "poolpilot_build_info",
    "Always 1; labels say which PoolPilot build runs.",
    ["version", "python_version"],
    registry=REGISTRY,
)
BUILD_INFO.labels(_version(), platform.python_version()).set(1)

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
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 600),
    registry=REGISTRY,
)
METRIC_FETCHES = Counter(
    "poolpilot_metric_fetches",
    "Batched metric fetches (one set of PromQL queries for all pools) by outcome.",
    ["outcome"],
    registry=REGISTRY,
)
STATUS_WRITES = Counter(
    "poolpilot_status_writes",
    "Status patches written, by kind (a steady pool writes only on its heartbeat).",
    ["kind"],
    registry=REGISTRY,
)
POOL_READY = Gauge(
    "poolpilot_pool_ready", "1 when the InferencePool's Ready condition is True.", _POOL, registry=REGISTRY
)
POOL_ACTIVE = Gauge(
    "poolpilot_pool_active",
    "1 when PoolPilot may change the pool (Auto mode, no conflicting autoscaler).",
    _POOL,
    registry=REGISTRY,
)
POOL_METRICS_AVAILABLE = Gauge(
    "poolpilot_pool_metrics_available",
    "1 when the pool's signals were present and valid at the last tick.",
    _POOL,
    registry=REGISTRY,
)
POOL_REPLICAS = Gauge(
    "poolpilot_pool_replicas", "Replicas of the pool's target (spec).", _POOL, registry=REGISTRY
)
POOL_READY_REPLICAS = Gauge(
    "poolpilot_pool_ready_replicas",
    "Ready pods running the pool's batching setting.",
    _POOL,
    registry=REGISTRY,
)
POOL_DESIRED_REPLICAS = Gauge(
    "poolpilot_pool_desired_replicas",
    "Replicas the last decision asked for (or recommended).",
    _POOL,
    registry=REGISTRY,
)
POOL_LATENCY = Gauge(
    "poolpilot_pool_latency_seconds",
    "Measured latency at the pool's objective quantile (NaN when unknown).",
    _POOL,
    registry=REGISTRY,
)
POOL_OBJECTIVE = Gauge(
    "poolpilot_pool_latency_objective_seconds",
    "The pool's latency objective (spec.slo.latencyTargetMs).",
    _POOL,
    registry=REGISTRY,
)
POOL_PREDICTED = Gauge(
    "poolpilot_pool_predicted_latency_seconds",
    "Latency the policy predicts for its chosen settings (NaN on hold).",
    _POOL,
    registry=REGISTRY,
)
POOL_QUEUE_DELAY = Gauge(
    "poolpilot_pool_batching_max_queue_delay_seconds",
    "max_queue_delay_microseconds of the pool's batching setting, in seconds.",
    _POOL,
    registry=REGISTRY,
)
POOL_INSTANCES = Gauge(
    "poolpilot_pool_batching_instances",
    "instance_group count of the pool's batching setting.",
    _POOL,
    registry=REGISTRY,
)
POOL_MAX_BATCH = Gauge(
    "poolpilot_pool_batching_max_batch_size",
    "max_batch_size of the pool's batching setting.",
    _POOL,
    registry=REGISTRY,
)
POOL_GPUS = Gauge("poolpilot_pool_gpus", "GPUs the pool's replicas hold.", _POOL, registry=REGISTRY)
POOL_GPU_SECONDS = Counter(
    "poolpilot_pool_gpu_seconds",
    "GPU time held by the pool's replicas (GPU-hours = increase / 3600).",
    _POOL,
    registry=REGISTRY,
)
POOL_COST = Gauge(
    "poolpilot_pool_cost_per_1k_tokens_usd",
    "GPU cost per 1000 tokens served, in US dollars (NaN without a token metric).",
    _POOL,
    registry=REGISTRY,
)
DECISIONS = Counter(
    "poolpilot_decisions",
    "Decisions applied (Auto) or recommended (Recommend), by action: scale_out, scale_in, batching, hold.",
    [*_POOL, "action"],
    registry=REGISTRY,
)
ROLLOUTS = Counter(
    "poolpilot_batching_rollouts",
    "Batching rollouts by outcome: started, completed, rolled_back.",
    [*_POOL, "outcome"],
    registry=REGISTRY,
)
_NODEPOOL = ["nodepool"]
NODEPOOL_NODES = Gauge(
    "poolpilot_nodepool_nodes",
    "Nodes of a GPUNodePool by state: desired (asked of the provider), current, ready.",
    [*_NODEPOOL, "state"],
    registry=REGISTRY,
)
NODEPOOL_MAX_NODES = Gauge(
    "poolpilot_nodepool_max_nodes", "spec.nodes.max of a GPUNodePool.", _NODEPOOL, registry=REGISTRY
)
NODEPOOL_DEMAND = Gauge(
    "poolpilot_nodepool_demand_gpus",
    "GPUs the admitted pools drawing on a GPUNodePool need, by horizon: now, ahead (one node lead time).",
    [*_NODEPOOL, "horizon"],
    registry=REGISTRY,
)
NODEPOOL_CHANGES = Counter(
    "poolpilot_nodepool_changes",
    "Node-count changes asked of providers, by direction (up, down).",
    [*_NODEPOOL, "direction"],
    registry=REGISTRY,
)

_POOL_GAUGES: tuple[Gauge, ...] = (
    POOL_READY,
    POOL_ACTIVE,
    POOL_METRICS_AVAILABLE,
    POOL_REPLICAS,
    POOL_READY_REPLICAS,
    POOL_DESIRED_REPLICAS,
    POOL_LATENCY,
    POOL_OBJECTIVE,
    POOL_PREDICTED,
    POOL_QUEUE_DELAY,
    POOL_INSTANCES,
    POOL_MAX_BATCH,
    POOL_GPUS,
    POOL_COST,
)


def _nan(x: float | int | None, scale: float = 1.0) -> float:
    return math.nan if x is None else float(x) * scale


def forget_pool(namespace: str, pool: str) -> None:
    """Drop a deleted pool's series so they do not linger at their last value."""
    for gauge in _POOL_GAUGES:
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, pool)


def record_pool(
    namespace: str,
    pool: str,
    *,
    ready: bool,
    active: bool = False,
    metrics_available: bool = False,
    replicas: int | None,
    ready_replicas: int | None = None,
    desired_replicas: int | None = None,
    p99_ms: float,
    objective_ms: float | None = None,
    predicted_p99_ms: float | None = None,
    queue_delay_us: int | None = None,
    instances: int | None = None,
    max_batch_size: int | None = None,
    gpus: int | None = None,
    cost_per_1k_tokens_usd: float | None = None,
) -> None:
    """Set every per-pool gauge from one tick (None/NaN where unknown)."""
    labels = (namespace, pool)
    POOL_READY.labels(*labels).set(1.0 if ready else 0.0)
    POOL_ACTIVE.labels(*labels).set(1.0 if active else 0.0)
    POOL_METRICS_AVAILABLE.labels(*labels).set(1.0 if metrics_available else 0.0)
    POOL_REPLICAS.labels(*labels).set(_nan(replicas))
    POOL_READY_REPLICAS.labels(*labels).set(_nan(ready_replicas))
    POOL_DESIRED_REPLICAS.labels(*labels).set(_nan(desired_replicas))
    POOL_LATENCY.labels(*labels).set(_nan(p99_ms, 1e-3))
    POOL_OBJECTIVE.labels(*labels).set(_nan(objective_ms, 1e-3))
    POOL_PREDICTED.labels(*labels).set(_nan(predicted_p99_ms, 1e-3))
    POOL_QUEUE_DELAY.labels(*labels).set(_nan(queue_delay_us, 1e-6))
    POOL_INSTANCES.labels(*labels).set(_nan(instances))
    POOL_MAX_BATCH.labels(*labels).set(_nan(max_batch_size))
    POOL_GPUS.labels(*labels).set(_nan(gpus))
    POOL_COST.labels(*labels).set(_nan(cost_per_1k_tokens_usd))


def add_gpu_seconds(namespace: str, pool: str, gpus: int, seconds: float) -> None:
    if gpus > 0 and seconds > 0:
        POOL_GPU_SECONDS.labels(namespace, pool).inc(gpus * seconds)


def record_node_pool(
    name: str,
    *,
    desired: int | None,
    current: int | None,
    ready: int | None,
    max_nodes: int,
    demand_now: int,
    demand_ahead: int,
) -> None:
    for state, value in (("desired", desired), ("current", current), ("ready", ready)):
        NODEPOOL_NODES.labels(name, state).set(_nan(value))
    NODEPOOL_MAX_NODES.labels(name).set(max_nodes)
    NODEPOOL_DEMAND.labels(name, "now").set(demand_now)
    NODEPOOL_DEMAND.labels(name, "ahead").set(demand_ahead)


def forget_node_pool(name: str, states: Iterable[str] = ("desired", "current", "ready")) -> None:
    for state in states:
        with contextlib.suppress(KeyError):
            NODEPOOL_NODES.remove(name, state)
    for horizon in ("now", "ahead"):
        with contextlib.suppress(KeyError):
            NODEPOOL_DEMAND.remove(name, horizon)
    with contextlib.suppress(KeyError):
        NODEPOOL_MAX_NODES.remove(name)
