"""The cheapest (replicas, queue delay, instances) that meets the objective: a small exhaustive search.

Pure. For each candidate (delay, instances) the fewest replicas that meet the corrected p99 objective
and the utilisation cap is found by bisection (the estimate rises with per-replica load), then the
cheapest candidate wins; ties go to the running configuration (no reload), then to the lowest p99.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from poolpilot.policy.model import arrival_cv2, core, corrected, curve_level, instance_offset_scale, z_score
from poolpilot.policy.params import PolicyParams
from poolpilot.policy.types import CurvePoint, LatencyModel


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (queue delay, instance count) setting with the replicas it needs."""

    max_queue_delay_us: int
    instance_count: int
    replicas: int
    p99_ms: float  # corrected prediction at `replicas`
    utilization: float
    feasible: bool  # meets the objective and the utilisation cap within replicas.max
    # The model's count when the pool's own measurements showed fewer meeting the objective
    # (`measured_replicas`); None when `replicas` is the model's.
    modelled_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """Everything the search needs, fixed for one tick."""

    model: LatencyModel
    rate_per_s: float  # inferences/s for the whole pool
    items_per_request: float
    max_batch_size: int
    quantile: float
    objective_ms: float  # target x (1 - margin)
    max_utilization: float
    min_replicas: int
    max_replicas: int
    params: PolicyParams
    running_instances: int = 1  # the instance count the model's additive tail was measured at
    running_delay_us: int = -1  # the running queue delay (-1: none), where `measured` applies
    measured: tuple[CurvePoint, ...] = ()  # `LatencyModel.p99_curve` of the running setting
    # Extra demand the measurement must also have covered before it lowers the model's answer (the plan
    # sizes for a forecast that may be low: a measurement at the edge of its data must hold 10 % beyond
    # it, as a scale-in must); 0 for the checks capacity is given back on, whose demand includes it.
    evidence_headroom: float = 0.0


def predict(prob: Problem, replicas: int, delay_us: int, instances: int) -> tuple[float, float]:
    """Corrected p99 (ms) and utilisation of the pool with `replicas` replicas sharing the load."""
    if replicas <= 0:
        return (math.inf, math.inf) if prob.rate_per_s > 0 else (math.nan, 0.0)
    m = prob.model
    p99, _, _, _, util, _ = core(
        m.a_ms,
        m.b_ms,
        prob.rate_per_s / replicas / 1000.0,
        delay_us / 1000.0,
        instances,
        prob.max_batch_size,
        z_score(prob.quantile),
        1.0 - prob.quantile,
        prob.items_per_request,
        arrival_cv2(prob.params, replicas),
        prob.params.instance_slowdown,
        prob.params.wait_model == "renewal",
        m.spread_ms,
    )
    return corrected(m, p99, instance_offset_scale(instances, prob.running_instances, prob.params)), util


def _ok(prob: Problem, replicas: int, delay_us: int, instances: int) -> bool:
    p99, util = predict(prob, replicas, delay_us, instances)
    return p99 <= prob.objective_ms and util <= prob.max_utilization


def fewest_replicas(prob: Problem, delay_us: int, instances: int, *, hi: int | None = None) -> Candidate:
    """The fewest replicas meeting the objective at (delay, instances): the model's answer, or fewer where
    the running setting has been measured meeting it at as much load per replica (`measured_replicas`).

    `hi`, when given, is a replica count already known to meet the objective.
    """
    modelled = _fewest_modelled(prob, delay_us, instances, hi=hi)
    if not prob.measured or (delay_us, instances) != (prob.running_delay_us, prob.running_instances):
        return modelled
    demand = prob.rate_per_s * (1.0 + prob.evidence_headroom)
    measured = measured_replicas(prob.measured, demand, prob.objective_ms, prob.params)
    if measured is None:
        return modelled
    r = max(measured, prob.min_replicas)
    if r >= modelled.replicas:
        return modelled
    _, util = predict(prob, r, delay_us, instances)
    if util > prob.max_utilization:
        return modelled
    return Candidate(delay_us, instances, r, prob.objective_ms, util, True, modelled.replicas)


def measured_replicas(
    curve: tuple[CurvePoint, ...], rate_per_s: float, objective_ms: float, params: PolicyParams
) -> int | None:
    """The fewest replicas the running setting has been measured meeting `objective_ms` with at this
    demand (None: no such evidence).

    A point is evidence for R replicas when R spreads the demand no thinner than it was (its load per
    replica at least R's), on no fewer replicas than it had (fewer replicas smooth a round-robin
    load less), with at least `curve_min_readings` readings, when its upper reading (`curve_level` at
    `curve_z`) meets the objective, and when no point below it in load misses on average: a replica
    never gets faster with more load, so a miss measured at less load vetoes a meet measured at more.
    """
    if rate_per_s <= 0:
        return None
    best: int | None = None
    worst_below = -math.inf
    for point in curve:
        worst_below = max(worst_below, point.p99_mean_ms)
        if worst_below > objective_ms:
            break
        if point.readings >= params.curve_min_readings and curve_level(point, params.curve_z) <= objective_ms:
            r = max(math.ceil(rate_per_s / point.rate_per_replica_per_s - 1e-9), point.replicas)
            best = r if best is None else min(best, r)
    return best


@dataclass(frozen=True, slots=True)
class MeasuredLine:
    """The running setting's p99 as a line in load per replica, through its two lightest measured points:
    `p99_ms(u) = floor_ms + slope_ms * u` (slope in ms per request/s of load per replica)."""

    floor_ms: float  # the line at no load: what more replicas approach
    slope_ms: float
    lightest_per_s: float  # the lightest load per replica measured

    def load_per_replica_at(self, p99_ms: float) -> float:
        """Load per replica at which the line reaches `p99_ms` (0 when at or below its floor)."""
        return max(0.0, (p99_ms - self.floor_ms) / self.slope_ms)

    def replicas_for(
        self, rate_per_s: float, target_ms: float, objective_ms: float, min_gain_share: float
    ) -> int:
        """Replicas the line says meet `target_ms` at `rate_per_s`, and more towards `objective_ms` while
        each lowers the p99 by `min_gain_share` of it (at one demand the line is `floor + slope·rate / R`:
        one replica more buys `slope·rate / R²`). Call only with the floor below the target."""
        u_target = self.load_per_replica_at(target_ms)
        u_objective = self.load_per_replica_at(objective_ms)
        at_target = math.ceil(rate_per_s / u_target - 1e-9)
        at_objective = math.ceil(rate_per_s / u_objective - 1e-9) if u_objective > 0 else math.inf
        worth = math.ceil(math.sqrt(self.slope_ms * rate_per_s / (min_gain_share * objective_ms)))
        return max(at_target, int(min(at_objective, worth)))


def measured_line(
    curve: tuple[CurvePoint, ...], target_ms: float, params: PolicyParams
) -> MeasuredLine | None:
    """The line to extrapolate when no measured point meets `target_ms` (None otherwise, or unless the two
    lightest counted points rise with load by more than `curve_z` spreads of their readings).

    When a replica's gap between requests is under one execution, a request mostly waits for the one
    running: the p99 is about two executions and falls only as the share of requests that find the replica
    busy falls, linearly in load per replica (`floor + c / replicas` at one demand). The model, which
    learns the gap as an additive tail, then asks for one replica more per step and is disappointed each
    time (a property test found 27 moves in three hours). The pool's own points say how far the target is.
    Below the lightest point a line through the two lightest is optimistic where the curve is convex
    (queueing); where it flattens towards a floor (long requests' execution) it is not, so the caller
    trusts it only a short way below its points (`_Tick.measured_step`).
    """
    counted = [c for c in curve if c.readings >= params.curve_min_readings]
    if len(counted) < 2 or any(c.p99_mean_ms <= target_ms for c in counted):
        return None
    a, b = sorted(counted, key=lambda c: c.rate_per_replica_per_s)[:2]
    du = b.rate_per_replica_per_s - a.rate_per_replica_per_s
    # The rise between them must be measured, not a draw: more than `curve_z` spreads of the readings.
    spread_ms = params.curve_z * math.sqrt(max(a.p99_var_ms2, 0.0) + max(b.p99_var_ms2, 0.0))
    if not (du > 0 and b.p99_mean_ms - a.p99_mean_ms > spread_ms):
        return None
    slope = (b.p99_mean_ms - a.p99_mean_ms) / du
    return MeasuredLine(a.p99_mean_ms - slope * a.rate_per_replica_per_s, slope, a.rate_per_replica_per_s)


def _fewest_modelled(prob: Problem, delay_us: int, instances: int, *, hi: int | None) -> Candidate:
    """Bisection on replicas: the model's estimate is monotone in the per-replica rate."""
    lo = max(prob.min_replicas, 1 if prob.rate_per_s > 0 else 0)
    known_ok = hi is not None
    hi = max(prob.max_replicas if hi is None else hi, lo)
    if prob.rate_per_s <= 0:
        r = prob.min_replicas
        p99, util = predict(prob, r, delay_us, instances) if r > 0 else (math.nan, 0.0)
        return Candidate(delay_us, instances, r, p99, util, True)
    if not known_ok and not _ok(prob, hi, delay_us, instances):
        # Unreachable: stop where one more replica buys less than 1 % of the objective (a flat
        # latency floor is not a capacity problem), within the utilisation cap.
        step_ms = prob.params.min_gain_share * prob.objective_ms
        while lo < hi:
            mid = (lo + hi) // 2
            p_mid, u_mid = predict(prob, mid, delay_us, instances)
            p_next, _ = predict(prob, mid + 1, delay_us, instances)
            if u_mid <= prob.max_utilization and p_mid - p_next < step_ms:
                hi = mid
            else:
                lo = mid + 1
        p99, util = predict(prob, lo, delay_us, instances)
        return Candidate(delay_us, instances, lo, p99, util, False)
    while lo < hi:
        mid = (lo + hi) // 2
        if _ok(prob, mid, delay_us, instances):
            hi = mid
        else:
            lo = mid + 1
    p99, util = predict(prob, lo, delay_us, instances)
    return Candidate(delay_us, instances, lo, p99, util, True)


def delay_candidates(lo_us: int, hi_us: int, current_us: int | None, grid: Iterable[int]) -> list[int]:
    """Grid points within the spec's bounds, the bounds themselves and the running delay."""
    out = {lo_us, hi_us}
    out.update(d for d in grid if lo_us <= d <= hi_us)
    if current_us is not None and lo_us <= current_us <= hi_us:
        out.add(current_us)
    return sorted(out)


def instance_candidates(lo: int, hi: int, limit: int) -> list[int]:
    return list(range(lo, min(hi, lo + limit - 1) + 1))


def cheapest(
    prob: Problem,
    delays_us: Sequence[int],
    instances: Sequence[int],
    current: tuple[int, int] | None,
    *,
    exclude: tuple[tuple[int, int], ...] = (),
) -> Candidate:
    """Fewest replicas over all candidates; ties: the running (delay, instances), then lowest p99.

    When nothing is feasible within replicas.max, the lowest predicted p99 at replicas.max wins.
    `exclude`: (delay, instances) settings not to propose (the running one is always evaluated).
    """
    order = [(d, k) for k in instances for d in delays_us if (d, k) == current or (d, k) not in exclude]
    if current is not None and current in order:
        order.remove(current)
        order.insert(0, current)
    best = fewest_replicas(prob, *order[0])
    lo = max(prob.min_replicas, 1 if prob.rate_per_s > 0 else 0)
    for d, k in order[1:]:
        if best.feasible and prob.rate_per_s > 0:
            # Prune: a candidate matters only if it meets the objective with fewer replicas, or
            # with as many and a lower p99 (2 evaluations instead of a full bisection).
            if best.replicas > lo and _ok(prob, best.replicas - 1, d, k):
                c = fewest_replicas(prob, d, k, hi=best.replicas - 1)
            else:
                p99, util = predict(prob, best.replicas, d, k)
                ok = p99 <= prob.objective_ms and util <= prob.max_utilization
                c = Candidate(d, k, best.replicas, p99, util, ok)
        else:
            c = fewest_replicas(prob, d, k)
        if _better(c, best, current):
            best = c
    return best


def _better(c: Candidate, best: Candidate, current: tuple[int, int] | None) -> bool:
    if c.feasible != best.feasible:
        return c.feasible
    if not c.feasible:
        return c.p99_ms < best.p99_ms
    if c.replicas != best.replicas:
        return c.replicas < best.replicas
    c_cur = (c.max_queue_delay_us, c.instance_count) == current
    b_cur = (best.max_queue_delay_us, best.instance_count) == current
    if c_cur != b_cur:
        return c_cur
    return c.p99_ms < best.p99_ms
