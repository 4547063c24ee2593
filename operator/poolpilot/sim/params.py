"""`SimParams`: everything a simulation run is parameterised by, validated once (errors name the field).

Controllers are built from it (`factory(params) -> Controller`); `simulate` fills `peak_rate_per_s`
from the trace before building them, so a static fleet can be provisioned for the peak.

GPU batch latency of one execution: `poolpilot.gpucurve.GpuCurve` (the executor's emulated GPU runs
the same code), built by `SimParams.gpu_curve`: a_ms + b_ms · batch, plus token_ms_per_1k per 1k
tokens of the batch's largest request above token_ref (token_mode "max", the default: one 5,000-token
request adds ~30 ms to its whole batch), no token term with token_mode "none". When k executions share
one GPU (instance_count > 1), an execution that starts while m others run takes
(1 + instance_interference · m) times as long (default 0.8: a second instance buys ~10 % throughput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from poolpilot.gpucurve import (
    DEFAULT_A_MS,
    DEFAULT_B_MS,
    DEFAULT_INSTANCE_INTERFERENCE,
    DEFAULT_TOKEN_MS_PER_1K,
    DEFAULT_TOKEN_REF,
    GpuCurve,
)

TokenMode = Literal["max", "none"]


@dataclass(frozen=True, slots=True)
class SimParams:
    """One run's settings. Field names are a contract for `sim/baselines.py`; add, never rename."""

    slo_ms: float = 150.0
    latency_quantile: float = 0.99
    # InferencePool spec.slo.marginRatio of the simulated pool (PoolPilot plans for target x (1 - it)).
    margin_ratio: float = 0.05
    batch_latency_a_ms: float = DEFAULT_A_MS
    batch_latency_b_ms: float = DEFAULT_B_MS
    token_mode: TokenMode = "max"
    token_ref: int = DEFAULT_TOKEN_REF
    token_ms_per_1k: float = DEFAULT_TOKEN_MS_PER_1K
    instance_interference: float = DEFAULT_INSTANCE_INTERFERENCE
    model_max_batch_size: int = 64
    # Node pool (GPUNodePool defaults of issue 3)
    gpus_per_node: int = 8
    gpus_per_replica: int = 1
    price_per_node_hour_usd: float = 32.77
    node_provisioning_s: float = 300.0
    min_nodes: int = 0
    max_nodes: int = 32
    # Pods
    pod_start_s: float = 60.0  # pod start + model load
    reload_s: float = 30.0  # a batching change: background model reload on every pod, then swap
    # Serving overhead outside the queue and the batch's execution (HTTP, (de)serialisation, the network),
    # added to every served request's latency. 0 for Triton on a GPU, whose measured profile is the whole
    # cost; the sandbox demo sets the CPU executor's, measured in its live run.
    request_overhead_ms: float = 0.0
    min_replicas: int = 1
    max_replicas: int = 256
    initial_replicas: int | None = None  # None: warm start for the first minute's load (see run.py)
    # The baselines' utilisation target: HPA's 70 % and the static fleet's sizing (baselines.py).
    target_gpu_utilization: float = 0.7
    # The simulated pool's spec.slo.targetGPUUtilization (None: the spec's default, no cap but the objective).
    pool_target_gpu_utilization: float | None = None
    # The pool spec's `batching.queuePolicy.shedding`: may the policy set a queue timeout (Hopeless) or not.
    shedding: Literal["Off", "Hopeless"] = "Off"
    # Observation
    scrape_interval_s: float = 15.0
    rate_window_s: float = 60.0
    control_phase_s: float = 5.0  # controller ticks at k·interval + phase: samples are a few s old
    # Where the policy's p99 comes from (signals.py): a router histogram (default) or per-pod summaries.
    p99_source: Literal["router_histogram", "pod_summary_max"] = "router_histogram"
    # Filled by simulate() from the trace (the busiest 1-minute arrival rate); NaN until then.
    peak_rate_per_s: float = math.nan
    seed: int = 0

    def __post_init__(self) -> None:
        positive = ("slo_ms", "batch_latency_a_ms", "scrape_interval_s", "rate_window_s")
        for name in positive:
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        non_negative = (
            "batch_latency_b_ms",
            "token_ms_per_1k",
            "instance_interference",
            "price_per_node_hour_usd",
            "node_provisioning_s",
            "pod_start_s",
            "reload_s",
            "request_overhead_ms",
            "control_phase_s",
        )
        for name in non_negative:
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if not 0 <= self.margin_ratio < 1:
            raise ValueError(f"margin_ratio must be in [0, 1), got {self.margin_ratio}")
        if not 0 < self.latency_quantile < 1:
            raise ValueError(f"latency_quantile must be in (0, 1), got {self.latency_quantile}")
        if self.token_mode not in ("max", "none"):
            raise ValueError(f"token_mode must be max or none, got {self.token_mode!r}")
        for name in (
            "model_max_batch_size",
            "gpus_per_node",
            "gpus_per_replica",
            "max_replicas",
            "max_nodes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.gpus_per_replica > self.gpus_per_node:
            raise ValueError("gpus_per_replica must be <= gpus_per_node")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"min_replicas must be in [0, max_replicas], got {self.min_replicas}")
        if not 0 <= self.min_nodes <= self.max_nodes:
            raise ValueError(f"min_nodes must be in [0, max_nodes], got {self.min_nodes}")
        if self.initial_replicas is not None and self.initial_replicas < 0:
            raise ValueError(f"initial_replicas must be >= 0, got {self.initial_replicas}")
        if not 0 < self.target_gpu_utilization <= 1:
            raise ValueError(f"target_gpu_utilization must be in (0, 1], got {self.target_gpu_utilization}")
        pool_util = self.pool_target_gpu_utilization
        if pool_util is not None and not 0 < pool_util <= 1:
            raise ValueError(f"pool_target_gpu_utilization must be in (0, 1], got {pool_util}")
        if self.shedding not in ("Off", "Hopeless"):
            raise ValueError(f"shedding must be Off or Hopeless, got {self.shedding!r}")
        if self.p99_source not in ("router_histogram", "pod_summary_max"):
            raise ValueError(
                f"p99_source must be router_histogram or pod_summary_max, got {self.p99_source!r}"
            )
        if self.token_ref < 0:
            raise ValueError(f"token_ref must be >= 0, got {self.token_ref}")

    @property
    def batch_latency_ms(self) -> tuple[float, float]:
        """(a_ms, b_ms) of the batch-latency curve."""
        return (self.batch_latency_a_ms, self.batch_latency_b_ms)

    @property
    def replicas_per_node(self) -> int:
        return self.gpus_per_node // self.gpus_per_replica

    @property
    def gpu_curve(self) -> GpuCurve:
        """The GPU's batch-latency curve (the token term only with token_mode "max")."""
        tok = self.token_ms_per_1k if self.token_mode == "max" else 0.0
        return GpuCurve(
            self.batch_latency_a_ms, self.batch_latency_b_ms, tok, self.token_ref, self.instance_interference
        )

    def curve_ms(self, batch: int) -> float:
        """Batch latency without the token term: what a capacity planner would assume."""
        return self.gpu_curve.curve_ms(batch)

    def nodes_for(self, replicas: int) -> int:
        """Nodes that hold `replicas` pods (whole pods per node)."""
        return math.ceil(replicas / self.replicas_per_node) if replicas > 0 else 0

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
