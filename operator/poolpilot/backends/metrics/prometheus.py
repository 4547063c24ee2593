"""`MetricSource` on Prometheus's HTTP API: one concurrent batch of instant queries per tick.

aiohttp keeps the calls on the event loop without blocking it. Missing series become NaN; a pool
with no series at all gets `age_s = inf`. Transport or HTTP errors raise `MetricsUnavailable` with a
message naming the URL, so the pool's status can say exactly what is wrong.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from poolpilot.backends.metrics import queries
from poolpilot.backends.metrics.base import MetricsUnavailable, PoolKey
from poolpilot.policy.types import Signals
from poolpilot.settings import LatencySource, PrometheusSettings
from poolpilot.triton import SUMMARY_WINDOW_S

# (namespace, pool, model or "") -> value; "" model = a per-pool family (GPU utilisation).
Series = dict[tuple[str, str, str], float]


def _to_float(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def parse_vector(payload: Mapping[str, Any], *, by_model: bool) -> tuple[Series, float]:
    """(series, evaluation time) from a `/api/v1/query` response; raises on a Prometheus error."""
    if payload.get("status") != "success":
        raise MetricsUnavailable(f"{payload.get('errorType', 'error')}: {payload.get('error', payload)}")
    data = payload.get("data") or {}
    if data.get("resultType") != "vector":
        raise MetricsUnavailable(f"expected a vector result, got {data.get('resultType')!r}")
    out: Series = {}
    eval_time = math.nan
    for sample in data.get("result") or []:
        labels = sample.get("metric") or {}
        ts, value = sample.get("value") or (math.nan, "NaN")
        eval_time = _to_float(ts)
        key = (
            labels.get("namespace", ""),
            labels.get("pool", ""),
            labels.get("model", "") if by_model else "",
        )
        out[key] = _to_float(value)
    return out, eval_time


def parse_failures(payload: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, float]]:
    """Failure rates by reason per (namespace, pool, model)."""
    if payload.get("status") != "success":
        raise MetricsUnavailable(f"{payload.get('errorType', 'error')}: {payload.get('error', payload)}")
    out: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for sample in (payload.get("data") or {}).get("result") or []:
        labels = sample.get("metric") or {}
        key = (labels.get("namespace", ""), labels.get("pool", ""), labels.get("model", ""))
        out[key][labels.get("reason", "OTHER")] = _to_float((sample.get("value") or (0, "NaN"))[1])
    return dict(out)


def _ratio(num: float, den: float) -> float:
    if math.isnan(num) or math.isnan(den) or den <= 0:
        return math.nan
    return num / den


def assemble(
    pools: Sequence[PoolKey],
    results: Mapping[str, Series],
    failures: Mapping[tuple[str, str, str], dict[str, float]],
    *,
    now_s: float,
    p99_per_pod: bool = True,
    p99_window_s: float = 60.0,
    rate_window_s: float = 60.0,
) -> dict[PoolKey, Signals]:
    """Turn per-query series into one `Signals` per pool (pure; unit-tested on recorded responses)."""
    out: dict[PoolKey, Signals] = {}
    for key in pools:
        per_model = (key.namespace, key.pool, key.model)
        per_pool = (key.namespace, key.pool, "")

        def get(name: str, k: tuple[str, str, str] = per_model) -> float:
            return results.get(name, {}).get(k, math.nan)

        success = get("success_per_s")
        newest = get("newest_sample_s")
        out[key] = Signals(
            p99_ms=get(f"p{key.latency_quantile}_ms"),
            request_rate_per_s=get("requests_per_s"),
            inference_rate_per_s=get("inferences_per_s"),
            inference_rate_seen_per_s=get(queries.INFERENCES_SEEN),
            gpu_utilization=get("gpu_utilization", per_pool),
            queue_time_us=_ratio(get("queue_us_per_s"), success),
            avg_batch_size=_ratio(get("inferences_per_s"), get("executions_per_s")),
            # compute_infer is charged per request (each request pays its batch's duration), so per
            # request it is the request-weighted mean batch duration: the best per-execution estimate.
            compute_us_per_exec=_ratio(get("compute_infer_us_per_s"), success),
            pending_requests=get("pending_requests"),
            mean_tokens_per_request=_ratio(get(queries.TOKENS), success),
            failure_rate_by_reason=dict(failures.get(per_model, {})),
            age_s=math.inf if math.isnan(newest) else max(0.0, now_s - newest),
            p99_per_pod=p99_per_pod,
            p99_window_s=p99_window_s,
            rate_window_s=rate_window_s,
        )
    return out


class PrometheusSource:
    """Queries Prometheus at `settings.url`; the aiohttp session is created on first use."""

    def __init__(self, settings: PrometheusSettings) -> None:
        self._settings = settings
        self._base = settings.url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self.queries_sent = 0

    async def _query(self, promql: str) -> Mapping[str, Any]:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._settings.timeout_s)
            )
        self.queries_sent += 1
        url = f"{self._base}/api/v1/query"
        try:
            async with self._session.post(url, data={"query": promql}) as resp:
                if resp.content_type != "application/json":
                    text = (await resp.text())[:200]
                    raise MetricsUnavailable(
                        f"Prometheus at {self._base} answered HTTP {resp.status}: {text}"
                    )
                payload: Mapping[str, Any] = await resp.json()
        except ValueError as exc:  # a body that is not JSON (a proxy's error page, a truncated answer)
            raise MetricsUnavailable(f"Prometheus at {self._base} sent a malformed answer: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise MetricsUnavailable(f"Prometheus at {self._base} is unreachable: {reason}") from exc
        if not isinstance(payload, Mapping):
            raise MetricsUnavailable(f"Prometheus at {self._base} sent a malformed answer: not an object")
        if payload.get("status") != "success":
            raise MetricsUnavailable(
                f"Prometheus at {self._base} rejected a query ({payload.get('errorType')}: "
                f"{payload.get('error')}): {promql}"
            )
        return payload

    async def fetch(self, pools: Sequence[PoolKey]) -> dict[PoolKey, Signals]:
        if not pools:
            return {}
        batch = queries.build_queries(self._settings, {p.latency_quantile for p in pools})
        payloads = await asyncio.gather(*(self._query(q.promql) for q in batch))
        results: dict[str, Series] = {}
        failures: dict[tuple[str, str, str], dict[str, float]] = {}
        eval_times: list[float] = []
        for q, payload in zip(batch, payloads, strict=True):
            try:
                if q.name == queries.FAILURES:
                    failures = parse_failures(payload)
                    continue
                series, eval_time = parse_vector(payload, by_model=q.by_model)
            except (TypeError, ValueError, AttributeError, IndexError) as exc:
                raise MetricsUnavailable(
                    f"Prometheus at {self._base} sent a malformed answer to {q.name} ({q.promql}): {exc}"
                ) from exc
            results[q.name] = series
            if not math.isnan(eval_time):
                eval_times.append(eval_time)
        now_s = max(eval_times) if eval_times else math.nan
        # Triton's summary is a quantile per pod (the query takes the worst); a histogram's is pool-wide.
        window_s = float(self._settings.window_s)
        per_pod = self._settings.latency_source is LatencySource.SUMMARY
        return assemble(
            pools,
            results,
            failures,
            now_s=now_s,
            p99_per_pod=per_pod,
            p99_window_s=SUMMARY_WINDOW_S if per_pod else window_s,
            rate_window_s=window_s,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
