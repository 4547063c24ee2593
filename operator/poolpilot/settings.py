"""Operator settings: one frozen value built from the command line, passed down explicitly.

Nothing here talks to Kubernetes or kopf; `poolpilot.handlers.operator` maps these onto kopf's own
`OperatorSettings`. Keeping them in a plain dataclass lets unit tests build a reconciler without kopf.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

PROMETHEUS_URL_ENV: Final = "POOLPILOT_PROMETHEUS_URL"
DEFAULT_PROMETHEUS_URL: Final = "http://prometheus:9090"

FINALIZER: Final = "poolpilot.io/finalizer"
"""Finalizer kopf puts on pools while their tick daemon runs (removed when the daemon stops)."""

ANNOTATION_PREFIX: Final = "poolpilot.io"
"""Prefix of kopf's progress and last-handled-configuration annotations."""

POOL_LABEL: Final = "poolpilot.io/pool"
"""Pod label naming the InferencePool a Triton pod serves; Prometheus relabels it into `pool`."""


class LogFormat(StrEnum):
    JSON = "json"
    PLAIN = "plain"


class LatencySource(StrEnum):
    """Where the pool's tail latency comes from (see docs/operations.md, triton.md §3.6)."""

    SUMMARY = "summary"
    """`nv_inference_request_summary_us{quantile=...}`, max over pods (per-pod 60 s window)."""
    HISTOGRAM = "histogram"
    """`histogram_quantile` over a histogram (Triton's first-response histogram or a router's)."""


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """How the operator reads Triton's metrics."""

    url: str = DEFAULT_PROMETHEUS_URL
    """Base URL of the Prometheus HTTP API."""
    window_s: int = 60
    """Range of `rate()` / `avg_over_time()` windows in the queries."""
    timeout_s: float = 10.0
    """Per-query HTTP timeout; a slow Prometheus must not stall the tick for long."""
    latency_source: LatencySource = LatencySource.SUMMARY
    """Which Triton latency family gives the pool's p99."""
    latency_histogram_metric: str = "nv_inference_first_response_histogram_ms"
    """Histogram family (without `_bucket`) used when latency_source is `histogram`."""
    latency_histogram_unit_ms: float = 1.0
    """Milliseconds per unit of the histogram's `le` (1 for *_ms, 1000 for *_seconds, 0.001 for *_us)."""
    max_sample_age_s: float = 120.0
    """Older newest samples make MetricsAvailable=False (reason StaleMetrics)."""
    min_refresh_s: float = 5.0
    """Pools ticking within this many seconds share one batch of queries."""
    tokens_metric: str = "poolpilot_executor_tokens_total"
    """Counter of tokens served (per pod, labelled `model`), for cost per 1k tokens; empty = none.
    Triton has no token counter of its own: LLM backends export one under their own name."""


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    """Everything `poolpilot run` can be told, as one immutable value."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all namespaces (cluster-wide)."""
    standalone: bool = True
    """Run without kopf peering (a single replica); False requires `peering_name`."""
    peering_name: str | None = None
    peering_priority: int | None = None
    """kopf peering priority: the highest live priority acts, the others stand by. None = derived from the
    start time (`seniority_priority`), so a running leader keeps leading when a standby starts."""
    liveness_port: int | None = None
    """Port of kopf's liveness endpoint `/healthz` (None = disabled)."""
    metrics_port: int | None = None
    """Port of the operator's own Prometheus metrics (None = disabled)."""
    log_format: LogFormat = LogFormat.PLAIN
    verbose: bool = False
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    default_tick_s: int = 15
    """Tick interval of pools whose spec.tickSeconds is unset (the CRD default is the same)."""
    watch_server_timeout_s: int = 300
    """Watch `timeoutSeconds`: reconnect regularly so a silently dropped watch cannot freeze the operator."""
    watch_client_timeout_s: int = 330
    request_timeout_s: float = 30.0
    """Timeout of each Kubernetes API request made by the operator."""
    daemon_cancellation_timeout_s: float = 10.0
    """How long a pool's tick may take to stop on deletion before kopf abandons it (never blocks forever)."""
    batching_parallelism: int = 1
    """Pods of one pool reloaded at once in a batching rollout (each reload ~doubles the model's memory)."""
    batching_read_timeout_s: float = 5.0
    """Timeout of reading one pod's model config (a pod that does not answer is not counted as ready)."""
    batching_load_timeout_s: float = 600.0
    """Timeout of one model reload on one pod (a real model takes minutes to load)."""
    status_heartbeat_s: float = 60.0
    """A steady pool's status (signals, policy memory) is rewritten at least this often; anything that
    matters (a decision, a condition, a rollout step, node demand) is written at once."""
    node_pool_interval_s: float = 15.0
    """How often each GPUNodePool is sized from the demands of the pools that draw on it."""
    demand_max_age_s: float = 120.0
    """An InferencePool's node demand older than this is treated as hold (its operator tick stopped)."""

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces

    def __post_init__(self) -> None:
        if not self.standalone and not self.peering_name:
            raise ValueError("peering_name: required when not standalone (use --peering NAME)")
        for port_field in ("liveness_port", "metrics_port"):
            port = getattr(self, port_field)
            if port is not None and not 0 < port < 65536:
                raise ValueError(f"{port_field}: {port} is not a TCP port (1..65535)")
        if self.batching_parallelism < 1:
            raise ValueError(f"batching_parallelism: {self.batching_parallelism} is below 1")
        for name in (
            "batching_read_timeout_s",
            "batching_load_timeout_s",
            "status_heartbeat_s",
            "node_pool_interval_s",
            "demand_max_age_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: {getattr(self, name)} must be > 0")
        if not self.prometheus.url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus.url: {self.prometheus.url!r} must start with http:// or https://")


def seniority_priority(start_epoch_s: float, tie_breaker: int) -> int:
    """A kopf peering priority that is higher for an operator started earlier.

    kopf pauses every operator that sees a live peer of higher priority, and *all* of them when two share
    a priority, so replicas of one Deployment need distinct priorities. Older first means a new standby
    never takes over from a running leader (no needless hand-over on every rollout of the operator);
    `tie_breaker` (0..999, random) separates replicas started within the same second.
    """
    return (10**10 - int(start_epoch_s)) * 1000 + tie_breaker % 1000


def prometheus_url_from_env(environ: dict[str, str] | None = None) -> str:
    """The Prometheus URL default: $POOLPILOT_PROMETHEUS_URL, else the in-cluster service name."""
    env = os.environ if environ is None else environ
    return env.get(PROMETHEUS_URL_ENV) or DEFAULT_PROMETHEUS_URL
