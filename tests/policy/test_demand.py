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
    return_level,
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


def fc_level(
    now: float,
    h: tuple[HistoryEntry, ...],
    levels: Recurrence,
    *,
    now_s: float = NOW,
    pod_s: float = 75.0,
    max_rise_ratio: float = 0.1,
    lookback: bool = True,
) -> Any:
    """`forecast_demand` as `decide` calls it (a 60 s rate, 15 s ticks) with a recurrence memory."""
    return forecast_demand(
        now,
        h,
        now_s,
        pod_reaction_s=pod_s,
        node_reaction_s=360.0,
        trend_window_s=300.0,
        min_rise_ratio=0.1,
        max_rise_ratio=max_rise_ratio,
        measure_window_s=60.0,
        tick_s=15.0,
        lookback=lookback,
        levels=levels,
        level_max_age_s=3_600.0,
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


def test_a_rise_back_towards_a_level_reached_before_it_stops_at_that_level() -> None:
    """A trend is extrapolated into load not yet seen. Below a level demand reached before this rise began
    (above every sample the trend is fitted on), a rise is a return to it — an on/off or Markov load
    switching back to its high state — and the envelopes stop there. A level set by the rise itself, at or
    below demand now, last seen longer ago than the age limit, or none: the trend counts in full."""
    h = hist([100.0 + 10 * i for i in range(20)])  # +10/s every 15 s up to 290/s: a 10 % cap at 300/s

    def fc(level: float, history: tuple[HistoryEntry, ...] = h, seen_s: float = NOW - 900.0) -> Any:
        return fc_level(300.0, history, Recurrence(level, seen_s, 0.0), pod_s=90.0)

    full = fc(math.nan)
    assert (full.replicas_per_s, full.nodes_per_s) == (pytest.approx(330.0), pytest.approx(330.0))
    assert math.isnan(full.trend_stopped_at_per_s)
    back = fc(310.0)
    assert (back.replicas_per_s, back.nodes_per_s) == (pytest.approx(310.0), pytest.approx(310.0))
    assert back.trend_stopped_at_per_s == 310.0
    assert back.trend_per_s2 == full.trend_per_s2  # the trend is still reported; only its reach stops
    for no_cut in (
        fc(300.0),  # at the level: new ground from here
        fc(250.0),  # above it
        fc(310.0, seen_s=NOW - 3_601.0),  # last seen longer ago than the age limit: a new phase
        fc(400.0),  # above the whole rise: nothing to stop
    ):
        assert no_cut.nodes_per_s == pytest.approx(330.0)
        assert math.isnan(no_cut.trend_stopped_at_per_s)
    noisy = fc(310.0, hist([100.0 + 10 * i for i in range(19)] + [310.0]))  # a sample of this minute set it
    assert math.isnan(noisy.trend_stopped_at_per_s)
    assert noisy.nodes_per_s == pytest.approx(310.0 + 30.0)  # the node look-back's peak plus the whole rise
    # Only the trend stops: a busier sample within the node look-back still counts in full.
    peaked = hist([100.0 + 10 * i for i in range(12)] + [350.0] + [220.0 + 10 * i for i in range(7)])
    assert fc(360.0, peaked).nodes_per_s == pytest.approx(360.0)


def test_a_noisy_ramp_into_new_load_keeps_its_trend() -> None:
    """On a ramp into load never seen, the busiest level is the ramp's own latest noise: it sits above
    demand now on every other tick, and stopping the trend there would order nodes late, or never (a
    node bought on the forecast must be asked for two ticks running). Tracked as the recurrence memory
    tracks it, tick by tick, it stops nothing."""
    rates = [300.0 + 4.0 * k + (9.0 if k % 2 else -9.0) for k in range(60)]  # +4/s per tick, ±9/s noise
    mem = Recurrence(math.nan, math.nan, 0.0)
    for k, now_per_s in enumerate(rates):
        now_s = NOW + 15.0 * k
        history = tuple(
            HistoryEntry(time_s=now_s - 15.0 * (k - i), replicas=1, rate_per_s=r)
            for i, r in enumerate(rates[:k])
        )
        fc = fc_level(now_per_s, history, mem, now_s=now_s, lookback=False)
        assert math.isnan(fc.trend_stopped_at_per_s), (k, now_per_s, mem.rate_per_s)
        mem = recurrence(mem, now_per_s, now_s, min_gap_s=300.0, headroom=0.1, max_hold_s=3_600.0)[0]


def test_a_level_counts_once_it_is_older_than_the_measurement_window_and_a_tick() -> None:
    """With a 60 s rate and 15 s ticks, a level sampled 90 s ago is a level the load held before; one
    sampled 75 s or 60 s ago shares the rate's noise. Its age limit is inclusive. A level between the two
    envelopes stops the node envelope only, and is reported."""

    def fc(history: tuple[HistoryEntry, ...], level: float, seen_s: float = NOW - 900.0) -> Any:
        return fc_level(300.0, history, Recurrence(level, seen_s, 0.0), max_rise_ratio=1.0, lookback=False)

    def ramp_with(level_at_steps: int) -> tuple[HistoryEntry, ...]:
        rates = [100.0 + 10 * i for i in range(20)]
        rates[20 - level_at_steps] = 320.0  # `level_at_steps` ticks of 15 s before NOW
        return hist(rates)

    assert fc(ramp_with(6), 320.0).trend_stopped_at_per_s == 320.0  # 90 s ago
    assert math.isnan(fc(ramp_with(5), 320.0).trend_stopped_at_per_s)  # 75 s ago
    assert math.isnan(fc(ramp_with(4), 320.0).trend_stopped_at_per_s)  # 60 s ago
    assert fc(ramp_with(6), 320.0, seen_s=NOW - 3_600.0).trend_stopped_at_per_s == 320.0
    # The replica lever's 75 s of trend stays below a level its node lever's 360 s would pass.
    full = fc(hist([100.0 + 10 * i for i in range(20)]), math.nan)
    between = (full.replicas_per_s + full.nodes_per_s) / 2
    split = fc(hist([100.0 + 10 * i for i in range(20)]), between)
    assert split.replicas_per_s == pytest.approx(full.replicas_per_s)
    assert split.nodes_per_s == pytest.approx(between) and between < full.nodes_per_s
    assert split.trend_stopped_at_per_s == between


def test_the_return_level_is_a_recurrence_level_reached_before_the_current_rate() -> None:
    h = hist([100.0, 300.0] + [100.0] * 22)  # 300/s 5.5 minutes ago, then 100/s
    kw: dict[str, Any] = {"fresh_s": 75.0, "max_age_s": 3_600.0}
    assert return_level(300.0, NOW - 330.0, 150.0, h, NOW, **kw) == 300.0
    wider = {**kw, "fresh_s": 360.0}  # the 300/s sample is in the span that shares the rate's noise
    assert math.isnan(return_level(300.0, NOW - 330.0, 150.0, h, NOW, **wider))
    assert math.isnan(return_level(300.0, NOW - 330.0, 300.0, h, NOW, **kw))  # demand is there now
    assert math.isnan(return_level(300.0, math.nan, 150.0, h, NOW, **kw))
    assert math.isnan(return_level(math.nan, NOW - 330.0, 150.0, h, NOW, **kw))
    assert math.isnan(return_level(300.0, NOW - 3_601.0, 150.0, h, NOW, **kw))  # a new phase


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
