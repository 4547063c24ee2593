"""The forecast stage: each lever is sized for the demand that can arrive within its reaction time."""

from __future__ import annotations

import math
from typing import Any

import pytest

from poolpilot.policy.demand import (
    Recurrence,
    envelope,
    forecast_demand,
    recent_peak,
    recurrence,
    trend_per_s2,
)
from poolpilot.policy.types import HistoryEntry

NOW = 1_000.0


def hist(rates: list[float], step_s: float = 15.0) -> tuple[HistoryEntry, ...]:
    """Entries ending one step before NOW, oldest first."""
    n = len(rates)
    return tuple(
        HistoryEntry(time_s=NOW - step_s * (n - i), replicas=1, rate_per_s=r) for i, r in enumerate(rates)
    )


def fc_of(
    now: float,
    h: tuple[HistoryEntry, ...],
    pod_s: float = 75.0,
    node_s: float = 360.0,
    covered_s: tuple[float, float] = (0.0, 0.0),
) -> Any:
    return forecast_demand(
        now,
        h,
        NOW,
        pod_reaction_s=pod_s,
        node_reaction_s=node_s,
        trend_window_s=300.0,
        min_rise_ratio=0.1,
        max_rise_ratio=0.1,
        measure_window_s=covered_s[0],
        tick_s=covered_s[1],
    )


def test_a_burst_is_remembered_for_the_reaction_time_and_no_longer() -> None:
    # A 600/s burst 2 minutes ago, 100/s since.
    h = hist([600.0] + [100.0] * 7)
    assert recent_peak(100.0, h, NOW, 75.0) == 100.0  # pods react in 75 s: the burst is older
    assert recent_peak(100.0, h, NOW, 360.0) == 600.0  # nodes take 6 min: it can come back first
    fc = fc_of(100.0, h)
    assert fc.replicas_per_s == 100.0
    assert fc.nodes_per_s == 600.0
    assert fc.trend_per_s2 == 0.0  # falling: no trend


def test_a_rising_trend_adds_at_most_its_cap() -> None:
    h = hist([100.0 + 10 * i for i in range(20)])  # +10/s every 15 s
    slope = trend_per_s2(h, NOW, 300.0)
    assert slope == pytest.approx(10 / 15, rel=1e-6)
    now = 300.0
    assert envelope(now, h, NOW, 75.0, slope, math.inf) == pytest.approx(now + slope * 75.0)
    assert envelope(now, h, NOW, 360.0, slope, 0.1) == pytest.approx(now * 1.1)


def test_ripple_is_not_a_trend() -> None:
    h = hist([100.0, 101.0, 100.5, 101.5, 101.0, 102.0])
    fc = fc_of(102.0, h)
    assert fc.trend_per_s2 == 0.0
    assert fc.replicas_per_s == fc.nodes_per_s == 102.0


def test_envelopes_are_ordered_and_never_below_now() -> None:
    h = hist([50.0, 400.0, 20.0, 300.0, 10.0])
    for now in (0.0, 5.0, 500.0):
        fc = fc_of(now, h, 40.0, 200.0)
        assert now <= fc.replicas_per_s <= fc.nodes_per_s


def test_a_rise_back_towards_a_level_already_reached_stops_at_that_level() -> None:
    """A trend is extrapolated into load not yet seen; below the busiest level demand has reached, a rise
    is a return to it (an on/off or Markov load switching back to its high state) and the envelopes stop
    there. At or above that level, or with none recorded, the trend counts in full."""
    h = hist([100.0 + 10 * i for i in range(20)])  # +10/s every 15 s: a 10 % cap binds at 300/s
    rising = fc_of(300.0, h)
    assert rising.replicas_per_s == pytest.approx(330.0) and rising.nodes_per_s == pytest.approx(330.0)

    def seen(level: float, history: tuple[HistoryEntry, ...] = h) -> Any:
        return forecast_demand(
            300.0,
            history,
            NOW,
            pod_reaction_s=75.0,
            node_reaction_s=360.0,
            trend_window_s=300.0,
            min_rise_ratio=0.1,
            max_rise_ratio=0.1,
            seen_level_per_s=level,
        )

    back = seen(310.0)
    assert back.replicas_per_s == pytest.approx(310.0) and back.nodes_per_s == pytest.approx(310.0)
    assert back.trend_per_s2 == rising.trend_per_s2  # the trend is still reported; only its reach stops
    assert seen(300.0).nodes_per_s == pytest.approx(330.0)  # at the level: new ground from here
    assert seen(250.0).nodes_per_s == pytest.approx(330.0)  # above it
    assert seen(math.nan).nodes_per_s == pytest.approx(330.0)  # none recorded
    assert seen(400.0).nodes_per_s == pytest.approx(330.0)  # the level is above the whole rise
    # The level stops the trend only: a busier sample within the node look-back still counts in full.
    peaked = hist([100.0 + 10 * i for i in range(19)] + [350.0])
    assert seen(320.0, peaked).nodes_per_s == pytest.approx(350.0)


def test_nan_and_future_entries_are_ignored() -> None:
    h = (
        HistoryEntry(time_s=NOW - 30, replicas=1, rate_per_s=math.nan),
        HistoryEntry(time_s=NOW + 30, replicas=1, rate_per_s=900.0),
    )
    assert recent_peak(10.0, h, NOW, 300.0) == 10.0


def test_what_the_measurement_window_covers_is_not_counted_twice() -> None:
    """A 60 s rate and the next tick cover 75 s: the replica lever (75 s) gets no look-back, nodes 285 s."""
    h = hist([160.0] + [100.0] * 11 + [130.0])  # a noisy sample one tick ago; a peak 195 s ago
    fc = fc_of(100.0, h, covered_s=(60.0, 15.0))
    assert fc.trend_per_s2 == 0.0
    assert fc.replicas_per_s == 100.0
    assert fc.nodes_per_s == 160.0
    old = hist([400.0] + [100.0] * 20)  # 315 s ago: beyond the node look-back of 285 s
    assert fc_of(100.0, old).nodes_per_s == 400.0  # nothing covered: the whole 360 s
    assert fc_of(100.0, old, covered_s=(60.0, 15.0)).nodes_per_s == 100.0


def _seen(mem: Recurrence, rate: float, at_s: float) -> Recurrence:
    return _learn(mem, rate, at_s)[0]


def _learn(mem: Recurrence, rate: float, at_s: float) -> tuple[Recurrence, float]:
    return recurrence(mem, rate, at_s, min_gap_s=360.0, headroom=0.1, max_hold_s=3_600.0)


def test_demand_that_comes_back_after_a_trough_holds_capacity_through_troughs_that_long() -> None:
    """A burst level is held only once demand has come back to it after more than the scale-down window
    (360 s here); the hold is then the longest such gap, and it ends that long after the level was last
    seen."""
    mem = _seen(Recurrence(math.nan, math.nan, 0.0), 1_000.0, 0.0)
    mem = _seen(mem, 200.0, 300.0)  # a trough: the level stays, nothing is learnt yet
    assert (mem.rate_per_s, mem.seen_s, mem.hold_s) == (1_000.0, 0.0, 0.0)
    assert not mem.holding(300.0)
    back, learnt_s = _learn(mem, 950.0, 900.0)  # back within the 10 % headroom after 900 s below it
    assert learnt_s == pytest.approx(900.0) and back.hold_s == pytest.approx(900.0)
    trough = _seen(back, 200.0, 1_500.0)
    assert trough.holding(1_500.0) and trough.holding(1_800.0) and not trough.holding(1_801.0)
    assert trough.hold_left_s(1_500.0) == pytest.approx(300.0)
    # Held above the demand only while demand stays below the level by more than the headroom.
    assert trough.holds_above(200.0, 1_500.0, 0.1) and not trough.holds_above(950.0, 1_500.0, 0.1)
    assert not trough.holds_above(200.0, 1_801.0, 0.1)


def test_a_gap_within_the_scale_down_window_or_a_lower_level_teaches_no_hold() -> None:
    mem = _seen(Recurrence(math.nan, math.nan, 0.0), 1_000.0, 0.0)
    assert _seen(mem, 1_000.0, 300.0).hold_s == 0.0  # 300 s < 360 s: nothing was given back
    assert _learn(mem, 800.0, 900.0) == (mem, 0.0)  # a lower level is not the burst
    higher = _seen(mem, 1_500.0, 60.0)
    assert higher.rate_per_s == 1_500.0 and higher.hold_s == 0.0  # the level rises at once
    assert _seen(mem, 1_000.0, 99_000.0).hold_s == 3_600.0  # capped: a day later is a new phase


def test_the_hold_is_a_multiple_of_the_longest_trough_demand_came_back_after() -> None:
    """With `hold_factor` 2 the trough learnt is held twice as long: the next trough is as likely as
    not to outlast the longest one seen, and outlasting the hold costs a node lead of missed windows."""
    mem = _seen(Recurrence(math.nan, math.nan, 0.0), 1_000.0, 0.0)
    back, learnt_s = recurrence(
        mem, 950.0, 900.0, min_gap_s=360.0, headroom=0.1, max_hold_s=3_600.0, hold_factor=2.0
    )
    assert learnt_s == pytest.approx(900.0) and back.hold_s == pytest.approx(1_800.0)
    assert back.holding(900.0 + 1_800.0) and not back.holding(900.0 + 1_801.0)
    capped = recurrence(
        mem, 950.0, 2_000.0, min_gap_s=360.0, headroom=0.1, max_hold_s=3_600.0, hold_factor=2.0
    )
    assert capped[0].hold_s == 3_600.0
