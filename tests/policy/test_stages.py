"""`decide`'s stages one at a time (`poolpilot.policy.decide._Tick`): each takes the earlier stages'
records and returns its own, so a rule can be checked without driving a whole tick to it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.policy.conftest import batching, make_spec
from tests.policy.test_decide import NOW, ONE_CONFIG, settled_state, sig

from poolpilot.api.types import InferencePoolSpec
from poolpilot.policy import PolicyParams, PoolState, Signals
from poolpilot.policy.decide import _Tick
from poolpilot.policy.model import prior_model, with_spec_prior
from poolpilot.policy.types import HistoryEntry

RANGES = {
    "batching": {"maxQueueDelayMicroseconds": {"min": 0, "max": 8000}, "instanceCount": {"min": 1, "max": 2}}
}


def tick(spec: InferencePoolSpec, state: PoolState, signals: Signals, **kw: Any) -> _Tick:
    """A tick built as `decide` builds it; its stages are then called by hand."""
    params = with_spec_prior(spec, kw.pop("params", PolicyParams()))
    model = state.latency_model or prior_model(params)
    return _Tick(spec, state, signals, NOW, kw.pop("node_pool", None), params, model, kw.pop("paid", None))


def test_search_brings_a_running_setting_back_inside_the_spec_bounds() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, **RANGES)
    t = tick(spec, settled_state(10, batching(20_000, 3)), sig(400, 110, ready=10))
    s = t.search(400.0)
    assert s.out_of_bounds and (s.cur_d, s.cur_k) == (8000, 2)
    assert s.cand_cur.max_queue_delay_us == 8000 and s.cand_cur.instance_count == 2
    assert s.cand_best.feasible and s.cand_best.replicas <= s.cand_cur.replicas


def test_guard_steps_in_proportion_to_the_breach_at_most_doubling() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, **ONE_CONFIG)
    state = settled_state(10, batching(0))
    # 150 ms objective; a mean queue above it, so the model's "more would not help" does not apply.
    mild = tick(spec, state, sig(400, 270, ready=10, queue_time_us=160_000.0))
    g = mild.guard_stage(mild.search(400.0), 400.0)
    assert g.breach and g.ratio == 270 / 150 and g.r_guard == 18  # ceil(10 x 1.8)
    harsh = tick(spec, state, sig(400, 900, ready=10, queue_time_us=500_000.0))
    g = harsh.guard_stage(harsh.search(400.0), 400.0)
    assert g.breach and g.r_guard == 2 * 10  # `guard_max_step_ratio` 2, whatever the breach
    calm = tick(spec, state, sig(400, 80, ready=10))
    g = calm.guard_stage(calm.search(400.0), 400.0)
    assert not g.breach and g.r_guard == 0 and not g.lost


def test_guard_counts_capacity_lost_only_after_the_grace_time() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, **ONE_CONFIG)
    grace_s = PolicyParams().lost_capacity_grace_s
    for since_s, lost in ((grace_s / 2, False), (grace_s + 15, True)):
        state = settled_state(10, batching(0), last_scale_change_s=NOW - since_s)
        t = tick(spec, state, sig(400, 80, ready=7))
        g = t.guard_stage(t.search(400.0), 400.0)
        assert g.lost is lost
        assert any(r.startswith("lost capacity: 7/10 replicas ready") for r in t.reasons) is lost


def _gate(spec: InferencePoolSpec, state: PoolState, signals: Signals) -> Any:
    t = tick(spec, state, signals)
    lam = signals.request_rate_per_s
    s = t.search(lam)
    g = t.guard_stage(s, lam)
    f = t.forced_stage(s, g, oom=False)
    return t.scale_in_gate(s, g, f, lam)


def test_scale_in_gate_opens_only_for_a_stable_real_share_of_the_fleet_without_a_breach() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, **ONE_CONFIG)
    surplus = settled_state(40, batching(0), need=4)
    gate = _gate(spec, surplus, sig(100, 60, ready=40))
    assert gate.go and gate.stable_target < 40 and gate.covered
    # The same surplus in a breach: no scale-in, whatever the plan says.
    assert not _gate(spec, surplus, sig(100, 200, ready=40, queue_time_us=40_000.0)).go
    # A recommendation of 40 within the stabilisation window holds the fleet.
    recent = replace(surplus, history=(*surplus.history[:-1], replace(surplus.history[-1], replicas=40)))
    gate = _gate(spec, recent, sig(100, 60, ready=40))
    assert not gate.go and gate.window_max == 40
    # Less than the scale-in tolerance (10 %) away: not worth a change.
    gate = _gate(spec, settled_state(40, batching(0), need=37), sig(100, 60, ready=40))
    assert gate.within_tolerance and gate.stable_target == 37 and gate.min_step == 4 and not gate.go


def test_a_node_bought_on_the_forecast_alone_is_asked_for_two_ticks_running() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, **ONE_CONFIG)
    prev = HistoryEntry(time_s=NOW - 15, replicas=10, rate_per_s=400.0, replicas_ahead=12)
    state = replace(settled_state(10, batching(0)), history=(prev,))
    t = tick(spec, state, sig(400, 80, ready=10))
    g = t.guard_stage(t.search(400.0), 400.0)
    assert t.confirm_ahead(16, 10, g) == 12  # the previous tick asked for 12 ahead: no more yet
    assert t.confirm_ahead(11, 10, g) == 11
    breach = tick(spec, state, sig(400, 200, ready=10, queue_time_us=40_000.0))
    g = breach.guard_stage(breach.search(400.0), 400.0)
    assert g.breach and breach.confirm_ahead(16, 10, g) == 16  # a measured breach does not wait


def test_recommend_mode_acts_on_nothing_and_says_what_it_would_do() -> None:
    spec = make_spec(replicas={"min": 1, "max": 64}, mode="Recommend", **ONE_CONFIG)
    t = tick(spec, settled_state(10, batching(0)), sig(400, 80, ready=10))
    assert t.actions(14, True) == ()
    assert t.reasons[0] == "Recommend mode: would scale and batching; nothing applied"
    auto = tick(make_spec(**ONE_CONFIG), settled_state(10, batching(0)), sig(400, 80, ready=10))
    assert auto.actions(10, False) == () and auto.actions(12, False) == ("scale",)
