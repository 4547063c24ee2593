"""The generalization suite's pieces: frontier, dominance, drawing, superposition, cache."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolpilot.loads import Trace
from poolpilot.sim import suite
from poolpilot.sim.reactive import ReactivePlant, reactive_reference
from poolpilot.sim.suite import FleetPoint, Frontier, Point, dominators, draw_spec, judge
from poolpilot.sim.suite_load import SHAPES, rate_shape, superpose


def _step_frontier(threshold: int, max_nodes: int) -> tuple[Frontier, list[int]]:
    calls: list[int] = []

    def evaluate(n: int) -> FleetPoint:
        calls.append(n)
        return FleetPoint(n, 8 * n, 1.0 if n >= threshold else 0.5 + n / 1000, float(8 * n))

    return Frontier(evaluate, max_nodes), calls


@pytest.mark.parametrize("threshold", [1, 2, 7, 30, 63, 64])
@pytest.mark.parametrize("guess", [1, 5, 64])
def test_frontier_finds_the_fewest_nodes_meeting_the_goal(threshold: int, guess: int) -> None:
    f, calls = _step_frontier(threshold, 64)
    p = f.fewest_meeting(0.99, guess)
    assert p is not None and p.nodes == threshold
    assert len(calls) == len(set(calls)), "a fleet was evaluated twice"
    assert len(calls) <= 2 * 7 + 2  # logarithmic, not a scan of 64


def test_frontier_says_none_when_max_nodes_miss() -> None:
    f, _ = _step_frontier(100, 64)
    assert f.fewest_meeting(0.99, 10) is None


def test_frontier_on_a_tiny_real_case() -> None:
    """Engine runs: the bisection's answer meets 99 % and one node fewer does not."""
    spec = replace(draw_spec("dev", 3, 300.0), target_peak_replicas=20.0)  # diurnal family
    trace = suite.build_trace(spec, None)
    rec = suite.run_scenario(spec, None, ())
    f99 = rec["fleet99"]
    assert f99 is not None and f99["windows"] >= 0.99
    below = {p["nodes"]: p for p in rec["frontier"]}.get(f99["nodes"] - 1)
    if f99["nodes"] > 1:
        assert below is not None and below["windows"] < 0.99
    assert rec["requests"] == len(trace)


def test_dominance() -> None:
    pp = Point("poolpilot", 0.95, 10.0)
    cases = {
        "cheaper-same": Point("a", 0.95, 9.0),
        "same-better": Point("b", 0.97, 10.0),
        "equal": Point("c", 0.95, 10.0),
        "cheaper-worse": Point("d", 0.90, 5.0),
        "dearer-better": Point("e", 1.0, 11.0),
    }
    got = {p.name for p in dominators(pp, cases.values())}
    assert got == {"a", "b"}


def test_judge_uses_baselines_and_frontier() -> None:
    rec: dict[str, Any] = {
        "results": {
            "poolpilot": {"windows": 0.97, "gpu_hours": 12.0},
            "hpa": {"windows": 0.9, "gpu_hours": 8.0},
            "oracle": {"windows": 1.0, "gpu_hours": 4.0},  # a bound, never a dominator
        },
        "frontier": [
            {"nodes": 1, "replicas": 8, "windows": 0.98, "gpu_hours": 8.0},
            {"nodes": 2, "replicas": 16, "windows": 1.0, "gpu_hours": 16.0},
        ],
        "fleet99": {"nodes": 2, "replicas": 16, "windows": 1.0, "gpu_hours": 16.0},
    }
    j = judge(rec)
    assert j["dominated"] and j["dominated_by"][0].startswith("fixed-1n")
    assert j["ratio"] == pytest.approx(12.0 / 16.0)
    assert j["pp_meets"] is False


def _record(
    pp: float, fleet99: bool, reactive: float | None, missed: tuple[list[int], list[int]] = ([], [])
) -> dict[str, Any]:
    """A judged record; `missed` = (PoolPilot's missed minutes, the reference's)."""
    rec: dict[str, Any] = {
        "spec": {"name": "x", "family": "ramp", "target_peak_replicas": 16.0, "plant": {"slo_ms": 200.0}},
        "results": {"poolpilot": {"windows": pp, "gpu_hours": 10.0, "missed": missed[0]}},
        "frontier": [{"nodes": 2, "replicas": 16, "windows": 1.0, "gpu_hours": 16.0}],
        "fleet99": {"nodes": 2, "replicas": 16, "windows": 1.0, "gpu_hours": 16.0} if fleet99 else None,
    }
    if reactive is not None:
        rec["reactive"] = {"windows": reactive, "gpu_hours": 12.0, "missed": missed[1], "peak_replicas": 16}
    return rec


def test_aggregate_counts_where_the_reactive_reference_meets_99() -> None:
    """Of the scenarios a fixed fleet meets, those a controller seeing load as it arrives can meet too."""
    recs = [
        _record(1.0, True, 1.0),
        _record(0.9, True, 1.0, ([3, 4], [])),
        _record(0.9, True, 0.9, ([1, 2, 7], [1, 2, 3])),
        _record(1.0, False, 1.0),
    ]
    agg = suite.aggregate(recs)
    assert agg["with_fixed_fleet_99"] == 3 and agg["with_reactive_99"] == 2
    assert agg["fraction_pp_meets_99_reactive"] == pytest.approx(0.5)
    assert [judge(r)["own_misses"] for r in recs] == [[], [3, 4], [7], []]
    assert agg["missed_windows"] == 5 and agg["own_misses"] == 3
    text = suite.markdown(recs, "dev", 1.0)
    assert "meets 99 % in 2; PoolPilot meets 99 % in 50.0% of those" in text
    assert "PoolPilot misses 5 windows over all scenarios; the reactive reference meets 3 of them" in text
    old = suite.aggregate([*recs, _record(1.0, True, None)])  # a record from before the reference
    assert old["with_reactive_99"] is None and old["fraction_pp_meets_99_reactive"] is None
    assert "not in every record" in suite.markdown([*recs, _record(1.0, True, None)], "dev", 1.0)


def test_a_scenario_whose_first_minutes_no_controller_meets_puts_99_percent_out_of_reach() -> None:
    """Minutes that end before a node asked for at t = 0 serves, needing more than the start nodes hold."""
    spec = draw_spec("dev", 3, 3600.0)
    params = spec.params()
    first = int((params.node_provisioning_s + params.pod_start_s) // 60) - 1  # the last such minute
    assert first >= 1

    def rec(pp: float, need_then: int) -> dict[str, Any]:
        r = _record(pp, True, 1.0)
        r["spec"] = asdict(spec)
        r["start_replicas"] = 3
        r["oracle_needs"] = [3] * first + [need_then] + [40] * (59 - first)
        return r

    out_of_reach, within = rec(58 / 60, 9), rec(1.0, 8)  # 9 > one node filled; 8 fits on it
    assert judge(out_of_reach)["unavoidable"] == [first] and judge(out_of_reach)["goal_reachable"] is False
    assert judge(within)["unavoidable"] == [] and judge(within)["goal_reachable"] is True
    agg = suite.aggregate([out_of_reach, within])
    assert agg["with_fixed_fleet_99"] == 2 and agg["with_goal_reachable"] == 1
    assert agg["fraction_pp_meets_99_reachable"] == pytest.approx(1.0)
    text = suite.markdown([out_of_reach, within], "dev", 1.0)
    assert "of those, 1 leave 99 % within reach" in text and "PoolPilot meets 99 % in 100.0% of those" in text
    assert f"| none | {first} |" in text  # no own misses; the unavoidable minute
    # A record without the oracle's needs: nothing is claimed.
    assert suite.aggregate([_record(1.0, True, 1.0)])["with_goal_reachable"] is None


def test_reuse_adds_the_reactive_reference_and_then_keeps_the_oracles_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = replace(draw_spec("dev", 6, 240.0), target_peak_replicas=6.0)  # on/off: PoolPilot misses one
    first = suite.run_scenario(spec, None, ("poolpilot", "oracle"))
    needs = first["oracle_needs"]
    assert len(needs) == 4 and all(n is None or n >= 1 for n in needs)
    plant = ReactivePlant(
        start_replicas=first["start_replicas"],
        replicas_per_node=8,
        gpus_per_node=8,
        max_replicas=int(spec.plant["max_replicas"]),
        node_lead_s=float(spec.plant["node_provisioning_s"]),
        pod_start_s=float(spec.plant["pod_start_s"]),
        notice_s=15.0,  # one scrape interval
        duration_s=240.0,
    )
    trace = suite.build_trace(spec, None)
    assert suite.reactive_plant(spec.params(), first["start_replicas"], trace.duration_s) == plant
    assert first["reactive"] == asdict(reactive_reference(needs, plant))
    pp = first["results"]["poolpilot"]
    assert len(pp["missed"]) == round((1.0 - pp["windows"]) * len(needs)) > 0  # as attainment counts
    assert "missed" not in first["results"]["oracle"]  # no engine run of its own
    older = {k: v for k, v in first.items() if k not in ("oracle_needs", "reactive")}
    again = suite.run_scenario(spec, None, ("poolpilot",), reuse=older)  # the oracle runs once more
    assert again["oracle_needs"] == needs and again["reactive"] == first["reactive"]
    assert again["rerun"] == ["poolpilot", "oracle"]

    real = suite.run_policy

    def no_oracle(name: str, *a: Any) -> Any:
        assert name != "oracle", "the oracle ran again although its needs were in the record"
        return real(name, *a)

    monkeypatch.setattr(suite, "run_policy", no_oracle)
    third = suite.run_scenario(spec, None, ("poolpilot",), reuse=again)
    assert third["reactive"] == first["reactive"] and third["rerun"] == ["poolpilot"]
    assert judge(third)["reactive_meets"] == (first["reactive"]["windows"] >= 0.99)


def test_specs_are_seeded_and_the_seed_sets_disjoint() -> None:
    a = [draw_spec("dev", i, 3600.0) for i in range(40)]
    assert a == [draw_spec("dev", i, 3600.0) for i in range(40)]
    b = [draw_spec("heldout", i, 3600.0) for i in range(40)]
    c = [draw_spec("sealed", i, 3600.0) for i in range(40)]
    assert not {s.seed for s in a} & {s.seed for s in b}
    assert not ({s.seed for s in a} | {s.seed for s in b}) & {s.seed for s in c}
    assert {s.family for s in a} == set(suite.FAMILIES)
    for s in a:
        p = s.params()
        assert 20 <= p.batch_latency_a_ms <= 80 and 0.5 <= p.batch_latency_b_ms <= 4
        assert 120 <= p.node_provisioning_s <= 600 and 20 <= p.pod_start_s <= 120
        assert 100 <= p.slo_ms <= 500 and 3 <= s.target_peak_replicas <= 300
    with pytest.raises(ValueError, match="--seeds"):
        draw_spec("test", 0, 60.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes_peak_at_one(shape: str) -> None:
    f = rate_shape(shape, np.random.default_rng(1), 3600.0)
    v = f(np.linspace(0, 3600, 4097))
    assert v.max() == pytest.approx(1.0) and v.min() >= 0


def test_superpose_keeps_count_and_makes_no_twins() -> None:
    rng = np.random.default_rng(0)
    t = np.sort(rng.random(2000) * 600)
    tr = Trace(t, np.arange(2000, dtype=np.int64), np.ones(2000, dtype=np.int64), 600.0, "x", "x")
    s = superpose(tr, 3.5, np.random.default_rng(1))
    assert 6800 < len(s) < 7200
    assert len(np.unique(s.arrival_s)) == len(s)
    assert float(s.arrival_s.max()) < 600.0


def test_suite_resumes_from_its_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [replace(draw_spec("dev", i, 120.0), target_peak_replicas=4.0) for i in (2, 3)]
    lines: list[str] = []
    kw: dict[str, Any] = dict(
        cache_dir=tmp_path, trace_path=tmp_path / "none.csv", policies=("poolpilot",), jobs=1
    )
    first = suite.run_suite(specs, out=lines.append, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{s.name}.json" for s in specs)
    assert any(line.startswith("[2/2]") for line in lines)

    def boom(*_a: Any) -> Any:
        raise AssertionError("a cached scenario ran again")

    monkeypatch.setattr(suite, "run_scenario", boom)
    again = suite.run_suite(specs, out=lines.append, **kw)
    assert [r["results"] for r in again] == [r["results"] for r in first]
    # a changed spec is not served from the cache
    changed = [replace(specs[0], target_peak_replicas=5.0)]
    with pytest.raises(AssertionError, match="ran again"):
        suite.run_suite(changed, out=lines.append, **kw)
    assert json.loads((tmp_path / f"{specs[0].name}.json").read_text())["spec"]["target_peak_replicas"] == 4.0


def test_reuse_reruns_poolpilot_only_and_keeps_baselines_and_fleets(tmp_path: Path) -> None:
    """`--reuse`: a policy change re-runs PoolPilot; baselines and fixed fleets come from the old records."""
    specs = [replace(draw_spec("dev", 3, 120.0), target_peak_replicas=4.0)]
    old_dir, new_dir = tmp_path / "before", tmp_path / "after"
    lines: list[str] = []
    kw: dict[str, Any] = dict(trace_path=tmp_path / "none.csv", policies=("poolpilot", "static"), jobs=1)
    before = suite.run_suite(specs, cache_dir=old_dir, out=lines.append, **kw)[0]
    # Mark the old static result and a frontier point: a re-run would overwrite them.
    rec = json.loads((old_dir / f"{specs[0].name}.json").read_text())
    rec["results"]["static"]["gpu_hours"] = 123.0
    rec["frontier"][0]["windows"] = 0.25
    (old_dir / f"{specs[0].name}.json").write_text(json.dumps(rec))
    other = [replace(draw_spec("dev", 2, 120.0), target_peak_replicas=4.0)]  # not in old_dir
    after = suite.run_suite(
        specs + other, cache_dir=new_dir, out=lines.append, rerun=("poolpilot",), reuse_dir=old_dir, **kw
    )
    assert [r["spec"]["name"] for r in after] == [specs[0].name]
    assert any("skipped: " + other[0].name in line for line in lines)
    got = after[0]
    assert got["rerun"] == ["poolpilot"]
    assert got["results"]["static"]["gpu_hours"] == 123.0
    same = {k: v for k, v in before["results"]["poolpilot"].items() if k != "wall_s"}
    assert {k: got["results"]["poolpilot"][k] for k in same} == same  # same policy, same run
    first = {p["nodes"]: p for p in got["frontier"]}[rec["frontier"][0]["nodes"]]
    assert first["windows"] == 0.25


def test_every_controller_starts_from_the_first_minutes_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's fair start: the same fleet for every controller, what the first minute needs."""
    from poolpilot.sim import run as sim_run
    from poolpilot.sim.oracle import first_minute_need
    from poolpilot.sim.run import prepare_params

    spec = replace(draw_spec("dev", 3, 120.0), target_peak_replicas=4.0)
    assert spec.warm_start == suite.WARM_START  # part of the cache key
    started: dict[str, int] = {}
    engine = sim_run.FleetEngine

    def spy(trace: Trace, params: Any, controller: Any, **kw: Any) -> Any:
        e = engine(trace, params, controller, **kw)
        started[controller.name] = e.initial_replicas
        return e

    monkeypatch.setattr(sim_run, "FleetEngine", spy)
    rec = suite.run_scenario(spec, None, ("poolpilot", "hpa", "kpa", "static"))
    trace = suite.build_trace(spec, None)
    need = first_minute_need(trace, prepare_params(trace, spec.params()))
    assert need is not None and rec["start_replicas"] == need
    assert started["poolpilot"] == started["hpa"] == started["kpa"] == need
    assert "static" in started  # static (a fixed fleet by definition) keeps its own size


def test_explain_reads_the_hour_the_suite_judged() -> None:
    """`--explain`: a row per window whose verdicts add up to the attainment the suite reports, and every
    decision with its reasons."""
    from poolpilot.sim.registry import run_policy
    from poolpilot.sim.run import prepare_params
    from poolpilot.sim.suite_explain import explain

    spec = replace(draw_spec("dev", 6, 600.0), target_peak_replicas=6.0)  # on/off: misses some windows
    text = explain(spec, None)
    trace = suite.build_trace(spec, None)
    params = prepare_params(trace, spec.params())
    r = run_policy("poolpilot", trace, replace(params, initial_replicas=suite.start_replicas(trace, params)))
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == r.windows == 10
    missed = sum(1 for line in rows if line.rstrip().endswith("| MISSED |"))
    assert 0 < missed == round((1 - r.slo_attainment_windows) * r.windows)
    decisions = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(decisions) == len(r.decisions) > 0
    assert all(" — " in line and len(line.split(" — ", 1)[1]) > 10 for line in decisions)


def _dominated(
    pp_missed: list[int], ref_missed: list[int] | None, fleet: tuple[float, float], oracle: float = 1.0
) -> dict[str, Any]:
    """A 60-window record: PoolPilot at 10 GPU-h missing `pp_missed`, one fixed fleet (windows, GPU-h)."""
    rec = _record(1.0 - len(pp_missed) / 60, False, None, (pp_missed, []))
    rec["frontier"] = [{"nodes": 1, "replicas": 8, "windows": fleet[0], "gpu_hours": fleet[1]}]
    rec["results"]["oracle"] = {"windows": oracle, "gpu_hours": 4.0}
    if ref_missed is not None:
        rec["reactive"] = {"windows": 1 - len(ref_missed) / 60, "gpu_hours": 9.0, "missed": ref_missed}
    return rec


def test_each_dominance_has_one_cause_a_user_can_act_on() -> None:
    """Infeasible (everyone at 0 %), own misses that decide it, windows won ahead of need, or cost."""
    every = list(range(60))
    cases = {
        "infeasible": _dominated(every, every, (0.0, 8.0), oracle=0.0),
        # Two own misses: credited with them (58/60 > 57/60) no fleet dominates any more.
        "own": _dominated([3, 4, 30, 31], [30, 31], (57 / 60, 9.0)),
        # The same, against a fleet meeting every window: it wins windows the reference misses too.
        "ahead": _dominated([3, 4, 30, 31], [30, 31], (1.0, 9.0)),
        # Credited with its own misses it meets every window; the fleet does too, for less.
        "cost": _dominated([3, 4], [], (1.0, 9.0)),
        "unknown": _dominated([3, 4], None, (1.0, 9.0)),
        None: _dominated([3, 4], [], (1.0, 11.0)),  # the fleet costs more: not dominated
    }
    for cause, rec in cases.items():
        assert judge(rec)["cause"] == cause, cause
    agg = suite.aggregate(list(cases.values()))
    assert agg["dominated_causes"] == {"infeasible": 1, "own": 1, "ahead": 1, "cost": 1, "unknown": 1}
    text = suite.markdown(list(cases.values()), "dev", 1.0)
    assert "  - 1 × own misses: meeting the windows the reactive reference meets" in text
    assert text.count("| ahead |") == 1 and text.count("| cost |") == 1
    assert "wall time 1 s" in text
    assert "rendered from their cached records" in suite.markdown(list(cases.values()), "dev", None)


def test_a_dominance_cause_from_a_partial_record() -> None:
    """No oracle: infeasible when every fixed fleet meets nothing; no reference: infeasible still shows,
    the rest is unknown; a 59-window hour (a trace cut to 3,502 s) credits its own misses by 59ths."""
    no_oracle = _dominated(list(range(60)), None, (0.0, 8.0))
    del no_oracle["results"]["oracle"]
    assert judge(no_oracle)["cause"] == "infeasible"
    assert judge(_dominated(list(range(60)), None, (0.0, 8.0), oracle=0.0))["cause"] == "infeasible"
    # 59 windows, 4 missed, 2 its own: credited 57/59 > 56/59, the fleet's, so its own misses decide.
    hour59 = _dominated([3, 4, 30, 31], [30, 31], (56 / 59, 9.0))
    hour59["results"]["poolpilot"]["windows"] = 55 / 59
    assert judge(hour59)["cause"] == "own"
    hour59["frontier"][0]["windows"] = 57 / 59  # the fleet meets what credited PoolPilot meets: cost
    assert judge(hour59)["cause"] == "cost"
