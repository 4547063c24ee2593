"""Node-pool sizing: pools sharing a node pool summed, replicas packed per node, ahead by the lead time."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolpilot.policy import NodePoolDemand, NodePoolInputError, size_node_pool
from poolpilot.policy.nodes import pack_nodes


def demand(now: int, ahead: int | None = None, gpr: int = 1, hold: bool = False) -> NodePoolDemand:
    return NodePoolDemand(
        "a100", gpus_now=now, gpus_ahead=now if ahead is None else ahead, gpus_per_replica=gpr, hold=hold
    )


@pytest.mark.parametrize(
    ("demands", "current", "nodes", "reason"),
    [
        ([demand(10)], 0, 2, r"^grow node pool 0→2$"),
        ([demand(10, ahead=20)], 2, 3, r"^grow node pool 2→3$"),
        ([demand(5), demand(6)], 1, 2, r"^grow node pool 1→2$"),
        ([demand(15, gpr=3)], 0, 3, r"^grow node pool 0→3$"),  # 2 replicas of 3 GPUs per 8-GPU node
        ([demand(3)], 4, 1, r"^shrink node pool 4→1$"),
        ([demand(3, hold=True)], 4, 4, r"^hold: a pool's metrics are missing: keeping 4 nodes"),
        ([demand(200)], 3, 16, r"^node pool too small: 25 nodes wanted, nodes.max is 16$"),
        ([], 2, 0, r"^shrink node pool 2→0$"),
    ],
    ids=[
        "one pool, 10 GPUs → 2 nodes",
        "rising demand: sized for the GPUs needed after provisioning",
        "two pools sharing the node pool are summed",
        "3-GPU replicas do not split across nodes",
        "demand fell: shrink",
        "a pool on hold never lets the node pool shrink",
        "capped at nodes.max, and says so",
        "no demand: shrink to nodes.min",
    ],
)
def test_size_node_pool(
    kit: SimpleNamespace, demands: list[NodePoolDemand], current: int, nodes: int, reason: str
) -> None:
    d = size_node_pool(kit.make_node_pool(), demands, current, name="a100")
    assert d.nodes == nodes, d.reasons
    assert any(re.search(reason, r) for r in d.reasons), d.reasons
    assert d.changed == (nodes != current)


def test_replica_larger_than_a_node_is_an_error_naming_both(kit: SimpleNamespace) -> None:
    with pytest.raises(NodePoolInputError, match="gpus_per_replica 16 > gpusPerNode 8"):
        size_node_pool(kit.make_node_pool(), [demand(16, gpr=16)], 0)


def test_demand_for_another_node_pool_is_rejected(kit: SimpleNamespace) -> None:
    other = NodePoolDemand("h100", gpus_now=1, gpus_ahead=1)
    with pytest.raises(NodePoolInputError, match=r"demands\[0\].node_pool 'h100' is not 'a100'"):
        size_node_pool(kit.make_node_pool(), [other], 0, name="a100")


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8]), st.integers(0, 40)), max_size=5),
    gpn=st.sampled_from([8, 16]),
)
def test_packing_fits_every_replica_and_never_beats_the_bounds(
    groups: list[tuple[int, int]], gpn: int
) -> None:
    nodes = pack_nodes(groups, gpn)
    total = sum(size * count for size, count in groups)
    per_size = [-(-count // (gpn // size)) for size, count in groups if count]
    assert nodes * gpn >= total
    assert nodes >= max([*per_size, -(-total // gpn)])  # no replica split across nodes
    assert nodes <= sum(per_size)  # sharing nodes between sizes never costs more than separate nodes
    if len(per_size) == 1:
        assert nodes == per_size[0]
