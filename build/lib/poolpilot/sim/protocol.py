"""The contract between the fleet simulator and the controllers it runs in the loop.

Every controller (PoolPilot's real policy, the HPA/KEDA/KPA/AIMD/static baselines) sees the fleet
only through an `Observation` built from simulated Prometheus scrapes, never from ground truth,
and answers with an `Action`. The engine applies actions with real lead times (pod start, model
reload, node provisioning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from poolpilot.policy.types import BatchingConfig, Signals


@dataclass(frozen=True, slots=True)
class Observation:
    now_s: float
    signals: Signals  # windowed, as Prometheus would answer the operator's queries
    replicas: int  # desired replicas currently set on the workload
    ready_replicas: int  # replicas serving (pods started, model loaded)
    batching: BatchingConfig  # what the pods currently run
    nodes: int  # nodes provisioned or being provisioned
    ready_nodes: int
    gpus_per_node: int
    gpus_per_replica: int
    queue_length: float  # pending requests summed over pods (nv_inference_pending_request_count)
    in_flight: float  # requests in the system (queued + executing), as a router/queue-proxy reports


@dataclass(frozen=True, slots=True)
class Action:
    """None means "leave as it is"."""

    replicas: int | None = None
    batching: BatchingConfig | None = None
    nodes: int | None = None
    reasons: tuple[str, ...] = ()


class Controller(Protocol):
    """A control loop: `step` is called every `interval_s` of simulated time."""

    name: str
    interval_s: float

    def step(self, obs: Observation) -> Action: ...
