"""The fleet simulator: invariants a user would check, lifecycle lead times, billing, and signal lag."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from poolpilot.loads import Trace, fit_duration, load_azure_csv, scale_rate, synthetic
from poolpilot.policy.types import BatchingConfig
from poolpilot.sim.controllers import FixedController, PoolPilotController
from poolpilot.sim.engine import (
    OK,
    REJECTED_NO_REPLICA,
    REJECTED_QUEUE_FULL,
    REJECTED_TIMEOUT,
    FleetEngine,
    pod_summary_max_ms,
)
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Action, Observation
from poolpilot.sim.run import simulate
from poolpilot.sim.signals import (
    ROUTER_BUCKETS_MS,
    PromStore,
    ScrapeSample,
    histogram_quantile,
    router_buckets_ms,
)


def poisson_trace(rate_per_s: float, duration_s: float, seed: int = 1, tokens: int = 500) -> Trace:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate_per_s * duration_s)
    t = np.sort(rng.random(n) * duration_s)
    return Trace(
        arrival_s=t,
        context_tokens=np.full(n, tokens, dtype=np.int64),
        generated_tokens=np.zeros(n, dtype=np.int64),
        duration_s=duration_s,
        name="poisson",
        description=f"poisson {rate_per_s}/s",
    )


def batching(
    delay_us: int = 0, mbs: int = 64, queue_timeout_us: int | None = None, max_queue_size: int = 0
) -> BatchingConfig:
    return BatchingConfig(
        max_queue_delay_us=delay_us,
        max_batch_size=mbs,
        preferred_batch_sizes=(),
        instance_count=1,
        queue_timeout_us=queue_timeout_us,
        max_queue_size=max_queue_size,
    )


def run_fixed(trace: Trace, replicas: int, b: BatchingConfig, params: SimParams | None = None):  # type: ignore[no-untyped-def]
    params = params or SimParams(token_mode="none")
    return FleetEngine(trace, params, FixedController(replicas, b), initial_replicas=replicas).run()


def test_every_request_is_answered_exactly_once_under_overload() -> None:
    # 4 replicas (~340 req/s each at most) offered 3,000 req/s, with a queue timeout and a queue bound.
    trace = poisson_trace(3000.0, 120.0)
    out = run_fixed(trace, 4, batching(5_000, queue_timeout_us=200_000, max_queue_size=100))
    n = len(trace)
    assert out.dispatched_requests + out.rejected_requests == n
    assert not np.any(out.status < 0)
    assert np.sum(out.status == OK) == out.dispatched_requests
    assert np.sum(out.status == REJECTED_TIMEOUT) > 0
    assert np.sum(out.status == REJECTED_QUEUE_FULL) > 0
    # Completion never precedes arrival, and a rejection by timeout happens no earlier than the timeout.
    assert np.all(out.finish_s >= out.arrival_s)
    timed_out = out.status == REJECTED_TIMEOUT
    assert np.all(out.finish_s[timed_out] - out.arrival_s[timed_out] >= 0.2 - 1e-9)


def test_latency_is_at_least_one_batch_execution() -> None:
    params = SimParams(token_mode="max")
    trace = fit_duration(scale_rate(poisson_trace(5.0, 600.0, tokens=3000), 20, seed=2), 600)
    out = run_fixed(trace, 3, batching(2_000), params)
    ok = out.status == OK
    lat = out.latency_ms[ok]
    exec_ms = (out.finish_s[ok] - out.start_s[ok]) * 1000
    one = params.curve_ms(1)
    assert np.all(exec_ms >= one - 1e-6)
    assert np.all(lat >= exec_ms - 1e-6)
    # Long requests are real stragglers: 3,000 tokens add (3000 − 2048) · 10 ms / 1k to their batch.
    assert np.min(exec_ms) >= one + (3000 - 2048) * 0.01 - 1e-6


@pytest.mark.parametrize("delay_us", [0, 20_000])
def test_low_load_p99_is_one_execution_plus_the_delay(delay_us: int) -> None:
    params = SimParams(token_mode="none")
    trace = poisson_trace(0.2, 3600.0)  # 0.05 req/s per replica: almost never two requests together
    r = simulate(trace, lambda p: FixedController(4, batching(delay_us)), params)
    expected = params.curve_ms(1) + delay_us / 1000
    assert r.p99_ms == pytest.approx(expected, abs=1.0)
    assert r.slo_attainment_windows == 1.0
    assert r.rejected_requests == 0


def test_gpu_hours_of_a_fixed_fleet_are_nodes_times_time() -> None:
    params = SimParams(token_mode="none")
    trace = poisson_trace(50.0, 1800.0)
    r = simulate(trace, lambda p: FixedController(10, batching()), params)
    hours = 1800.0 / 3600.0
    assert r.gpu_hours == pytest.approx(2 * 8 * hours)  # 10 pods need 2 nodes of 8 GPUs
    assert r.replica_gpu_hours == pytest.approx(10 * hours)
    assert r.cost_usd == pytest.approx(2 * hours * params.price_per_node_hour_usd)
    served_tokens = 500 * (r.requests - r.rejected_requests)
    assert r.cost_per_1k_tokens_usd == pytest.approx(r.cost_usd / (served_tokens / 1000))
    assert 0 < r.mean_gpu_utilization < 1


@dataclass
class Scripted:
    """Acts at given times and records what it observed."""

    actions: dict[float, Action]
    name: str = "scripted"
    interval_s: float = 15.0
    initial_replicas: int = 2
    seen: list[Observation] = field(default_factory=list)

    def step(self, obs: Observation) -> Action:
        self.seen.append(obs)
        return self.actions.get(obs.now_s, Action())


def _first_time(series: dict[str, list[float]], key: str, pred) -> float:  # type: ignore[no-untyped-def]
    for t, v in zip(series["t_s"], series[key], strict=True):
        if pred(v):
            return t
    return math.inf


def test_pods_wait_for_nodes_then_for_model_load() -> None:
    params = SimParams(token_mode="none", control_phase_s=0.0)
    trace = poisson_trace(20.0, 1200.0)
    # t=60: 4 replicas fit on the first node (start + load 60 s). t=300: 12 replicas; 8 fit on the first
    # node (ready at 360 s), the other 4 wait for the second node (300 s) and then load (60 s).
    ctl = Scripted({60.0: Action(replicas=4), 300.0: Action(replicas=12, nodes=2)})
    out = FleetEngine(trace, params, ctl, initial_replicas=2).run()
    s = out.series
    assert _first_time(s, "ready_replicas", lambda v: v >= 4) == 120.0
    assert _first_time(s, "ready_replicas", lambda v: v >= 8) == 360.0
    assert _first_time(s, "ready_replicas", lambda v: v >= 9) == 660.0
    # The second node is billed from the request at 300 s, not from when it is ready.
    assert out.node_gpu_hours == pytest.approx((1200.0 + 900.0) * 8 / 3600.0)
    assert _first_time(s, "ready_nodes", lambda v: v >= 2) == 600.0
    assert max(s["ready_replicas"]) == 12


def test_batching_change_applies_after_the_background_reload() -> None:
    params = SimParams(token_mode="none", control_phase_s=0.0, reload_s=30.0)
    trace = poisson_trace(20.0, 600.0)
    ctl = Scripted({120.0: Action(batching=batching(10_000))})
    out = FleetEngine(trace, params, ctl, initial_replicas=2).run()
    assert _first_time(out.series, "max_queue_delay_us", lambda v: v == 10_000) == 150.0
    assert out.batching_changes == 1
    seen_at = {o.now_s: o.batching.max_queue_delay_us for o in ctl.seen}
    assert seen_at[135.0] == 0  # the old config keeps serving during the reload
    assert seen_at[150.0] == 10_000


def test_scale_in_drains_queued_requests_and_no_replica_means_503() -> None:
    params = SimParams(token_mode="none", control_phase_s=0.0, min_replicas=0)
    trace = poisson_trace(100.0, 300.0)
    ctl = Scripted({60.0: Action(replicas=1), 120.0: Action(replicas=0)}, initial_replicas=4)
    out = FleetEngine(trace, params, ctl, initial_replicas=4).run()
    assert out.dispatched_requests + out.rejected_requests == len(trace)
    after = out.arrival_s > 120.0
    assert np.all(out.status[after] == REJECTED_NO_REPLICA)
    assert np.all(out.status[out.arrival_s < 119.0] == OK)


def test_histogram_quantile_matches_prometheus_interpolation() -> None:
    bounds = (100.0, 200.0, 400.0)
    # 50 below 100, 40 in (100, 200], 10 in (200, 400], none above.
    cum = [50.0, 90.0, 100.0, 100.0]
    assert histogram_quantile(0.5, bounds, cum) == pytest.approx(100.0)
    assert histogram_quantile(0.7, bounds, cum) == pytest.approx(150.0)
    assert histogram_quantile(0.95, bounds, cum) == pytest.approx(300.0)
    assert histogram_quantile(0.99, bounds, [0.0, 0.0, 0.0, 5.0]) == 400.0  # +Inf bucket ⇒ largest bound
    assert math.isnan(histogram_quantile(0.99, bounds, [0.0, 0.0, 0.0, 0.0]))


def _sample(t: float, success: float, hist_total: float) -> ScrapeSample:
    hist = tuple([0.0] * (len(ROUTER_BUCKETS_MS) - 1) + [hist_total, hist_total])
    return ScrapeSample(
        t_s=t, success=success, rejected=0.0, queue_full=0.0, no_replica=0.0, inferences=success,
        execs=success / 2, request_us=0.0, queue_us=0.0, compute_us=0.0, tokens=0.0, pending=3.0,
        gpu_util=0.5, ready_replicas=2, hist=hist,
    )  # fmt: skip


def test_signals_use_only_samples_in_the_window_and_report_their_age() -> None:
    store = PromStore(window_s=60.0)
    assert store.signals(10.0).age_s == math.inf
    for k in range(1, 9):  # scrapes at 15..120 s; 10 req/s until 60 s, 30 req/s after
        t = 15.0 * k
        success = 10.0 * min(t, 60.0) + 30.0 * max(0.0, t - 60.0)
        store.add(_sample(t, success, success))
    s = store.signals(125.0)
    assert s.age_s == pytest.approx(5.0)
    assert s.request_rate_per_s == pytest.approx(30.0)  # samples at 75..120 s only
    assert s.avg_batch_size == pytest.approx(2.0)
    lagging = store.signals(80.0)  # window (20, 80]: mixes the old and the new rate
    assert 10.0 < lagging.request_rate_per_s < 30.0
    one = store.signals(16.0)  # a single sample: no rate yet
    assert math.isnan(one.request_rate_per_s) and one.pending_requests == 3.0


def test_the_seen_rate_is_the_rate_a_burst_within_the_window_arrived_at() -> None:
    """A window whose last interval is a burst: the mean rate says less than its requests saw, and
    the seen rate weights each interval by the requests in it; a steady window reads the same both ways."""
    store = PromStore(window_s=60.0)
    success = 0.0
    for k in range(1, 9):  # scrapes at 15..120 s: 100 req/s, then 400 req/s in the last interval
        success += 15.0 * (400.0 if k == 8 else 100.0)
        store.add(_sample(15.0 * k, success, success))
    burst = store.signals(120.0)  # intervals 75-90 and 90-105 at 100/s, 105-120 at 400/s
    assert burst.inference_rate_per_s == pytest.approx((2 * 100.0 + 400.0) / 3)  # rate() over 75..120 s
    assert burst.inference_rate_seen_per_s == pytest.approx((2 * 100.0**2 + 400.0**2) / (2 * 100.0 + 400.0))
    steady = store.signals(105.0)
    assert steady.inference_rate_seen_per_s == pytest.approx(steady.inference_rate_per_s) == 100.0
    assert math.isnan(store.signals(16.0).inference_rate_seen_per_s)  # one sample: no interval yet


def test_a_serving_overhead_adds_to_every_served_request_and_to_what_the_policy_sees() -> None:
    trace = poisson_trace(20.0, 300.0, seed=4)
    base, slow = (
        FleetEngine(
            trace, SimParams(token_mode="none", request_overhead_ms=o), Scripted({}), initial_replicas=2
        ).run()
        for o in (0.0, 7.0)
    )
    ok = base.status == 0
    assert (slow.status == base.status).all()
    assert slow.latency_ms[ok] - base.latency_ms[ok] == pytest.approx(np.full(int(ok.sum()), 7.0))
    assert slow.scrapes[-1].request_us - base.scrapes[-1].request_us == pytest.approx(
        7_000.0 * slow.scrapes[-1].success
    )


def test_controller_sees_a_load_step_late_through_the_scrapes() -> None:
    params = SimParams(token_mode="none")
    trace = synthetic("step", duration_s=1800.0, rate_scale=10.0, seed=3)  # 55 → 165 req/s at 600 s
    ctl = Scripted({}, initial_replicas=6)
    FleetEngine(trace, params, ctl, initial_replicas=6).run()
    rate = {o.now_s: o.signals.request_rate_per_s for o in ctl.seen}
    ages = [o.signals.age_s for o in ctl.seen if o.now_s > 30]
    assert all(a == pytest.approx(params.control_phase_s) for a in ages)
    assert rate[590.0] == pytest.approx(55.0, rel=0.15)
    assert rate[605.0] == pytest.approx(55.0, rel=0.15)  # the step at 600 s is not visible yet
    assert rate[680.0] == pytest.approx(165.0, rel=0.15)  # a full window later it is


def test_poolpilot_controller_runs_the_real_policy_in_the_loop() -> None:
    params = SimParams()
    trace = synthetic("flash", duration_s=900.0, rate_scale=20.0, seed=4)
    r = simulate(trace, PoolPilotController, params)
    assert r.policy == "poolpilot"
    assert r.requests == len(trace)
    assert r.decisions, "the policy should act at least once on a flash crowd"
    assert all(d["reasons"] for d in r.decisions), "every action carries reasons"
    assert 1 <= r.peak_replicas <= params.max_replicas


def test_rate_scale_by_cloning_keeps_the_minute_shape(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    # 10 requests in the first minute, 40 in the second, 20 in the third.
    for minute, count in enumerate((10, 40, 20)):
        for i in range(count):
            rows.append(f"2023-11-16 18:{15 + minute:02d}:{i:02d}.1234567,{100 + i},{10 + i}")
    csv.write_text("\n".join(rows) + "\n")
    base = load_azure_csv(csv)
    assert len(base) == 70
    assert base.arrival_s[0] == 0.0
    scaled = scale_rate(base, 2.5, seed=1)
    per_min = scaled.rate_per_window(60.0) * 60
    assert per_min[:3] == pytest.approx([25, 100, 50], rel=0.35)
    assert sorted(set(scaled.context_tokens.tolist())) == sorted(set(base.context_tokens.tolist()))
    looped = fit_duration(base, 2 * base.duration_s)
    assert len(looped) == 2 * len(base)


def test_bad_trace_rows_name_the_row_and_field(tmp_path: Path) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,12,x\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: GeneratedTokens 'x' is not an integer"):
        load_azure_csv(csv)
    csv.write_text("TIME,Ctx,Gen\n")
    with pytest.raises(ValueError, match="header must be TIMESTAMP,ContextTokens,GeneratedTokens"):
        load_azure_csv(csv)


def test_synthetic_loads_are_seeded_and_shaped() -> None:
    a = synthetic("step", duration_s=900.0, rate_scale=10.0, seed=5)
    b = synthetic("step", duration_s=900.0, rate_scale=10.0, seed=5)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    rates = a.rate_per_window(300.0)  # thirds of the run: base, 3 × base, base
    assert rates[1] == pytest.approx(3 * 55.0, rel=0.1)
    assert rates[0] == pytest.approx(55.0, rel=0.1) and rates[2] == pytest.approx(55.0, rel=0.1)
    flash = synthetic("flash", duration_s=1800.0, rate_scale=10.0, seed=5).rate_per_window(60.0)
    assert flash.max() > 4 * flash[0]


def test_pod_summary_p99_is_the_worst_pod_not_the_pool() -> None:
    # Pod 1: 100 fast requests; pod 2: 10 requests, one of them slow. The pool's p99 hides pod 2's tail.
    lat = np.concatenate([np.full(100, 50.0), np.full(9, 60.0), [400.0]])
    pods = np.concatenate([np.full(100, 1), np.full(10, 2)])
    assert pod_summary_max_ms([(15.0, lat, pods)], 0.99) == 400.0
    assert np.quantile(lat, 0.99) < 400.0
    assert math.isnan(pod_summary_max_ms([], 0.99))


def test_policy_can_be_given_per_pod_summaries() -> None:
    params = SimParams(token_mode="none", p99_source="pod_summary_max")
    trace = poisson_trace(100.0, 600.0)
    ctl = Scripted({}, initial_replicas=4)
    FleetEngine(trace, params, ctl, initial_replicas=4).run()
    p99s = [o.signals.p99_ms for o in ctl.seen if o.now_s > 120]
    assert all(params.curve_ms(1) <= v < 1000 for v in p99s)
    with pytest.raises(ValueError, match="p99_source"):
        SimParams(p99_source="mean")  # type: ignore[arg-type]


def test_router_buckets_keep_their_resolution_around_any_objective() -> None:
    """The 150 ms layout scaled to the objective: a 400 ms p99 is read between 373 and 400 ms buckets,
    not interpolated across 300–400 ms (which read a true 385 ms as 395 ms in the suite)."""
    assert router_buckets_ms(150.0) == ROUTER_BUCKETS_MS
    at_400 = router_buckets_ms(400.0)
    assert len(at_400) == len(ROUTER_BUCKETS_MS)
    assert 400.0 in at_400
    near = [b for b in at_400 if 300.0 <= b <= 500.0]
    assert max(hi / lo for lo, hi in itertools.pairwise(near)) < 1.15
    store = PromStore(window_s=60.0, buckets_ms=at_400)
    i = at_400.index(400.0)
    # Cumulative counts: 985 requests at or under the bucket below 400 ms, the last 15 in the next one.
    cum = [0.0] * (i - 1) + [985.0] + [1000.0] * (len(at_400) - i + 1)
    for t, scale in ((30.0, 0.0), (75.0, 1.0)):
        store.add(replace(_sample(t, 1000.0 * scale, 0.0), hist=tuple(c * scale for c in cum)))
    assert at_400[i - 1] < store.signals(75.0).p99_ms <= 400.0
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="slo_ms"):
            router_buckets_ms(bad)
