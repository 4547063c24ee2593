"""PoolPilot's decision logic: pure, deterministic, explained (no I/O, no clock, no kopf).

`pool_tick` is one pool's tick for the operator and the simulator alike (state carried, `decide`,
`advance`); `decide` answers it; `size_node_pool` sums pools sharing a node pool; `advance` carries a
decision into the next state. docs/policy.md describes the model and every reason string.
"""

from poolpilot.policy.decide import PolicyInputError, decide, triton_default_batching
from poolpilot.policy.nodes import NodePoolInputError, size_node_pool
from poolpilot.policy.params import DEFAULT_PARAMS, PolicyParams
from poolpilot.policy.state import advance, batching_failed
from poolpilot.policy.tick import PoolTick, paid_replicas_on, pool_tick
from poolpilot.policy.types import (
    BatchingConfig,
    Decision,
    HistoryEntry,
    LatencyModel,
    NodePoolDecision,
    NodePoolDemand,
    PoolState,
    Signals,
)

__all__ = [
    "DEFAULT_PARAMS",
    "BatchingConfig",
    "Decision",
    "HistoryEntry",
    "LatencyModel",
    "NodePoolDecision",
    "NodePoolDemand",
    "NodePoolInputError",
    "PolicyInputError",
    "PolicyParams",
    "PoolState",
    "PoolTick",
    "Signals",
    "advance",
    "batching_failed",
    "decide",
    "paid_replicas_on",
    "pool_tick",
    "size_node_pool",
    "triton_default_batching",
]
