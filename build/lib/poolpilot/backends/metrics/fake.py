"""In-memory metric source for unit tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from poolpilot.backends.metrics.base import MetricsUnavailable, PoolKey
from poolpilot.policy.types import Signals

MISSING = Signals(age_s=math.inf)


@dataclass
class FakeMetricSource:
    """Returns `signals[(namespace, pool)]`; `error` makes every fetch fail; counts fetches."""

    signals: dict[tuple[str, str], Signals] = field(default_factory=dict)
    error: str | None = None
    fetches: list[tuple[PoolKey, ...]] = field(default_factory=list)

    async def fetch(self, pools: Sequence[PoolKey]) -> dict[PoolKey, Signals]:
        self.fetches.append(tuple(pools))
        if self.error is not None:
            raise MetricsUnavailable(self.error)
        return {key: self.signals.get((key.namespace, key.pool), MISSING) for key in pools}

    async def close(self) -> None:
        return None
