"""The reactive reference (`poolpilot.sim.reactive`): pure arithmetic over per-minute needs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolpilot.sim.reactive import ReactivePlant, oracle_needs, reactive_reference, unavoidable_misses

# 8 replicas a node; a need is known 15 s into its minute and served 15 + 300 + 60 = 375 s later, i.e.
# from the 7th window after its own (6 · 60 < 375 ≤ 7 · 60).
PLANT = ReactivePlant(
    start_replicas=2,
    replicas_per_node=8,
    gpus_per_node=8,
    max_replicas=256,
    node_lead_s=300.0,
    pod_start_s=60.0,
    notice_s=15.0,
    duration_s=3600.0,
)


def test_a_rise_above_everything_seen_is_missed_for_one_reaction_time() -> None:
    needs: list[int | None] = [2] * 5 + [20] * 15
    ref = reactive_reference(needs, replace(PLANT, duration_s=1200.0))
    assert ref.missed == tuple(range(5, 12))  # known at 315 s, ready at 675 s: window 12 (720 s) on
    assert ref.peak_replicas == 24  # three whole nodes, filled


def test_a_load_that_comes_back_is_met_because_nothing_is_given_back() -> None:
    needs: list[int | None] = [2] * 5 + [20] * 10 + [2] * 10 + [20] * 5
    ref = reactive_reference(needs, replace(PLANT, duration_s=1800.0))
    assert ref.missed == tuple(range(5, 12))  # only the first rise


def test_paid_nodes_are_filled_after_the_first_pod_start() -> None:
    # The start node's 8 slots serve from the first pod start; a 9th replica needs a node.
    assert reactive_reference([2, 8, 8], replace(PLANT, duration_s=180.0)).missed == ()
    assert reactive_reference([3], replace(PLANT, duration_s=60.0)).missed == (0,)  # before the pod start
    assert reactive_reference([2, 9, 9], replace(PLANT, duration_s=180.0)).missed == (1, 2)


def test_a_minute_no_fleet_meets_is_missed_and_asks_for_the_top() -> None:
    needs: list[int | None] = [2, None] + [200] * 10
    ref = reactive_reference(needs, replace(PLANT, duration_s=720.0))
    assert ref.missed == (1, 2, 3, 4, 5, 6, 7)  # None asked for 256 at 75 s; ready at 435 s: window 8


def test_gpu_hours_bill_the_nodes_from_the_minute_their_need_is_known() -> None:
    ref = reactive_reference([2, 2, 20, 2], replace(PLANT, duration_s=210.0))
    # 1, 1, 3, 3 nodes of 8 GPUs; the last window is 30 s long.
    assert ref.gpu_hours == pytest.approx((60 * (1 + 1 + 3) + 30 * 3) * 8 / 3600)


def test_a_start_above_the_first_need_is_billed_and_the_pool_maximum_caps_the_nodes() -> None:
    # 10 start replicas hold two nodes from t = 0, whatever the first minutes need.
    ref = reactive_reference([2, 2], replace(PLANT, start_replicas=10, duration_s=120.0))
    assert ref.gpu_hours == pytest.approx(2 * 2 * 8 * 60 / 3600)
    # A pool capped at 12 replicas runs 12 on its two nodes, and a minute no fleet meets asks for 12.
    capped = replace(PLANT, max_replicas=12, duration_s=600.0)
    ref = reactive_reference([2, None, 12, 12, 12, 12, 12, 12, 12, 12], capped)
    assert ref.peak_replicas == 12
    assert ref.missed == (1, 2, 3, 4, 5, 6, 7)  # None asked for 12 at 75 s; 2 nodes ready at 435 s


def test_no_controller_meets_a_minute_that_ends_before_what_it_asks_for_at_the_start_can_serve() -> None:
    """Until the pod start only the start fleet serves; until a node lead more, its nodes filled."""
    # Start 2 on one node of 8; pods serve from 60 s, a node asked for at t = 0 from 360 s.
    needs: list[int | None] = [3, 8, 9, 9, 9, 9, 20, None, 4]
    assert unavoidable_misses(needs, PLANT) == (0, 2, 3, 4, 5, 7)
    assert unavoidable_misses([2, 8], PLANT) == ()  # the start fleet, then its node filled
    # A longer pod start keeps the second minute on the start fleet alone; a shorter lead frees minute 5.
    assert unavoidable_misses([2, 3], replace(PLANT, pod_start_s=120.0)) == (1,)
    assert unavoidable_misses(needs, replace(PLANT, node_lead_s=240.0)) == (0, 2, 3, 4, 7)
    # The pool's maximum caps what the start nodes hold; its node floor adds to them (billed too).
    assert unavoidable_misses([2, 7], replace(PLANT, max_replicas=6)) == (1,)
    assert unavoidable_misses([2, 12], replace(PLANT, min_nodes=2)) == ()
    floor = reactive_reference([2, 12], replace(PLANT, min_nodes=2, duration_s=120.0))
    assert floor.missed == () and floor.gpu_hours == pytest.approx(2 * 2 * 8 * 60 / 3600)


def test_the_oracle_series_gives_each_minutes_need() -> None:
    nan = float("nan")
    series = {
        "replicas": [1.0, 4.0, 256.0, 256.0],
        "p99_ms": [nan, 90.0, 400.0, nan],
        "arrivals_per_s": [0.0, 10.0, 50.0, 50.0],
    }
    # empty, met, missed at max, every request rejected at max (the oracle writes NaN for inf)
    assert oracle_needs(series, 100.0) == [1, 4, None, None]


def test_bad_plants_are_refused() -> None:
    with pytest.raises(ValueError, match="replicas_per_node"):
        replace(PLANT, replicas_per_node=0)
    with pytest.raises(ValueError, match="node_lead_s"):
        replace(PLANT, node_lead_s=-1.0)


@given(
    needs=st.lists(st.one_of(st.none(), st.integers(1, 300)), min_size=1, max_size=60),
    lead_s=st.floats(0.0, 900.0),
    pod_s=st.floats(0.0, 200.0),
    start=st.integers(1, 40),
)
def test_a_shorter_reaction_never_misses_more_and_no_reaction_misses_only_what_no_fleet_meets(
    needs: list[int | None], lead_s: float, pod_s: float, start: int
) -> None:
    """And the reference, one controller from the start, misses every minute no controller meets."""
    plant = replace(
        PLANT, start_replicas=start, node_lead_s=lead_s, pod_start_s=pod_s, duration_s=60.0 * len(needs)
    )
    slow = set(reactive_reference(needs, plant).missed)
    fast = set(
        reactive_reference(needs, replace(plant, node_lead_s=lead_s / 2, pod_start_s=pod_s / 2)).missed
    )
    assert fast <= slow
    assert set(unavoidable_misses(needs, plant)) <= slow
    instant = reactive_reference(needs, replace(plant, node_lead_s=0.0, pod_start_s=0.0, notice_s=0.0))
    assert set(instant.missed) == {m for m, n in enumerate(needs) if n is None or n > 256}
