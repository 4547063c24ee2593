"""The metric-source contract and the key pools are reported under."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from poolpilot.policy.types import Signals


@dataclass(frozen=True, slots=True)
class PoolKey:
    """Identifies a pool's series: Prometheus labels `namespace`, `pool` (and Triton's `model`)."""

    namespace: str
    pool: str
    model: str
    latency_quantile: float = 0.99

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pool}"


class MetricsUnavailable(Exception):
    """The source could not be queried at all (unreachable, HTTP error, bad query); message says why."""


class MetricSource(Protocol):
    async def fetch(self, pools: Sequence[PoolKey]) -> dict[PoolKey, Signals]:
        """Signals for every pool in one batch of queries; pools without series get all-NaN Signals
        with `age_s = inf`. Raises `MetricsUnavailable` when the source cannot answer."""

    async def close(self) -> None:
        """Release connections."""
