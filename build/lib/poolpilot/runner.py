"""`poolpilot run`: parse flags into `OperatorSettings`, then embed kopf (poolpilot.handlers.operator).

kopf is imported only under `poolpilot.handlers`; this module stays importable without it (the flags
and their validation are unit-tested here).
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
import time

from poolpilot.settings import (
    LatencySource,
    LogFormat,
    OperatorSettings,
    PrometheusSettings,
    prometheus_url_from_env,
    seniority_priority,
)

logger = logging.getLogger(__name__)

_DEFAULTS = PrometheusSettings()
_OPERATOR = OperatorSettings()
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true", help="watch every namespace (the default)"
    )
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument(
        "--standalone", action="store_true", help="run without kopf peering, as a single replica (default)"
    )
    peering.add_argument(
        "--peering", metavar="NAME", help="coordinate replicas through the kopf peering object NAME"
    )
    parser.add_argument(
        "--priority",
        type=int,
        metavar="N",
        help="kopf peering priority (the highest live one acts); default: earlier start = higher",
    )
    parser.add_argument("--liveness-port", type=int, metavar="PORT", help="serve kopf's /healthz on PORT")
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve the operator's own Prometheus metrics on PORT"
    )
    parser.add_argument(
        "--prometheus-url",
        default=prometheus_url_from_env(),
        help="Prometheus HTTP API with Triton's metrics (default: $POOLPILOT_PROMETHEUS_URL or %(default)s)",
    )
    parser.add_argument(
        "--latency-source",
        choices=[s.value for s in LatencySource],
        default=LatencySource.SUMMARY.value,
        help="Triton latency family for the pool's quantile (default: %(default)s)",
    )
    parser.add_argument(
        "--latency-histogram-metric",
        default=_DEFAULTS.latency_histogram_metric,
        help="histogram family when --latency-source=histogram (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-window-seconds",
        type=int,
        default=_DEFAULTS.window_s,
        help="rate() window of the PromQL queries (default: %(default)s)",
    )
    parser.add_argument(
        "--log-format", choices=[f.value for f in LogFormat], default=LogFormat.PLAIN.value, help="log format"
    )
    parser.add_argument(
        "--tokens-metric",
        default=_DEFAULTS.tokens_metric,
        help="Prometheus counter of tokens served, for cost per 1k tokens; '' = none (default: %(default)s)",
    )
    parser.add_argument(
        "--batching-parallelism",
        type=int,
        default=_OPERATOR.batching_parallelism,
        metavar="N",
        help="pods of one pool reloaded at once in a batching rollout (default: %(default)s)",
    )
    parser.add_argument(
        "--batching-load-timeout-seconds",
        type=float,
        default=_OPERATOR.batching_load_timeout_s,
        metavar="S",
        help="timeout of one model reload on one pod (default: %(default)s)",
    )
    parser.add_argument(
        "--node-pool-interval-seconds",
        type=float,
        default=_OPERATOR.node_pool_interval_s,
        metavar="S",
        help="how often each GPUNodePool is sized from its pools' demands (default: %(default)s)",
    )
    parser.add_argument(
        "--status-heartbeat-seconds",
        type=float,
        default=_OPERATOR.status_heartbeat_s,
        metavar="S",
        help="a steady pool's signals are rewritten at least this often (default: %(default)s)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """Flags → settings; raises ValueError naming the flag on bad input."""
    if args.metrics_window_seconds < 10:
        raise ValueError(f"--metrics-window-seconds: {args.metrics_window_seconds} is below 10 s")
    unit_ms = 1.0
    metric = args.latency_histogram_metric
    if metric.endswith("_seconds"):
        unit_ms = 1000.0
    elif metric.endswith("_us"):
        unit_ms = 0.001
    prometheus = PrometheusSettings(
        url=args.prometheus_url,
        window_s=args.metrics_window_seconds,
        latency_source=LatencySource(args.latency_source),
        latency_histogram_metric=metric,
        latency_histogram_unit_ms=unit_ms,
        tokens_metric=args.tokens_metric,
    )
    if args.tokens_metric and not _METRIC_NAME.match(args.tokens_metric):
        raise ValueError(f"--tokens-metric: {args.tokens_metric!r} is not a Prometheus metric name")
    for flag, value in (
        ("--batching-load-timeout-seconds", args.batching_load_timeout_seconds),
        ("--node-pool-interval-seconds", args.node_pool_interval_seconds),
        ("--status-heartbeat-seconds", args.status_heartbeat_seconds),
    ):
        if not value > 0:
            raise ValueError(f"{flag}: {value} must be > 0")
    if args.batching_parallelism < 1:
        raise ValueError(f"--batching-parallelism: {args.batching_parallelism} must be >= 1")
    if args.status_heartbeat_seconds >= _OPERATOR.demand_max_age_s:
        raise ValueError(
            f"--status-heartbeat-seconds: {args.status_heartbeat_seconds} must be below "
            f"{_OPERATOR.demand_max_age_s:g} (node pools treat older pool demands as stale)"
        )
    for flag, value in (("--liveness-port", args.liveness_port), ("--metrics-port", args.metrics_port)):
        if value is not None and not 0 < value < 65536:
            raise ValueError(f"{flag}: {value} is not a TCP port (1..65535)")
    if not prometheus.url.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus-url: {prometheus.url!r} must start with http:// or https://")
    return OperatorSettings(
        namespaces=tuple(dict.fromkeys(args.namespace)),
        standalone=args.peering is None,
        peering_name=args.peering,
        peering_priority=(
            args.priority
            if args.priority is not None
            else seniority_priority(time.time(), random.SystemRandom().randrange(1000))
        ),
        batching_parallelism=args.batching_parallelism,
        batching_load_timeout_s=args.batching_load_timeout_seconds,
        node_pool_interval_s=args.node_pool_interval_seconds,
        status_heartbeat_s=args.status_heartbeat_seconds,
        liveness_port=args.liveness_port,
        metrics_port=args.metrics_port,
        log_format=LogFormat(args.log_format),
        verbose=args.verbose,
        prometheus=prometheus,
    )


def main(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"poolpilot run: {exc}", file=sys.stderr)
        return 2

    from poolpilot.handlers import operator  # kopf is loaded only when the operator really runs

    operator.configure_logging(settings)
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        from poolpilot.reconcile.telemetry import REGISTRY

        start_http_server(settings.metrics_port, registry=REGISTRY)
        logger.info("operator metrics on :%d/metrics", settings.metrics_port)
    return operator.run(settings)
