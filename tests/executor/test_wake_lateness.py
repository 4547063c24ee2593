"""`WakeLateness`: the emulated GPU sleeps less by what its timer has been firing late, so an execution
takes the curve's time on average (pure: the lateness is given, not measured)."""

from __future__ import annotations

import pytest

from poolpilot.executor.backends import WakeLateness


def test_a_steady_lateness_is_learnt_and_taken_off_the_sleep() -> None:
    w = WakeLateness(gain=0.1)
    target_s, late_s = 0.070, 0.0025
    elapsed = []
    for _ in range(100):
        slept = w.sleep_for(target_s)
        w.observe(slept, slept + late_s)
        elapsed.append(slept + late_s)
    assert elapsed[0] == pytest.approx(target_s + late_s)  # nothing learnt yet
    assert elapsed[-1] == pytest.approx(target_s, abs=1e-5)
    assert w.sleep_for(target_s) == pytest.approx(target_s - late_s, abs=1e-5)


def test_the_sleep_never_goes_below_zero_and_an_early_wake_is_not_lateness() -> None:
    w = WakeLateness(gain=1.0)
    w.observe(0.010, 0.030)
    assert w.sleep_for(0.005) == 0.0
    w.observe(0.010, 0.009)  # woke early (clock granularity): no negative lateness
    assert w.late_s == 0.0
    with pytest.raises(ValueError, match="gain"):
        WakeLateness(gain=0.0)
