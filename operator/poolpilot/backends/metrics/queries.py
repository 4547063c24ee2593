"""PromQL for all pools at once (pure: strings in, strings out).

Labelling contract (docs/operations.md): every Triton pod carries the label `poolpilot.io/pool=<pool>`;
the Prometheus scrape config relabels it into the target label `pool` and the pod's namespace into
`namespace`. Every query groups `by (namespace, pool[, model])`, so one query answers for every pool
and the number of queries per tick does not grow with the number of pools.

Metric semantics follow triton.md §3: durations are cumulative per *request* (divide by successes),
batch size = inferences / executions, the summary p99 is per pod (take the max, never average).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from poolpilot.settings import LatencySource, PrometheusSettings

POOL: Final = "namespace, pool"
POOL_MODEL: Final = "namespace, pool, model"
SELECT: Final = '{pool!=""}'

# name -> (grouping, PromQL template with {w} = window). Per-model families are grouped by model so a
# pod serving several models reports the pool's own model.
_TEMPLATES: Final[dict[str, tuple[str, str]]] = {
    "success_per_s": (POOL_MODEL, "sum by ({g}) (rate(nv_inference_request_success{s}[{w}]))"),
    "requests_per_s": (
        POOL_MODEL,
        'sum by ({g}) (rate({{__name__=~"nv_inference_request_success|nv_inference_request_failure",'
        'pool!=""}}[{w}]))',
    ),
    "inferences_per_s": (POOL_MODEL, "sum by ({g}) (rate(nv_inference_count{s}[{w}]))"),
    "executions_per_s": (POOL_MODEL, "sum by ({g}) (rate(nv_inference_exec_count{s}[{w}]))"),
    "queue_us_per_s": (POOL_MODEL, "sum by ({g}) (rate(nv_inference_queue_duration_us{s}[{w}]))"),
    "compute_infer_us_per_s": (
        POOL_MODEL,
        "sum by ({g}) (rate(nv_inference_compute_infer_duration_us{s}[{w}]))",
    ),
    "pending_requests": (POOL_MODEL, "sum by ({g}) (nv_inference_pending_request_count{s})"),
    "gpu_utilization": (POOL, "avg by ({g}) (avg_over_time(nv_gpu_utilization{s}[{w}]))"),
    "newest_sample_s": (POOL_MODEL, "max by ({g}) (timestamp(nv_inference_request_success{s}))"),
}

FAILURES: Final = "failures_per_s"
TOKENS: Final = "tokens_per_s"
INFERENCES_SEEN: Final = "inferences_seen_per_s"


def inferences_seen_query(settings: PrometheusSettings) -> Query:
    """The inference rate the window's inferences arrived at (`Signals.inference_rate_seen_per_s`).

    Each step of a subquery over the window reads the rate of the latest scrape interval (`irate`), and
    the steps are averaged weighted by that rate: sum(r^2) / sum(r). Steps are a quarter of the window
    (15 s for 60 s), the scrape interval the chart's PodMonitor sets; the irate range of two steps holds
    the two samples irate needs when pods are scraped at least that often. The subquery spans the
    window less one step: the intervals between the window's samples, which its `rate()` averages.
    """
    step_s = max(settings.window_s // 4, 1)
    rate = f"sum by ({POOL_MODEL}) (irate(nv_inference_count{SELECT}[{2 * step_s}s]))"
    sub = f"[{settings.window_s - step_s}s:{step_s}s]"
    promql = f"sum_over_time(({rate} ^ 2){sub}) / sum_over_time(({rate}){sub})"
    return Query(INFERENCES_SEEN, promql, by_model=True)


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    promql: str
    by_model: bool
    quantile: float | None = None  # set for latency queries


def _quantile_label(q: float) -> str:
    """Triton's summary label spelling: 0.99 -> "0.99", 0.5 -> "0.5"."""
    return f"{q:g}"


def latency_query(settings: PrometheusSettings, quantile: float) -> Query:
    """p-quantile latency in ms per pool, from the configured latency source."""
    w = f"{settings.window_s}s"
    if settings.latency_source is LatencySource.SUMMARY:
        promql = (
            f"max by ({POOL_MODEL}) "
            f'(nv_inference_request_summary_us{{pool!="",quantile="{_quantile_label(quantile)}"}}) / 1000'
        )
    else:
        metric = settings.latency_histogram_metric
        promql = (
            f"histogram_quantile({quantile}, sum by ({POOL_MODEL}, le) "
            f"(rate({metric}_bucket{SELECT}[{w}]))) * {settings.latency_histogram_unit_ms}"
        )
    return Query(f"p{quantile}_ms", promql, by_model=True, quantile=quantile)


def build_queries(settings: PrometheusSettings, quantiles: set[float]) -> list[Query]:
    """The whole batch for one tick: fixed families + one latency query per distinct quantile."""
    w = f"{settings.window_s}s"
    queries = [
        Query(name, template.format(g=group, s=SELECT, w=w), by_model=group == POOL_MODEL)
        for name, (group, template) in _TEMPLATES.items()
    ]
    queries.append(inferences_seen_query(settings))
    queries.append(
        Query(
            FAILURES,
            f"sum by ({POOL_MODEL}, reason) (rate(nv_inference_request_failure{SELECT}[{w}]))",
            by_model=True,
        )
    )
    if settings.tokens_metric:
        queries.append(
            Query(
                TOKENS,
                f"sum by ({POOL_MODEL}) (rate({settings.tokens_metric}{SELECT}[{w}]))",
                by_model=True,
            )
        )
    queries.extend(latency_query(settings, q) for q in sorted(quantiles))
    return queries
