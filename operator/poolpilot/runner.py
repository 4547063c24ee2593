"""`poolpilot run`: parse flags into `OperatorSettings`, then embed kopf (poolpilot.handlers.operator).

kopf is imported only under `poolpilot.handlers`; this module stays importable without it (the flags
and their validation are unit-tested here).
"""

from __future__ import annotations

import argparse
import logging
import sys

from poolpilot.settings import (
    LatencySource,
    LogFormat,
    OperatorSettings,
    PrometheusSettings,
    prometheus_url_from_env,
)

logger = logging.getLogger(__name__)

_DEFAULTS = PrometheusSettings()


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
