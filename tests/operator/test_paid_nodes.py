"""Which node GPUs a pool counts as paid for, when the node pool has not yet read its last demand.

The node pool reconciles on its own clock. Between a pool tick that released a node (or ordered one) and
the node pool's next reconcile, `desiredNodes` is stale; the pool must count the nodes the node pool will
hold once it reads that demand — else "fill paid nodes" refills a node just released (seen on the
sandbox: 8→4 by a release, 4→8 five seconds later, the node never removed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from poolpilot.api import types as api
from poolpilot.backends.kube import ObjectRef
from poolpilot.reconcile import inferencepool as reconcile
from poolpilot.reconcile.observe import Observed

NOW = dt.datetime(2026, 12, 6, 12, 0, 0, tzinfo=dt.UTC)
REF = ObjectRef(api.API_VERSION, api.INFERENCE_POOL_KIND, "chat", "team-a")
Body = Callable[..., dict[str, Any]]


def _observed(
    pool_body: Body, node_pool_body: Body, nodes: tuple[int, int], requested: int, pools: list[dict[str, Any]]
) -> Observed:
    """A pool on a 4-GPU-node pool (`nodes` = (min, max)) whose status says `requested` nodes and `pools`."""
    node_pool = node_pool_body(gpusPerNode=4, nodes={"min": nodes[0], "max": nodes[1]})
    return Observed(
        spec=api.InferencePoolSpec.model_validate(pool_body()["spec"]),
        problems=(),
        problem_reason=None,
        node_pool=api.GPUNodePoolSpec.model_validate(node_pool["spec"]),
        node_pool_status={"nodes": requested, "desiredNodes": requested, "pools": pools},
    )


def _demand(gpus: int, ahead: int | None = None, *, node_pool: str = "a100") -> dict[str, Any]:
    return {
        "nodeDemand": api.NodeDemand(
            node_pool=node_pool, gpus_now=gpus, gpus_ahead=gpus if ahead is None else ahead, time=NOW
        ).to_wire()
    }


def _entry(name: str, gpus: int, namespace: str = "team-a") -> dict[str, Any]:
    return {"namespace": namespace, "name": name, "gpus": gpus, "gpusAhead": gpus}


def test_a_node_this_pool_released_is_not_paid_for_before_the_node_pool_reads_the_release(
    pool_body: Body, node_pool_body: Body
) -> None:
    observed = _observed(pool_body, node_pool_body, (1, 4), 2, [_entry("chat", 8)])  # read before the release
    assert reconcile._paid_replicas(observed, REF, _demand(4)) == 4
    # Without the pool's last demand (first tick, or an older status) the node pool's count stands.
    assert reconcile._paid_replicas(observed, REF, None) == 8


def test_nodes_this_pool_ordered_count_as_paid_before_the_node_pool_reads_the_order(
    pool_body: Body, node_pool_body: Body
) -> None:
    """As in the simulator, where the node pool is sized inside the tick: the ordered node is paid."""
    observed = _observed(pool_body, node_pool_body, (1, 4), 1, [_entry("chat", 4)])
    assert reconcile._paid_replicas(observed, REF, _demand(4, ahead=9)) == 12
    # nodes.max still bounds what is paid for
    capped = _observed(pool_body, node_pool_body, (1, 2), 1, [_entry("chat", 4)])
    assert reconcile._paid_replicas(capped, REF, _demand(9)) == 8


def test_a_node_held_by_nodes_min_stays_paid_once_the_node_pool_has_read_the_demand(
    pool_body: Body, node_pool_body: Body
) -> None:
    observed = _observed(pool_body, node_pool_body, (2, 4), 2, [_entry("chat", 2)])
    assert reconcile._paid_replicas(observed, REF, _demand(2)) == 8
    # and also before it has: nodes.min holds both nodes whatever this pool asks
    assert reconcile._paid_replicas(observed, REF, _demand(1)) == 8


def test_other_tenants_keep_their_gpus_when_this_pool_releases(pool_body: Body, node_pool_body: Body) -> None:
    pools = [_entry("chat", 8), {**_entry("code", 3, "team-b"), "gpusPerReplica": 1}]
    observed = _observed(pool_body, node_pool_body, (0, 4), 3, pools)
    # Released to 4 GPUs: 7 GPUs in all need 2 nodes; 3 of their 8 GPUs are the other pool's.
    assert reconcile._paid_replicas(observed, REF, _demand(4)) == 5
    # A demand on another node pool (the spec moved) says nothing about this one.
    assert reconcile._paid_replicas(observed, REF, _demand(4, node_pool="h100")) == 9


def test_a_full_pools_list_is_not_resized_from(pool_body: Body, node_pool_body: Body) -> None:
    """At `POOLS_MAX_ITEMS` the node pool's list may be truncated: tenants missing from it would be sized as
    absent, so the node pool's own count stands."""
    pools = [_entry(f"p{i}", 0, "team-z") for i in range(api.POOLS_MAX_ITEMS - 1)] + [_entry("chat", 8)]
    observed = _observed(pool_body, node_pool_body, (1, 4), 2, pools)
    assert reconcile._paid_replicas(observed, REF, _demand(4)) == 8
    assert (
        reconcile._paid_replicas(_observed(pool_body, node_pool_body, (1, 4), 2, pools[-2:]), REF, _demand(4))
        == 4
    )
