"""Forecast stage of `decide`: the demand each lever must be sized for, from the pool's own history.

A correction takes effect only after its lever's reaction time: a replica asked for now serves after
the pod start, a node after its provisioning plus the pod start. Whatever demand can arrive in that
time must already be provisioned for, so each lever is sized for an *envelope* over its reaction time:

    envelope(reaction) = max(demand now, the busiest demand recorded within the last
                             `reaction` − `measure_window` − `tick` s)
                         + the fitted rising trend over `reaction` (capped at a share of now, and so
                           that the envelope does not pass a level demand is returning to: `return_level`)

The measured demand is itself a rate over the last `measure_window` (Prometheus' 60 s), and the next tick
measures again before a correction asked for now could land: that much of the reaction time is already
covered, and a maximum over samples that overlap it only adds their noise (measured: a 2-sample maximum
for replicas cost 8 % more GPU-hours on a steady Poisson step — with whole nodes a few % of noise opens
a node for the rest of the hour). So with the defaults the replica lever (75 s) has no look-back — its
envelope after a peak is the scale-down stabilisation window, HPA's rule — and the node lever (360 s)
looks back 285 s.

The busiest recent demand stands for what the same load can do again before a correction lands
(minute-scale bursts, on/off phases); the trend for a ramp that has not yet peaked. HPA's 5-minute
scale-down window is a crude form of the first term for replicas only; here each lever gets the window
its own reaction time asks for, and the node lever's window is the longer one. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from poolpilot.policy.types import HistoryEntry


@dataclass(frozen=True, slots=True)
class DemandForecast:
    """Inferences/s now and the envelopes the replica and node levers are sized for."""

    now_per_s: float
    replicas_per_s: float  # envelope over pod start + one tick
    nodes_per_s: float  # envelope over node provisioning + pod start
    trend_per_s2: float  # rising trend used (0 when ripple or falling)
    # Busiest demand recorded within the whole node reaction time (now included): a node is released only
    # if one fewer would have served it (a released node takes that long to come back).
    recent_peak_per_s: float
    # The level a rising trend stopped at in either envelope (`return_level`); NaN when it counted in full.
    trend_stopped_at_per_s: float = math.nan


def trend_per_s2(history: Sequence[HistoryEntry], now_s: float, window_s: float) -> float:
    """Least-squares slope of demand (inferences/s per s) over the window; rising trends only."""
    pts = [
        (e.time_s, e.rate_per_s)
        for e in history
        if e.time_s >= now_s - window_s and math.isfinite(e.rate_per_s)
    ]
    if len(pts) < 4:
        return 0.0
    n = float(len(pts))
    mt = sum(t for t, _ in pts) / n
    mr = sum(r for _, r in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    if var <= 0:
        return 0.0
    slope = sum((t - mt) * (r - mr) for t, r in pts) / var
    return max(0.0, slope)


def recent_peak(now_per_s: float, history: Sequence[HistoryEntry], now_s: float, window_s: float) -> float:
    """The busiest demand recorded within `window_s` before `now_s`, now included."""
    rates = [
        e.rate_per_s
        for e in history
        if e.time_s >= now_s - window_s and e.time_s <= now_s and math.isfinite(e.rate_per_s)
    ]
    return max([now_per_s, *rates])


def envelope(
    now_per_s: float,
    history: Sequence[HistoryEntry],
    now_s: float,
    reaction_s: float,
    slope_per_s2: float,
    max_rise_ratio: float,
    lookback_s: float | None = None,
    return_level_per_s: float = math.nan,
) -> float:
    """Demand that can arrive before a correction asked for now takes effect (module docstring).

    The trend term is capped at `max_rise_ratio` x now: a 5-minute trend extrapolated over a
    6-minute node lead doubles any burst at the start of a ramp, and nodes ordered for it are
    billed while they provision even if the burst is gone. Below `return_level_per_s` (`return_level`)
    the rise stops at that level: a trend is extrapolated only into load not seen yet.
    """
    back = reaction_s if lookback_s is None else lookback_s
    peak = recent_peak(now_per_s, history, now_s, back) if back > 0 else now_per_s
    rise = min(max(slope_per_s2, 0.0) * max(reaction_s, 0.0), max_rise_ratio * now_per_s)
    if math.isfinite(return_level_per_s) and now_per_s < return_level_per_s:
        rise = min(rise, max(0.0, return_level_per_s - peak))
    return peak + rise


def return_level(
    level_per_s: float,
    level_seen_s: float,
    now_per_s: float,
    history: Sequence[HistoryEntry],
    now_s: float,
    *,
    fresh_s: float,
    max_age_s: float,
) -> float:
    """The level a rise in demand is a return to (NaN: none), which the trend is not extrapolated past.

    It is the busiest level demand has reached (`Recurrence.rate_per_s`) when that lies above demand now
    and above every sample of the last `fresh_s` (the measurement window plus a tick, the span the
    look-backs leave out too: a running maximum set there sits just above a noisy ramp into new load,
    not at a level the load held before), and demand last came within the recurrence headroom of it no
    longer than `max_age_s` ago (after longer, a load is a new phase: `recurrence`). A least-squares line
    through an on/off or Markov load switching back to its high state rises past that state.
    """
    if not (math.isfinite(level_per_s) and math.isfinite(level_seen_s)) or now_s - level_seen_s > max_age_s:
        return math.nan
    if level_per_s <= recent_peak(now_per_s, history, now_s, fresh_s):
        return math.nan
    return level_per_s


def forecast_demand(
    now_per_s: float,
    history: Sequence[HistoryEntry],
    now_s: float,
    *,
    pod_reaction_s: float,
    node_reaction_s: float,
    trend_window_s: float,
    min_rise_ratio: float,
    max_rise_ratio: float,
    measure_window_s: float = 0.0,
    tick_s: float = 0.0,
    lookback: bool = True,
    levels: Recurrence | None = None,
    level_max_age_s: float = math.inf,
) -> DemandForecast:
    """The forecast stage: a trend counts only when its rise over the window is a real share of now,
    and reaches no further than the level demand is returning to (`return_level`, from the recurrence
    memory `levels`; none when not given).

    `lookback` False: the envelopes are demand now plus the trend (no recent-peak term; see
    `PolicyParams.envelope_lookback` for why that is the default).
    """
    slope = trend_per_s2(history, now_s, trend_window_s)
    if slope * trend_window_s < min_rise_ratio * now_per_s:
        slope = 0.0
    node_reaction_s = max(node_reaction_s, pod_reaction_s)
    covered = measure_window_s + tick_s
    pod_back, node_back = pod_reaction_s - covered, node_reaction_s - covered
    if not lookback:
        pod_back = node_back = 0.0
    level = math.nan
    if levels is not None:
        level = return_level(
            levels.rate_per_s,
            levels.seen_s,
            now_per_s,
            history,
            now_s,
            fresh_s=covered,
            max_age_s=level_max_age_s,
        )
    replicas, nodes = (
        envelope(now_per_s, history, now_s, reaction, slope, max_rise_ratio, back, level)
        for reaction, back in ((pod_reaction_s, pod_back), (node_reaction_s, node_back))
    )
    # Stopped: the level cut the node envelope, the longer of the two (a cut replica envelope cuts it).
    full_nodes = envelope(now_per_s, history, now_s, node_reaction_s, slope, max_rise_ratio, node_back)
    return DemandForecast(
        now_per_s=now_per_s,
        replicas_per_s=replicas,
        nodes_per_s=nodes,
        trend_per_s2=slope,
        recent_peak_per_s=recent_peak(now_per_s, history, now_s, node_reaction_s),
        trend_stopped_at_per_s=level if nodes < full_nodes else math.nan,
    )


@dataclass(frozen=True, slots=True)
class Recurrence:
    """The demand level a load has reached and how long it has stayed away before coming back."""

    rate_per_s: float  # busiest level reached (NaN: none yet)
    seen_s: float  # last time demand came within the headroom of it (NaN: never)
    hold_s: float  # longest gap after which demand came back to it (0: never)

    def holding(self, now_s: float) -> bool:
        """Whether the level is still to be provisioned for: within the longest gap seen."""
        return self.hold_s > 0 and math.isfinite(self.seen_s) and now_s - self.seen_s <= self.hold_s

    def holds_above(self, now_per_s: float, now_s: float, headroom: float) -> bool:
        """Whether capacity is held for the level above the demand now: holding, and demand below it by
        more than the headroom (within it, the demand itself asks for that capacity)."""
        return self.holding(now_s) and now_per_s < self.rate_per_s * (1.0 - headroom)

    def hold_left_s(self, now_s: float) -> float:
        """How much longer the hold lasts."""
        return self.seen_s + self.hold_s - now_s


def recurrence(
    memory: Recurrence,
    now_per_s: float,
    now_s: float,
    *,
    min_gap_s: float,
    headroom: float,
    max_hold_s: float,
    hold_factor: float = 1.0,
) -> tuple[Recurrence, float]:
    """Update the recurrence memory with the demand now; also the gap learnt this tick (0: none).

    Demand within `headroom` of the level (or above it) refreshes it. Demand that comes back after
    staying below it for longer than `min_gap_s` lengthens the hold to that gap (at most `max_hold_s`).
    `min_gap_s` is the shorter of the scale-down stabilisation window and the node reaction time (at
    least a tick): a trough that outlasts the window has given the capacity back, and its return waits a
    node reaction time however short the trough was; a gap longer than the reaction time is evidence of
    how long troughs last even where the window is longer. (It was the node reaction time alone, on the
    ground that shorter gaps were the node envelope's look-back; that look-back is off by measurement, so
    a gap between the window and a longer reaction time was nobody's: heldout-012 learnt nothing until its
    third burst.) Pure; the level only rises (a lower recurring level is a different load, and the
    hold only lengthens on evidence).
    """
    if not math.isfinite(now_per_s) or now_per_s <= 0:
        return memory, 0.0
    level = memory.rate_per_s if math.isfinite(memory.rate_per_s) else 0.0
    if now_per_s < level * (1.0 - headroom):
        return memory, 0.0
    gap = now_s - memory.seen_s if math.isfinite(memory.seen_s) else 0.0
    learnt = gap if gap > min_gap_s and gap > memory.hold_s else 0.0
    updated = Recurrence(
        rate_per_s=max(level, now_per_s),
        seen_s=now_s,
        hold_s=min(max_hold_s, max(memory.hold_s, hold_factor * learnt)),
    )
    return updated, min(max_hold_s, learnt)
