"""The oracle is a lower bound: its search is exact, it meets the objective, nothing compliant is cheaper."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np
import pytest

from poolpilot.loads import Trace, synthetic
from poolpilot.sim.baselines import BASELINES
from poolpilot.sim.controllers import FixedController
from poolpilot.sim.engine import default_batching
from poolpilot.sim.oracle import evaluate_fleet, first_minute_need, oracle_grid, run_oracle
from poolpilot.sim.params import SimParams
from poolpilot.sim.run import Result, prepare_params, simulate

# One GPU per node, so billed GPU-hours equal replica-hours and the comparison is not hidden by packing.
PARAMS = SimParams(gpus_per_node=1, max_nodes=64, max_replicas=64)


def small_step_load(seconds: float = 300.0) -> Trace:
    return synthetic("step", duration_s=seconds, rate_scale=6.0, seed=3)


def _fixed(replicas: int, params: SimParams) -> FixedController:
    return FixedController(replicas, name=f"fixed-{replicas}")


@pytest.fixture(scope="module")
def scenario() -> tuple[Trace, SimParams, Result]:
    trace = small_step_load()
    params = prepare_params(trace, PARAMS)
    return trace, params, run_oracle(trace, params)


def test_oracle_meets_the_objective_in_every_window(scenario: tuple[Trace, SimParams, Result]) -> None:
    trace, params, oracle = scenario
    assert oracle.policy == "oracle"
    assert oracle.requests == len(trace)
    assert oracle.windows == math.ceil(trace.duration_s / 60)
    assert oracle.slo_attainment_windows == 1.0
    p99s = [v for v in oracle.series["p99_ms"] if math.isfinite(v)]
    assert len(p99s) == oracle.windows
    assert max(p99s) <= params.slo_ms
    # More load (the step's middle third) needs more replicas than the quiet first minute.
    assert max(oracle.series["replicas"]) > oracle.series["replicas"][0]


def test_nothing_that_meets_every_window_uses_fewer_gpu_hours(
    scenario: tuple[Trace, SimParams, Result],
) -> None:
    trace, params, oracle = scenario
    runs = [simulate(trace, factory, params) for factory in BASELINES.values()]
    peak = oracle.peak_replicas
    for n in (peak, peak + 2):
        runs.append(simulate(trace, functools.partial(_fixed, n), params))
    compliant = [r for r in runs if r.slo_attainment_windows == 1.0]
    assert compliant, "at least the generously sized fixed fleet must meet every window"
    for r in compliant:
        assert r.gpu_hours >= oracle.gpu_hours - 1e-9, f"{r.policy} beat the lower bound"
    # The bound is strictly lower than a fleet sized for the peak all the time (the load varies).
    fixed_peak = next(r for r in runs if r.policy == f"fixed-{peak + 2}")
    assert oracle.gpu_hours < fixed_peak.gpu_hours


def test_search_finds_the_same_minimum_as_brute_force() -> None:
    trace = synthetic("flash", duration_s=60.0, rate_scale=8.0, seed=5)
    params = prepare_params(trace, PARAMS)
    oracle = run_oracle(trace, params)
    assert oracle.windows == 1
    best = None
    for cfg in oracle_grid(params):
        for r in range(1, 30):
            ev = evaluate_fleet(
                trace.arrival_s, trace.context_tokens, trace.generated_tokens, 60.0, r, cfg, params
            )
            if ev.meets(params.slo_ms):
                best = r if best is None else min(best, r)
                break
    assert best is not None
    assert oracle.series["replicas"][0] == best


def test_an_impossible_objective_is_reported_as_missed_not_hidden() -> None:
    # The batch-latency floor (50 ms) is above a 40 ms objective: no fleet can meet it.
    trace = synthetic("step", duration_s=120.0, rate_scale=1.0, seed=1)
    params = prepare_params(trace, SimParams(slo_ms=40.0, max_replicas=3))
    oracle = run_oracle(trace, params)
    assert oracle.slo_attainment_windows == 0.0
    assert oracle.series["replicas"] == [3.0, 3.0]


def test_evaluate_fleet_serves_every_request_once() -> None:
    params = SimParams()
    rng = np.random.default_rng(0)
    t = np.sort(rng.random(500) * 60.0)
    tokens = np.full(500, 500, dtype=np.int64)
    ev = evaluate_fleet(t, tokens, tokens, 60.0, 2, default_batching(params), params)
    assert len(ev.latency_ms) == 500
    assert bool(np.all(np.isfinite(ev.latency_ms)))
    # Nobody is faster than a batch of one on the curve.
    assert float(ev.latency_ms.min()) >= params.curve_ms(1) - 1e-9


@pytest.mark.parametrize("overhead_ms", [0.0, 40.0])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 6])
def test_a_verdict_only_evaluation_gives_the_full_runs_verdict(replicas: int, overhead_ms: float) -> None:
    """The early stop (`miss_limit`) decides only what the full run would: a miss stops, a meet runs out.

    With a serving overhead the stop counts it too (a request is late once finish + overhead is)."""
    trace = synthetic("flash", duration_s=60.0, rate_scale=8.0, seed=5)
    params = replace(prepare_params(trace, PARAMS), request_overhead_ms=overhead_ms)
    cfg = default_batching(params)
    args = (trace.arrival_s, trace.context_tokens, trace.generated_tokens, 60.0, replicas, cfg, params)
    full = evaluate_fleet(*args)
    quick = evaluate_fleet(*args, verdict_only=True)
    assert quick.meets(params.slo_ms) == full.meets(params.slo_ms)
    if full.meets(params.slo_ms):
        assert quick.complete and quick.p99_ms == full.p99_ms
        assert np.array_equal(quick.latency_ms, full.latency_ms)
    else:
        assert not quick.complete and quick.p99_ms == math.inf
        assert quick.simulated_requests <= full.simulated_requests == len(trace)


def test_first_minute_need_is_the_fewest_replicas_meeting_the_first_minute() -> None:
    trace = synthetic("step", duration_s=180.0, rate_scale=6.0, seed=3)
    params = prepare_params(trace, PARAMS)
    need = first_minute_need(trace, params)
    assert need is not None
    first = trace.arrival_s < 60.0
    cfg = default_batching(params)

    def meets(r: int) -> bool:
        return evaluate_fleet(
            trace.arrival_s[first],
            trace.context_tokens[first],
            trace.generated_tokens[first],
            60.0,
            r,
            cfg,
            params,
        ).meets(params.slo_ms)

    assert meets(need)
    assert need == params.min_replicas or not meets(need - 1)
    # An objective below the batch-latency floor: no fleet meets it.
    assert first_minute_need(trace, replace(params, slo_ms=40.0, max_replicas=3)) is None
