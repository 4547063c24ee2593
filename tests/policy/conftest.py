"""Builders for the policy tests: specs, states, and a deterministic synthetic pool (the "plant").

The plant turns the policy's own decisions back into signals, the way a real pool would, from a
TRUE latency curve that the policy does not know (it starts from its prior) and a true tail factor
(real p99s differ from the model). It shares the model's structure (round-robin routing, instances
slowing each other), so what the tests exercise is the control loop, not the model's shape. It
models pod start: a new replica serves only after `pod_start_s`. Deterministic: load is a function
of time, no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

from poolpilot.api.types import GPUNodePoolSpec, InferencePoolSpec
from poolpilot.policy import PoolState, Signals, advance, decide
from poolpilot.policy.model import core, z_score
from poolpilot.policy.types import BatchingConfig, Decision


def make_spec(**overrides: Any) -> InferencePoolSpec:
    """An InferencePool spec from wire-form (camelCase) overrides, deep-merged over a default."""
    base: dict[str, Any] = {
        "targetRef": {"name": "chat-triton"},
        "model": {"name": "llama", "maxBatchSize": 64},
        "nodePool": {"name": "a100", "gpusPerReplica": 1},
    }

    def merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v

    merge(base, overrides)
    return InferencePoolSpec.model_validate(base)


def make_node_pool(**overrides: Any) -> GPUNodePoolSpec:
    base: dict[str, Any] = {"provider": {"fake": {}}, "pricePerNodeHourUSD": 32.77, "gpusPerNode": 8}
    base.update(overrides)
    return GPUNodePoolSpec.model_validate(base)


def batching(delay_us: int = 0, instances: int = 1, max_batch: int = 64, **kw: Any) -> BatchingConfig:
    return BatchingConfig(
        max_queue_delay_us=delay_us,
        max_batch_size=max_batch,
        preferred_batch_sizes=kw.pop("preferred", ()),
        instance_count=instances,
        **kw,
    )


@dataclass
class Plant:
    """A pool whose latency follows a true curve (a + b·batch) times a true tail factor."""

    a_ms: float = 50.0
    b_ms: float = 2.19
    tail_factor: float = 1.0
    pod_start_s: float = 60.0
    quantile: float = 0.99
    instance_slowdown: float = 0.8
    ready_at: list[float] = field(default_factory=list)  # when each replica became/becomes ready

    def observe(self, state: PoolState, rate_per_s: float, now_s: float) -> Signals:
        want = state.replicas
        while len(self.ready_at) < want:
            self.ready_at.append(now_s + self.pod_start_s)
        del self.ready_at[want:]
        ready = sum(1 for t in self.ready_at if t <= now_s)
        b = state.batching or batching()
        if ready == 0:
            p99 = math.inf if rate_per_s > 0 else math.nan
            return Signals(p99_ms=p99, request_rate_per_s=rate_per_s, ready_replicas=0)
        # Same structure as the policy's model (round-robin router, interfering instances), other numbers.
        p99, batch, lat, wait, _, _ = core(
            self.a_ms,
            self.b_ms,
            rate_per_s / ready / 1000.0,
            b.max_queue_delay_us / 1000.0,
            b.instance_count,
            b.max_batch_size,
            z_score(self.quantile),
            1.0 - self.quantile,
            1.0,
            1.0 / ready,
            self.instance_slowdown,
        )
        return Signals(
            p99_ms=min(p99 * self.tail_factor, 60_000.0),
            request_rate_per_s=rate_per_s,
            inference_rate_per_s=rate_per_s,
            gpu_utilization=min(1.0, rate_per_s / ready * lat / 1000.0 / max(batch, 1.0) / b.instance_count),
            queue_time_us=wait * 500.0,
            avg_batch_size=batch,
            compute_us_per_exec=lat * 1000.0,
            pending_requests=0.0,
            ready_replicas=ready,
            age_s=5.0,
        )


def plant_p99_ms(plant: Plant, rate_per_s: float, replicas: int, b: BatchingConfig | None = None) -> float:
    """The plant's TRUE p99 with `replicas` ready replicas (what the policy is trying to find)."""
    return plant_truth(plant, rate_per_s, replicas, b)[0]


def plant_truth(
    plant: Plant, rate_per_s: float, replicas: int, b: BatchingConfig | None = None
) -> tuple[float, float]:
    """The plant's TRUE (p99 ms, capacity utilisation at full batches) with `replicas` ready replicas."""
    b = b or batching()
    p99, _, _, _, util, _ = core(
        plant.a_ms,
        plant.b_ms,
        rate_per_s / replicas / 1000.0,
        b.max_queue_delay_us / 1000.0,
        b.instance_count,
        b.max_batch_size,
        z_score(plant.quantile),
        1.0 - plant.quantile,
        1.0,
        1.0 / replicas,
        plant.instance_slowdown,
    )
    return float(p99 * plant.tail_factor), float(util)


def plant_true_need(
    plant: Plant, rate_per_s: float, objective_ms: float, max_replicas: int = 64, max_utilization: float = 1.0
) -> int | None:
    """Fewest replicas whose TRUE p99 meets the objective with the best default-bounds batching, or None.

    Searched over the queue delays of the policy's grid (the default spec allows 0-50 ms) and 1-2
    instances, under the spec's utilisation cap (targetGPUUtilization, 1 by default: none): what an oracle
    that knew the plant would pick.
    """
    best: int | None = None
    for delay_us in (0, 1_000, 2_000, 5_000, 10_000, 20_000, 35_000, 50_000):
        for k in (1, 2):
            b = batching(delay_us, k)
            for r in range(1, (best or max_replicas + 1)):
                p99, util = plant_truth(plant, rate_per_s, r, b)
                if p99 <= objective_ms and util <= max_utilization:
                    best = r
                    break
    return best


@dataclass
class Run:
    decisions: list[tuple[float, Decision, Signals]]
    state: PoolState


def run_loop(
    spec: InferencePoolSpec,
    plant: Plant,
    load: Callable[[float], float],
    *,
    duration_s: float,
    state: PoolState | None = None,
) -> Run:
    """Tick the policy every spec.tick_seconds, feeding each decision back into the plant."""
    state = state or PoolState(replicas=max(1, spec.replicas.min), batching=None)
    out = []
    t = 0.0
    while t < duration_s:
        sig = plant.observe(state, load(t), t)
        d = decide(spec, state, sig, t)
        out.append((t, d, sig))
        state = advance(state, d, t)
        t += spec.tick_seconds
    return Run(out, state)


def with_signals(sig: Signals, **kw: Any) -> Signals:
    return replace(sig, **kw)


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The builders above, as one fixture (test modules cannot import conftest in importlib mode)."""
    return SimpleNamespace(
        make_spec=make_spec,
        make_node_pool=make_node_pool,
        batching=batching,
        Plant=Plant,
        run_loop=run_loop,
        with_signals=with_signals,
        plant_p99_ms=plant_p99_ms,
        plant_true_need=plant_true_need,
    )
