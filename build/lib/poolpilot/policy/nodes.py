"""GPU node-pool sizing: the sum of every pool's demand, packed by node, ahead by the lead time.

Pure. A replica's GPUs must sit on one node (a pod cannot span nodes), so demands are packed
first-fit-decreasing by `gpus_per_replica` into nodes of `gpus_per_node`; the node count covers the
larger of the demand now and the demand `provisioning_seconds` ahead (nodes take minutes to arrive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from poolpilot.api.types import GPUNodePoolSpec
from poolpilot.policy.types import NodePoolDecision, NodePoolDemand


class NodePoolInputError(ValueError):
    """A demand the node pool cannot serve as stated; the message names the field."""


def pack_nodes(replica_gpus: Sequence[tuple[int, int]], gpus_per_node: int) -> int:
    """Nodes needed for (gpus_per_replica, replica count) groups, first-fit decreasing."""
    free: list[int] = []  # free GPUs per open node
    for size, count in sorted(replica_gpus, reverse=True):
        if count <= 0:
            continue
        if size > gpus_per_node:
            raise NodePoolInputError(
                f"gpus_per_replica {size} > gpusPerNode {gpus_per_node}: cannot be packed"
            )
        per_node = gpus_per_node // size
        left = count
        # Fill holes in already open nodes first, then open whole nodes arithmetically.
        for i, f in enumerate(free):
            if left == 0:
                break
            fit = min(f // size, left)
            free[i] -= fit * size
            left -= fit
        full, rest = divmod(left, per_node)
        free.extend([gpus_per_node - per_node * size] * full)
        if rest:
            free.append(gpus_per_node - rest * size)
    return len(free)


def size_node_pool(
    node_pool: GPUNodePoolSpec,
    demands: Sequence[NodePoolDemand],
    current_nodes: int,
    *,
    name: str | None = None,
) -> NodePoolDecision:
    """Nodes for all pools drawing on `node_pool` (pass every pool's `Decision.node_demand`).

    Demands on hold (their metrics are missing) never let the node pool shrink. `name`, when given,
    must match every demand's `node_pool` (a demand for another pool is a caller bug).
    """
    if current_nodes < 0:
        raise NodePoolInputError(f"current_nodes must be >= 0, got {current_nodes}")
    gpn = node_pool.gpus_per_node
    now_groups: dict[int, int] = {}
    ahead_groups: dict[int, int] = {}
    hold = False
    for i, d in enumerate(demands):
        if name is not None and d.node_pool != name:
            raise NodePoolInputError(f"demands[{i}].node_pool {d.node_pool!r} is not {name!r}")
        if d.gpus_per_replica < 1 or d.gpus_now < 0 or d.gpus_ahead < 0:
            raise NodePoolInputError(f"demands[{i}]: GPU counts must be >= 0 and gpus_per_replica >= 1")
        size = d.gpus_per_replica
        now_groups[size] = now_groups.get(size, 0) + math.ceil(d.gpus_now / size)
        ahead_groups[size] = ahead_groups.get(size, 0) + math.ceil(max(d.gpus_ahead, d.gpus_now) / size)
        hold = hold or d.hold
    gpus_now = sum(s * c for s, c in now_groups.items())
    gpus_ahead = sum(s * c for s, c in ahead_groups.items())
    nodes_now = pack_nodes(list(now_groups.items()), gpn)
    nodes_ahead = pack_nodes(list(ahead_groups.items()), gpn)
    want = max(nodes_now, nodes_ahead)
    reasons = [
        f"demand {gpus_now} GPUs now, {gpus_ahead} GPUs in {node_pool.provisioning_seconds} s "
        f"({len(demands)} pool{'s' if len(demands) != 1 else ''}), packed {gpn} GPUs/node: {want} nodes"
    ]
    lo, hi = node_pool.nodes.min, node_pool.nodes.max
    nodes = max(lo, min(hi, want))
    if nodes != want:
        reasons.append(f"nodes clamped to spec bounds [{lo}, {hi}]")
        if want > hi:
            reasons.append(f"node pool too small: {want} nodes wanted, nodes.max is {hi}")
    if hold and nodes < current_nodes:
        reasons.append(f"hold: a pool's metrics are missing: keeping {current_nodes} nodes (no shrink)")
        nodes = min(current_nodes, hi) if current_nodes <= hi else hi
        nodes = max(nodes, lo)
    if nodes > current_nodes:
        reasons.insert(0, f"grow node pool {current_nodes}→{nodes}")
    elif nodes < current_nodes:
        reasons.insert(0, f"shrink node pool {current_nodes}→{nodes}")
    return NodePoolDecision(
        nodes=nodes,
        current_nodes=current_nodes,
        gpus_now=gpus_now,
        gpus_ahead=gpus_ahead,
        reasons=tuple(reasons),
        hold=hold,
    )
