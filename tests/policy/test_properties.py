"""Property tests (hypothesis): what must hold for every input, not just the hand-picked ones."""

from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from poolpilot.api.types import Mode
from poolpilot.policy import HistoryEntry, LatencyModel, PoolState, Signals, decide
from poolpilot.policy.types import BatchingConfig

FAST = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # reproducible in CI, as SLOW below
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# Closed-loop runs are long: no shrinking (a failing example is printed as drawn), and a fixed
# (derandomized) set of examples so CI is reproducible; explore more with
# `pytest --hypothesis-seed=random tests/policy/test_properties.py -k steady`.
SLOW = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

finite_or_nan = st.one_of(st.just(math.nan), st.floats(min_value=0, max_value=1e5, allow_nan=False))


@st.composite
def specs(draw: st.DrawFn, kit: SimpleNamespace, mode: str | None = None) -> object:
    r_min = draw(st.integers(0, 8))
    r_max = draw(st.integers(max(r_min, 1), 40))
    d_min = draw(st.sampled_from([0, 0, 500, 2_000]))
    d_max = draw(st.sampled_from([d_min, 10_000, 50_000, 100_000]))
    k_min = draw(st.integers(1, 2))
    k_max = draw(st.integers(k_min, 3))
    return kit.make_spec(
        mode=mode or draw(st.sampled_from(["Auto", "Recommend", "Off"])),
        model={"maxBatchSize": draw(st.sampled_from([1, 8, 32, 64, 128]))},
        slo={
            "latencyTargetMs": draw(st.sampled_from([50.0, 100.0, 150.0, 400.0])),
            "marginRatio": draw(st.sampled_from([0.0, 0.1, 0.15, 0.3])),
        },
        replicas={
            "min": r_min,
            "max": r_max,
            "scaleDownStabilizationSeconds": draw(st.sampled_from([0, 300])),
        },
        batching={
            "maxQueueDelayMicroseconds": {"min": d_min, "max": d_max},
            "instanceCount": {"min": k_min, "max": k_max},
            "minSecondsBetweenChanges": draw(st.sampled_from([0, 120])),
        },
    )


@st.composite
def states(draw: st.DrawFn, spec: object) -> PoolState:
    now = 10_000.0
    history = tuple(
        HistoryEntry(time_s=now - 15 * i, replicas=draw(st.integers(0, 50)), rate_per_s=draw(finite_or_nan))
        for i in range(draw(st.integers(0, 30)), 0, -1)
    )
    b = draw(
        st.one_of(
            st.none(),
            st.builds(
                BatchingConfig,
                max_queue_delay_us=st.integers(0, 200_000),
                max_batch_size=st.integers(1, 256),
                preferred_batch_sizes=st.just(()),
                instance_count=st.integers(1, 4),
            ),
        )
    )
    model = draw(
        st.one_of(
            st.none(),
            st.builds(
                LatencyModel,
                a_ms=st.floats(0, 500),
                b_ms=st.floats(0.001, 50),
                correction=st.floats(0.7, 3.0),
            ),
        )
    )
    t_or_none = st.one_of(st.none(), st.floats(now - 2_000, now))
    return PoolState(
        replicas=draw(st.integers(0, 60)),
        batching=b,
        latency_model=model,
        history=history,
        last_batching_change_s=draw(t_or_none),
        last_scale_change_s=draw(t_or_none),
        last_scale_up_s=draw(t_or_none),
    )


@st.composite
def signals(draw: st.DrawFn) -> Signals:
    return Signals(
        p99_ms=draw(finite_or_nan),
        request_rate_per_s=draw(finite_or_nan),
        inference_rate_per_s=draw(finite_or_nan),
        gpu_utilization=draw(st.one_of(st.just(math.nan), st.floats(0, 1))),
        queue_time_us=draw(finite_or_nan),
        avg_batch_size=draw(st.one_of(st.just(math.nan), st.floats(0, 256))),
        compute_us_per_exec=draw(finite_or_nan),
        failure_rate_by_reason=draw(
            st.dictionaries(st.sampled_from(["OOM", "BACKEND", "REJECTED"]), finite_or_nan)
        ),
        ready_replicas=draw(st.one_of(st.none(), st.integers(0, 60))),
        age_s=draw(st.sampled_from([0.0, 10.0, 30.0, 200.0, math.nan])),
    )


def _check_bounds(spec: object, d: object) -> None:
    assert spec.replicas.min <= d.replicas <= spec.replicas.max
    b = d.batching
    if d.batching_changed:
        lo, hi = (
            spec.batching.max_queue_delay_microseconds.min,
            spec.batching.max_queue_delay_microseconds.max,
        )
        assert lo <= b.max_queue_delay_us <= hi
        assert spec.batching.instance_count.min <= b.instance_count <= spec.batching.instance_count.max
        assert 1 <= b.max_batch_size <= spec.model.max_batch_size
        assert all(s <= b.max_batch_size for s in b.preferred_batch_sizes)


@FAST
@given(data=st.data())
def test_bounds_always_respected(kit: SimpleNamespace, data: st.DataObject) -> None:
    spec = data.draw(specs(kit))
    state = data.draw(states(spec))
    d = decide(spec, state, data.draw(signals()), 10_000.0)
    _check_bounds(spec, d)
    # Whatever the policy recommends (even unchanged) must also be applicable as is.
    if not d.hold and spec.mode != Mode.OFF:
        lo, hi = (
            spec.batching.max_queue_delay_microseconds.min,
            spec.batching.max_queue_delay_microseconds.max,
        )
        assert lo <= d.batching.max_queue_delay_us <= hi
        assert 1 <= d.batching.max_batch_size <= spec.model.max_batch_size
    assert d.reasons, "every decision explains itself"
    assert len(d.history) <= 256


@FAST
@given(data=st.data())
def test_never_batching_change_and_scale_in_in_one_tick(kit: SimpleNamespace, data: st.DataObject) -> None:
    spec = data.draw(specs(kit, mode="Auto"))
    state = data.draw(states(spec))
    d = decide(spec, state, data.draw(signals()), 10_000.0)
    in_bounds = spec.replicas.min <= state.replicas <= spec.replicas.max
    if in_bounds and "batching" in d.actions:
        assert d.replicas >= state.replicas


@FAST
@given(data=st.data())
def test_recommend_never_acts_and_off_never_acts(kit: SimpleNamespace, data: st.DataObject) -> None:
    spec = data.draw(specs(kit, mode=data.draw(st.sampled_from(["Recommend", "Off"]))))
    d = decide(spec, data.draw(states(spec)), data.draw(signals()), 10_000.0)
    assert d.actions == ()
    assert not d.acts
    if spec.mode == Mode.OFF:
        assert d.hold


@FAST
@given(data=st.data())
def test_missing_metrics_never_scale_in(kit: SimpleNamespace, data: st.DataObject) -> None:
    spec = data.draw(specs(kit, mode="Auto"))
    state = data.draw(states(spec))
    sig = data.draw(signals())
    which = data.draw(st.sampled_from(["rate", "p99", "stale", "age_nan"]))
    if which == "rate":
        sig = kit.with_signals(sig, request_rate_per_s=math.nan)
    elif which == "p99":
        sig = kit.with_signals(
            sig, p99_ms=math.nan, request_rate_per_s=data.draw(st.floats(1, 1e4)), age_s=1.0
        )
    elif which == "stale":
        sig = kit.with_signals(sig, age_s=spec.tick_seconds * 3 + data.draw(st.floats(1, 1e4)))
    else:
        sig = kit.with_signals(sig, age_s=math.nan)
    d = decide(spec, state, sig, 10_000.0)
    assert d.hold
    assert "batching" not in d.actions
    assert d.replicas >= min(state.replicas, spec.replicas.max)
    assert any("hold" in r for r in d.reasons)


@FAST
@given(data=st.data())
def test_more_load_never_fewer_replicas(kit: SimpleNamespace, data: st.DataObject) -> None:
    spec = data.draw(specs(kit, mode="Auto"))
    state = data.draw(states(spec))
    sig = data.draw(signals())
    sig = kit.with_signals(sig, age_s=1.0, p99_ms=data.draw(st.floats(1, 1e4)), inference_rate_per_s=math.nan)
    low = data.draw(st.floats(0, 5e4))
    high = low + data.draw(st.floats(0, 5e4))
    d_low = decide(spec, state, kit.with_signals(sig, request_rate_per_s=low), 10_000.0)
    d_high = decide(spec, state, kit.with_signals(sig, request_rate_per_s=high), 10_000.0)
    assert d_high.replicas >= d_low.replicas, (d_low.reasons, d_high.reasons)


@SLOW
# Counterexamples found before (each exposed a defect that is fixed; kept as explicit regressions):
# a peak correction whose decay never ended (late 9→8); a first-guess floor pinning 5 replicas where 2
# do; an infeasible delay kept over a feasible one at more replicas; an hourly 1↔2-instance cycle;
# anti-flap floor evidence from one batching setting kept after switching to another.
@example(rate=180.0, tail_factor=0.954502824896525, a_ms=64.78453646882514, b_ms=2.1240197053778154, start=12)
@example(rate=20.0, tail_factor=0.8655750364446099, a_ms=69.12696007440107, b_ms=2.28995193844157, start=4)
@example(rate=702.8571524070695, tail_factor=1.1658902124081525, a_ms=69.0, b_ms=1.7422576506964074, start=12)
@example(rate=2521.0, tail_factor=0.9, a_ms=66.3, b_ms=2.84, start=10)
@example(rate=1900.0, tail_factor=0.869, a_ms=43.58, b_ms=1.72, start=2)  # floor kept across a reload
@given(
    rate=st.floats(20, 3_000),
    tail_factor=st.floats(0.85, 1.3),
    a_ms=st.floats(20, 70),
    b_ms=st.floats(1.2, 3.5),  # the prior slope (2.19) within a factor of ~2 of the truth
    start=st.integers(1, 20),
)
def test_steady_load_converges_then_holds_for_an_hour(
    kit: SimpleNamespace, rate: float, tail_factor: float, a_ms: float, b_ms: float, start: int
) -> None:
    spec = kit.make_spec(replicas={"min": 1, "max": 64})
    plant = kit.Plant(a_ms=a_ms, b_ms=b_ms, tail_factor=tail_factor)

    def load(t: float) -> float:  # steady, with a deterministic ±3 % ripple
        return rate * (1 + 0.03 * math.sin(t / 97.0))

    # The policy starts from its prior (50 + 2.19·batch ms), up to 2.5x off the plant's curve, and
    # learns it from the batch sizes it happens to see: it gets two hours to settle, then must hold
    # for a full hour, and must not have flapped on the way (a handful of moves, not dozens).
    run = kit.run_loop(spec, plant, load, duration_s=3 * 3600, state=PoolState(replicas=start, batching=None))
    last_hour = [(t, d, s) for t, d, s in run.decisions if t >= 2 * 3600]
    changes = [(t, d.actions, d.reasons) for t, d, _ in last_hour if d.actions]
    assert changes == [], changes[:3]
    assert sum(1 for _, d, _ in run.decisions if d.actions) <= 12
    # Converged to a point that meets the objective, and not far above what the plant truly needs:
    # the fewest replicas whose TRUE p99 meets target x (1 - margin) at the ripple's peak with the best
    # batching the spec allows, plus the
    # policy's own hysteresis (10 % more demand for scale-in, a 10 % scale-in tolerance).
    _, last, sig = run.decisions[-1]
    objective_ms = spec.slo.latency_target_ms * (1 - spec.slo.margin_ratio)
    true_need = kit.plant_true_need(plant, rate * 1.03, objective_ms)
    if true_need is None:
        # No fleet within replicas.max meets the objective (this plant's batcher never idles below
        # 64 replicas): the policy must say so rather than pretend.
        assert any("objective unreachable" in r for r in last.reasons), last.reasons
        return
    assert sig.p99_ms <= spec.slo.latency_target_ms, last.reasons
    assert last.replicas <= math.ceil(1.25 * true_need) + 1, (true_need, last.reasons)


def test_steady_load_at_the_wait_cliff_converges_in_a_handful_of_moves(kit: SimpleNamespace) -> None:
    """A counterexample Hypothesis drew for the property above (it draws floats partly from constants in the
    loaded modules, so which examples it tries moves with unrelated code): 900/s on a plant 30 % slower in
    the tail than its curve took 27 moves in three hours, 18 -> 54 replicas one or two at a time, because
    the model learnt the wait for the running execution as a flat tail. The guard now extrapolates the
    pool's measured points when none met the target (`plan.measured_line`): 9 moves, settled by 22 min."""
    spec = kit.make_spec(replicas={"min": 1, "max": 64})
    plant = kit.Plant(a_ms=55.11506694492662, b_ms=2.5516593646751957, tail_factor=1.2958143877096278)

    def load(t: float) -> float:
        return 900.0 * (1 + 0.03 * math.sin(t / 97.0))

    run = kit.run_loop(spec, plant, load, duration_s=3 * 3600, state=PoolState(replicas=14, batching=None))
    assert sum(1 for _, d, _ in run.decisions if d.actions) <= 12
    # ... then holds, meeting the target (as the property above asks of every steady load).
    assert not [(t, d.reasons) for t, d, _ in run.decisions if t >= 2 * 3600 and d.actions]
    _, last, sig = run.decisions[-1]
    assert sig.p99_ms <= spec.slo.latency_target_ms, last.reasons
