"""The simulator's one search for "the fewest that is enough": gallop from a guess, then bisect.

The oracle (fewest replicas per minute), the best fixed fleet in hindsight (fewest replicas over the trace)
and the suite's fixed-fleet frontier (fewest nodes meeting a goal) all ask the same question of a predicate
that is monotone in the size (taken as such: more replicas or nodes never miss where fewer meet) and costly
to evaluate (each call is a simulation). `gallop_bisect` answers it with few evaluations when the guess is
good: O(log distance from the guess) rather than O(log range), and never re-asks a size it has settled.
"""

from __future__ import annotations

from collections.abc import Callable


def gallop_bisect(
    ok: Callable[[int], bool],
    lo: int,
    hi: int,
    *,
    start: int | None = None,
    step_down: int | None = 1,
    step_up: int = 1,
) -> int | None:
    """The smallest n in [lo, hi] with `ok(n)`, or None if `ok(hi)` is False (or the range is empty).

    `ok` must be monotone (False below some n, True from it on); `lo − 1` is taken as False without a call.
    From `start` (clamped to [lo, hi]; default `lo`): if it is ok, gallop down by `step_down`, doubling,
    until a miss — or, with `step_down=None`, bisect straight down to `lo` (a start known to be close);
    if not, gallop up by `step_up`, doubling, until a hit or `hi`. Then bisect between the last miss and
    the last hit. Steps below 1 count as 1.
    """
    if lo > hi:
        return None
    r = min(hi, max(lo if start is None else start, lo))
    bad = lo - 1  # the largest n known (or taken) to miss
    if ok(r):
        good = r  # the smallest n known to be ok
        if step_down is not None:
            step = max(1, step_down)
            while good - 1 > bad:
                probe = max(bad + 1, good - step)
                if not ok(probe):
                    bad = probe
                    break
                good, step = probe, step * 2
    else:
        bad, step = r, max(1, step_up)
        while True:
            if bad >= hi:
                return None
            probe = min(hi, bad + step)
            if ok(probe):
                good = probe
                break
            bad, step = probe, step * 2
    while good - bad > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
