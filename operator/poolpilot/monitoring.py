"""The chart's Prometheus rules and Grafana dashboard, generated from the code they describe.

Why generated: the recording rules are the very PromQL the operator sends (`backends.metrics.queries`), and
the alerts and panels use the operator's own metric names (`reconcile.telemetry`); written by hand they would
drift. `python -m poolpilot.monitoring --chart charts/poolpilot` rewrites
`files/prometheus-rules.yaml` (a plain Prometheus rule file, also the PrometheusRule's spec) and
`dashboards/poolpilot.json`; a test fails when they differ from this module's output, and another loads them
into a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final

import yaml

from poolpilot.backends.metrics.queries import build_queries
from poolpilot.settings import PrometheusSettings

RULES_FILE: Final = "files/prometheus-rules.yaml"
DASHBOARD_FILE: Final = "dashboards/poolpilot.json"
PODMONITOR_FILE: Final = "files/podmonitor-relabelings.yaml"
SCRAPE_DOC: Final = "docs/examples/prometheus/triton-pods.yaml"
POOL_POD_LABEL: Final = "poolpilot.io/pool"
METRICS_PORT_NAME: Final = "metrics"

# How Triton pods become targets labelled `namespace` and `pool` — the labelling contract the operator's
# queries rely on. One source: the sandbox's Prometheus, the chart's PodMonitor and the documented scrape
# config are all rendered from it.
POD_RELABELINGS: Final[tuple[dict[str, Any], ...]] = (
    {"source_labels": ["__meta_kubernetes_pod_label_poolpilot_io_pool"], "regex": "(.+)", "action": "keep"},
    {
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": METRICS_PORT_NAME,
        "action": "keep",
    },
    {"source_labels": ["__meta_kubernetes_pod_label_poolpilot_io_pool"], "target_label": "pool"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
)


def pod_scrape_config(*, http_sd_url: str | None = None, interval_s: float | None = None) -> dict[str, Any]:
    """The Prometheus scrape job for Triton pods: Kubernetes pod discovery and the labelling contract.

    `http_sd_url` replaces `kubernetes_sd_configs` with an HTTP SD endpoint serving the same
    `__meta_kubernetes_*` labels (the sandbox's `poolpilot.sandbox.poddiscovery`: Debian's Prometheus is built
    without Kubernetes discovery); the relabelling is the same either way.
    """
    job: dict[str, Any] = {"job_name": "triton-pods"}
    if http_sd_url is None:
        job["kubernetes_sd_configs"] = [{"role": "pod"}]
    else:
        job["http_sd_configs"] = [{"url": http_sd_url, "refresh_interval": "2s"}]
    job["relabel_configs"] = [dict(r) for r in POD_RELABELINGS]
    if interval_s is not None:
        job["scrape_interval"] = f"{interval_s:g}s"
    return job


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.title() for w in rest)


def podmonitor_relabelings() -> list[dict[str, Any]]:
    """POD_RELABELINGS in the Prometheus Operator's spelling (PodMonitor `relabelings`)."""
    return [{_camel(k): v for k, v in r.items()} for r in POD_RELABELINGS]


POOL: Final = '{namespace=~"$namespace", pool=~"$pool"}'

# The operator's metrics the alerts and panels read (each is checked against the operator's registry).
OPERATOR_METRICS: Final = (
    "poolpilot_build_info",
    "poolpilot_pool_latency_seconds",
    "poolpilot_pool_latency_objective_seconds",
    "poolpilot_pool_predicted_latency_seconds",
    "poolpilot_pool_metrics_available",
    "poolpilot_pool_active",
    "poolpilot_pool_replicas",
    "poolpilot_pool_ready_replicas",
    "poolpilot_pool_desired_replicas",
    "poolpilot_pool_batching_max_queue_delay_seconds",
    "poolpilot_pool_batching_instances",
    "poolpilot_pool_batching_max_batch_size",
    "poolpilot_pool_gpu_seconds_total",
    "poolpilot_pool_cost_per_1k_tokens_usd",
    "poolpilot_decisions_total",
    "poolpilot_batching_rollouts_total",
    "poolpilot_nodepool_nodes",
    "poolpilot_nodepool_max_nodes",
    "poolpilot_nodepool_demand_gpus",
)


def _record_name(query_name: str) -> str:
    """`p0.99_ms` → `poolpilot_pool:p99_ms` (a valid metric name; level `poolpilot_pool` = by pool)."""
    return "poolpilot_pool:" + query_name.replace("0.", "").replace(".", "_")


def recording_rules(settings: PrometheusSettings | None = None) -> list[dict[str, Any]]:
    """One recording rule per signal the operator reads, with its own PromQL (default settings)."""
    settings = settings or PrometheusSettings()
    return [{"record": _record_name(q.name), "expr": q.promql} for q in build_queries(settings, {0.99})]


def alerting_rules() -> list[dict[str, Any]]:
    def alert(
        name: str, expr: str, for_: str, severity: str, summary: str, description: str
    ) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": for_,
            "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description},
        }

    return [
        alert(
            "PoolPilotPoolOverObjective",
            "poolpilot_pool_latency_seconds > poolpilot_pool_latency_objective_seconds",
            "10m",
            "warning",
            "InferencePool {{ $labels.namespace }}/{{ $labels.pool }} is over its latency objective",
            "Measured p99 {{ $value | humanizeDuration }} has stayed above the objective for 10 minutes; "
            "`kubectl describe inferencepool` shows the last decision and why.",
        ),
        alert(
            "PoolPilotMetricsMissing",
            "poolpilot_pool_metrics_available == 0",
            "5m",
            "warning",
            "InferencePool {{ $labels.namespace }}/{{ $labels.pool }} has no valid signals",
            "PoolPilot holds the pool (changes nothing) while its signals are missing or invalid; the "
            "MetricsAvailable condition names the metric.",
        ),
        alert(
            "PoolPilotRolloutRolledBack",
            'increase(poolpilot_batching_rollouts_total{outcome="rolled_back"}[15m]) > 0',
            "0m",
            "warning",
            "A batching rollout of {{ $labels.namespace }}/{{ $labels.pool }} was rolled back",
            "A pod refused the new batching setting; the pods changed so far were rolled back and the "
            "setting is not proposed again for a while (BatchingApplied condition, Warning Event).",
        ),
        alert(
            "PoolPilotNodesAtMax",
            'max by (nodepool) (poolpilot_nodepool_nodes{state="desired"}) '
            ">= on (nodepool) max by (nodepool) (poolpilot_nodepool_max_nodes)",
            "15m",
            "warning",
            "GPUNodePool {{ $labels.nodepool }} has been at nodes.max for 15 minutes",
            "The pools drawing on this node pool asked for every node nodes.max allows; if its NodesLimited "
            "condition is True they need more: raise nodes.max or expect their objectives to be missed.",
        ),
        alert(
            "PoolPilotOperatorDown",
            "absent(poolpilot_build_info)",
            "5m",
            "critical",
            "The PoolPilot operator is not being scraped",
            "No operator has reported for 5 minutes: pools keep their last setting, nothing scales.",
        ),
    ]


def rule_file() -> dict[str, Any]:
    """The rule groups, as a Prometheus rule file (the PrometheusRule template wraps the same groups)."""
    return {
        "groups": [
            {"name": "poolpilot.signals", "interval": "30s", "rules": recording_rules()},
            {"name": "poolpilot.alerts", "rules": alerting_rules()},
        ]
    }


def _panel(pid: int, title: str, targets: list[tuple[str, str]], unit: str, x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    """Objective vs p99, replicas, nodes, batching, GPU-hours and cost, decisions — per pool."""
    legend = "{{namespace}}/{{pool}}"
    panels = [
        (
            "p99 latency vs objective",
            [
                (f"poolpilot_pool_latency_seconds{POOL}", f"p99 {legend}"),
                (f"poolpilot_pool_latency_objective_seconds{POOL}", f"objective {legend}"),
                (f"poolpilot_pool_predicted_latency_seconds{POOL}", f"predicted {legend}"),
            ],
            "s",
        ),
        (
            "Replicas: desired / spec / ready",
            [
                (f"poolpilot_pool_desired_replicas{POOL}", f"desired {legend}"),
                (f"poolpilot_pool_replicas{POOL}", f"spec {legend}"),
                (f"poolpilot_pool_ready_replicas{POOL}", f"ready {legend}"),
            ],
            "short",
        ),
        (
            "GPU nodes by node pool",
            [
                ("poolpilot_nodepool_nodes", "{{nodepool}} {{state}}"),
                ("poolpilot_nodepool_max_nodes", "{{nodepool}} max"),
                ('poolpilot_nodepool_demand_gpus{horizon="now"}', "{{nodepool}} demand GPUs"),
            ],
            "short",
        ),
        (
            "Batching: max queue delay",
            [(f"poolpilot_pool_batching_max_queue_delay_seconds{POOL}", legend)],
            "s",
        ),
        (
            "Batching: instances and max batch size",
            [
                (f"poolpilot_pool_batching_instances{POOL}", f"instances {legend}"),
                (f"poolpilot_pool_batching_max_batch_size{POOL}", f"max batch {legend}"),
            ],
            "short",
        ),
        (
            "GPU-hours per hour",
            [(f"sum by (namespace, pool) (rate(poolpilot_pool_gpu_seconds_total{POOL}[5m]))", legend)],
            "short",
        ),
        (
            "Cost per 1k tokens (USD)",
            [(f"poolpilot_pool_cost_per_1k_tokens_usd{POOL}", legend)],
            "currencyUSD",
        ),
        (
            "Decisions per 5 minutes",
            [
                (
                    f"sum by (namespace, pool, action) (increase(poolpilot_decisions_total{POOL}[5m]))",
                    "{{namespace}}/{{pool}} {{action}}",
                ),
                (
                    "sum by (namespace, pool, outcome) "
                    f"(increase(poolpilot_batching_rollouts_total{POOL}[5m]))",
                    "{{namespace}}/{{pool}} rollout {{outcome}}",
                ),
            ],
            "short",
        ),
        (
            "Triton: request rate and p99 (recorded signals)",
            [
                (f"poolpilot_pool:success_per_s{POOL}", f"req/s {legend}"),
                (f"poolpilot_pool:p99_ms{POOL}", f"p99 ms {legend}"),
            ],
            "short",
        ),
    ]
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {
            "name": "namespace",
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": "label_values(poolpilot_pool_replicas, namespace)",
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
        },
        {
            "name": "pool",
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": 'label_values(poolpilot_pool_replicas{namespace=~"$namespace"}, pool)',
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
        },
    ]
    return {
        "uid": "poolpilot-pools",
        "title": "PoolPilot: Triton pools",
        "tags": ["poolpilot", "triton"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables},
        "panels": [
            _panel(i + 1, title, targets, unit, x=(i % 2) * 12, y=(i // 2) * 8)
            for i, (title, targets, unit) in enumerate(panels)
        ],
    }


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def render() -> dict[str, str]:
    """Relative chart path → file content."""
    header = "# Generated by `python -m poolpilot.monitoring --chart charts/poolpilot`; do not edit.\n"
    return {
        RULES_FILE: header + yaml.safe_dump(rule_file(), sort_keys=False, width=100),
        DASHBOARD_FILE: json.dumps(dashboard(), indent=2) + "\n",
        PODMONITOR_FILE: header + yaml.safe_dump(podmonitor_relabelings(), sort_keys=False, width=100),
    }


def scrape_doc() -> str:
    """The documented plain scrape config (docs/examples/prometheus/triton-pods.yaml)."""
    header = (
        "# Prometheus scrape config for Triton pods (in-cluster discovery). Generated by\n"
        "# `python -m poolpilot.monitoring --chart charts/poolpilot --docs docs`; the chart's PodMonitor\n"
        "# and the local sandbox use the same relabelling (poolpilot.monitoring.POD_RELABELINGS).\n"
    )
    return header + yaml.safe_dump({"scrape_configs": [pod_scrape_config()]}, sort_keys=False, width=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chart", type=Path, required=True, help="the chart folder to write into")
    parser.add_argument("--docs", type=Path, help="docs folder: writes examples/prometheus/triton-pods.yaml")
    args = parser.parse_args()
    outputs = {args.chart / rel: text for rel, text in render().items()}
    if args.docs is not None:
        outputs[args.docs / SCRAPE_DOC.removeprefix("docs/")] = scrape_doc()
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
