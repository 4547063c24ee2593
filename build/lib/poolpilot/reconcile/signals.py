"""One batch of metric queries per tick for all pools, however many pools tick.

Each pool has its own tick (kopf runs one daemon per object), but Prometheus is asked once: the
first pool due triggers a fetch for every pool registered so far, and pools ticking within
`min_refresh_s` of it reuse that answer. Concurrent callers share one in-flight fetch.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from poolpilot.backends.metrics.base import MetricSource, MetricsUnavailable, PoolKey
from poolpilot.policy.types import Signals
from poolpilot.reconcile import telemetry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Observation:
    """Signals of one pool, or why there are none (`error` set, signals all-NaN)."""

    signals: Signals
    error: str | None = None


class SignalCache:
    """Shares one `MetricSource.fetch` per refresh period between all pools of the operator."""

    def __init__(self, source: MetricSource, *, min_refresh_s: float, clock: Callable[[], float]) -> None:
        self._source = source
        self._min_refresh_s = min_refresh_s
        self._clock = clock  # monotonic seconds
        self._pools: dict[tuple[str, str], PoolKey] = {}
        self._result: dict[PoolKey, Signals] = {}
        self._error: str | None = None
        self._fetched_at = -math.inf
        self._lock = asyncio.Lock()
        self.fetch_count = 0

    def forget(self, namespace: str, pool: str) -> None:
        """Stop querying for a deleted pool."""
        self._pools.pop((namespace, pool), None)

    async def get(self, key: PoolKey) -> Observation:
        """The pool's signals from a fetch at most `min_refresh_s` old that included this pool."""
        known = self._pools.get((key.namespace, key.pool))
        self._pools[(key.namespace, key.pool)] = key
        async with self._lock:
            fresh = self._clock() - self._fetched_at < self._min_refresh_s
            if not fresh or known != key or (key not in self._result and self._error is None):
                await self._refresh()
            if self._error is not None:
                return Observation(Signals(age_s=math.inf), self._error)
            return Observation(self._result.get(key, Signals(age_s=math.inf)))

    async def _refresh(self) -> None:
        pools = list(self._pools.values())
        self.fetch_count += 1
        try:
            self._result = await self._source.fetch(pools)
            if self._error is not None:
                logger.info("metrics available again")
            self._error = None
            telemetry.METRIC_FETCHES.labels("ok").inc()
        except MetricsUnavailable as exc:
            if str(exc) != self._error:  # log changes, not every refresh of a lasting outage
                logger.warning("metrics unavailable: %s", exc)
            self._result = {}
            self._error = str(exc)
            telemetry.METRIC_FETCHES.labels("unavailable").inc()
        self._fetched_at = self._clock()

    async def close(self) -> None:
        await self._source.close()


# Prometheus field name of each signal, for messages a person can match to a query.
_SIGNAL_FIELDS: dict[str, str] = {
    "p99_ms": "latency quantile (ms)",
    "request_rate_per_s": "request rate (1/s)",
    "inference_rate_per_s": "inference rate (1/s)",
    "gpu_utilization": "GPU utilisation (0..1)",
    "queue_time_us": "queue time (µs)",
    "avg_batch_size": "batch size",
    "compute_us_per_exec": "compute time per execution (µs)",
    "pending_requests": "pending requests",
    "mean_tokens_per_request": "tokens per request",
}


def signal_problems(signals: Signals) -> list[str]:
    """Values no healthy Triton fleet can report (negative, infinite, utilisation above 1, batch below 1).

    NaN is not a problem here: a missing series is reported as missing by the policy. A problem names the
    signal, so the pool's condition says which query to look at.
    """
    problems = []
    for name, label in _SIGNAL_FIELDS.items():
        value = getattr(signals, name)
        if math.isnan(value):
            continue
        if math.isinf(value) or value < 0:
            problems.append(f"{name} = {value} ({label})")
        elif name == "gpu_utilization" and value > 1.05:
            problems.append(f"{name} = {value:.3g} above 1 ({label})")
        elif name == "avg_batch_size" and value < 0.95:
            problems.append(f"{name} = {value:.3g} below 1 ({label})")
    for reason, rate in signals.failure_rate_by_reason.items():
        if math.isinf(rate) or rate < 0:
            problems.append(f"failure rate {reason} = {rate}")
    return problems
