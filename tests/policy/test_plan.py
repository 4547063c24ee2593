"""The plan's evidence rule: replicas the pool has been measured meeting the objective with."""

from __future__ import annotations

from poolpilot.policy import PolicyParams
from poolpilot.policy.plan import measured_replicas
from poolpilot.policy.types import CurvePoint

PARAMS = PolicyParams()


def _point(rate: float, mean: float, *, sd: float = 0.0, replicas: int = 8, readings: int = 8) -> CurvePoint:
    return CurvePoint(rate, mean, sd * sd, 0.0, replicas, readings)


def test_a_meet_at_as_much_load_per_replica_is_evidence_for_as_few_replicas() -> None:
    curve = (_point(50.0, 150.0), _point(100.0, 180.0))
    assert measured_replicas(curve, 800.0, 200.0, PARAMS) == 8  # 100/s each: measured meeting
    assert measured_replicas(curve, 801.0, 200.0, PARAMS) == 9  # a little more load needs one more
    assert measured_replicas(curve, 0.0, 200.0, PARAMS) is None
    # Beyond every measurement there is none: 50/s each was the most seen on...
    assert measured_replicas((_point(50.0, 150.0),), 800.0, 200.0, PARAMS) == 16


def test_evidence_needs_readings_an_upper_reading_within_the_objective_and_no_miss_below_it() -> None:
    assert measured_replicas((_point(100.0, 180.0, readings=1),), 800.0, 200.0, PARAMS) is None
    # 180 ms on average, but ±15 ms: two standard deviations above, the windows miss 200 ms.
    assert measured_replicas((_point(100.0, 180.0, sd=15.0),), 800.0, 200.0, PARAMS) is None
    # A miss on average at less load per replica: the meet at more load was a lucky draw.
    assert measured_replicas((_point(50.0, 210.0), _point(100.0, 180.0)), 800.0, 200.0, PARAMS) is None
    # Measured on 12 replicas, it says nothing about 8 (fewer replicas smooth a round-robin load less).
    assert measured_replicas((_point(100.0, 180.0, replicas=12),), 800.0, 200.0, PARAMS) == 12
