"""`gallop_bisect`: the fewest that is enough, for a monotone predicate, with few evaluations."""

from __future__ import annotations

import itertools
import math

import pytest

from poolpilot.sim.search import gallop_bisect


class Counted:
    """`n >= threshold`, recording every call (a simulation each, in the real callers)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.calls: list[int] = []

    def __call__(self, n: int) -> bool:
        self.calls.append(n)
        return n >= self.threshold


@pytest.mark.parametrize(("step_down", "step_up"), [(1, 1), (3, 5), (None, 1), (None, 4)])
def test_finds_the_threshold_from_any_start_asking_inside_the_range_once_each(
    step_down: int | None, step_up: int
) -> None:
    for lo, hi in [(1, 1), (1, 2), (1, 13), (3, 17), (0, 9)]:
        for threshold, start in itertools.product(range(lo - 1, hi + 3), range(lo - 2, hi + 3)):
            ok = Counted(threshold)
            got = gallop_bisect(ok, lo, hi, start=start, step_down=step_down, step_up=step_up)
            expected = max(lo, threshold) if threshold <= hi else None
            where = f"lo={lo} hi={hi} threshold={threshold} start={start}"
            assert got == expected, where
            assert all(lo <= n <= hi for n in ok.calls), where
            assert len(ok.calls) == len(set(ok.calls)), where


def test_ok_at_lo_is_lo() -> None:
    ok = Counted(0)
    assert gallop_bisect(ok, 5, 100) == 5
    assert ok.calls == [5]  # lo − 1 is taken as a miss, never asked


def test_never_ok_up_to_hi_is_none_after_asking_hi() -> None:
    ok = Counted(math.inf)
    assert gallop_bisect(ok, 1, 50, start=7) is None
    assert ok.calls[-1] == 50


def test_an_empty_range_asks_nothing() -> None:
    ok = Counted(0)
    assert gallop_bisect(ok, 4, 3) is None
    assert ok.calls == []


def test_a_start_outside_the_range_is_clamped() -> None:
    low, high = Counted(10), Counted(10)
    assert gallop_bisect(low, 5, 20, start=-3) == 10
    assert low.calls[0] == 5
    assert gallop_bisect(high, 5, 20, start=99) == 10
    assert high.calls[0] == 20


def test_a_good_guess_costs_evaluations_of_its_distance_not_of_the_range() -> None:
    near = Counted(500_000)
    assert gallop_bisect(near, 1, 10**9, start=500_003) == 500_000
    assert len(near.calls) <= 6
    far = Counted(500_000)
    assert gallop_bisect(far, 1, 10**9, start=1) == 500_000
    assert len(far.calls) <= 2 * math.ceil(math.log2(500_000)) + 2
