"""Triton dynamic-batching actuator: the contract only (the tritonclient implementation comes later).

Applying a batching config means a background model reload on each pod (explicit model control,
load with a config override), then reading the config back to verify it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from poolpilot.policy.types import BatchingConfig


class BatchingActuator(Protocol):
    async def read(self, pod_url: str, model: str) -> BatchingConfig | None:
        """The batching config the pod's model runs now (None when the model is not loaded)."""

    async def apply(self, pod_url: str, model: str, config: BatchingConfig) -> None:
        """Load `model` on one pod with `config` overriding its dynamic batcher; raises on failure."""


@dataclass
class FakeBatchingActuator:
    """In-memory actuator: configs keyed by (pod_url, model); `fail_on` pods raise on apply."""

    configs: dict[tuple[str, str], BatchingConfig] = field(default_factory=dict)
    fail_on: set[str] = field(default_factory=set)
    applied: list[tuple[str, str, BatchingConfig]] = field(default_factory=list)

    async def read(self, pod_url: str, model: str) -> BatchingConfig | None:
        return self.configs.get((pod_url, model))

    async def apply(self, pod_url: str, model: str, config: BatchingConfig) -> None:
        if pod_url in self.fail_on:
            raise RuntimeError(f"{pod_url}: load of {model} failed")
        self.applied.append((pod_url, model, config))
        self.configs[(pod_url, model)] = config
