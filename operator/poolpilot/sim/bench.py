"""`poolpilot bench`: PoolPilot against HPA, KEDA, Knative KPA, AIMD, a static fleet and two references.

    poolpilot bench [--quick] [--json OUT] [--markdown OUT] [--scenario NAME ...] [--report-dir DIR]

Scenarios (issue 3): the shared Azure trace at three rate multipliers (`TRACE_RATE_SCALES`, chosen so
that the oracle's peak need lies between 4 and 40 replicas — the bench computes and prints it, and flags
a multiplier that falls outside), and the three seeded synthetic loads (step, diurnal, flash) at
`SYNTHETIC_RATE_SCALE`. Every policy runs every scenario with the default curve (50 + 2.19·batch ms)
and the default node pool. Per scenario it prints PoolPilot's 1-minute-window attainment and GPU-hours
as ratios to each baseline and to the oracle, and checks the issue's goals, PASS/FAIL each:

1. PoolPilot meets the objective in ≥ 99 % of 1-minute windows;
2. its GPU-hours are ≤ 1.15 × the oracle's;
3. it uses fewer GPU-hours than every baseline that reaches 99 % window attainment;
4. its attainment is higher than that of every baseline that uses fewer GPU-hours.

(3) and (4) pass trivially when no baseline is in their set; the output says so.

Two references run too, and neither is a baseline (they never enter goals 3 and 4): the `oracle`, the
per-minute lower bound of goal 2, and `hindsight-static` (`poolpilot.sim.hindsight`), the cheapest FIXED
fleet (one replica count, one batching setting) that meets ≥ 99 % of 1-minute windows, chosen knowing the
whole trace. Each scenario table shows both; the ratios include "PoolPilot GPU-h ÷ hindsight-static",
which says what PoolPilot's adaptivity buys (< 1) or costs (> 1) against a fleet sized right once.

The simulator's speed is
measured, not assumed: simulated requests per wall-clock second summed over every engine run (the
oracle's many small runs and the hindsight search's full-trace runs are reported apart), single process,
one core.

`--quick` cuts every scenario to its first 300 s (synthetic loads are generated over 300 s), for tests.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolpilot.loads import (
    DEFAULT_TRACE,
    SYNTHETIC_KINDS,
    Trace,
    fit_duration,
    load_azure_csv,
    load_default_tokens,
    scale_rate,
    synthetic,
)
from poolpilot.sim.hindsight import best_fixed_fleet
from poolpilot.sim.params import SimParams
from poolpilot.sim.registry import BASELINE_NAMES, HINDSIGHT, ORACLE, run_policy
from poolpilot.sim.run import Result, prepare_params
from poolpilot.sim.suite_seeds import SEED_BASES

POOLPILOT = "poolpilot"
TRACE_RATE_SCALES: tuple[float, ...] = (12.0, 35.0, 80.0)
SYNTHETIC_RATE_SCALE = 20.0
FULL_DURATION_S = 3600.0
QUICK_DURATION_S = 300.0
PEAK_REPLICAS_RANGE = (4, 40)
WINDOW_GOAL = 0.99
ORACLE_GPU_RATIO_GOAL = 1.15
SPEED_GOAL_REQ_PER_S = 200_000.0


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[], Trace]
    is_trace: bool


def scenarios(trace_path: Path, duration_s: float, seed: int) -> list[Scenario]:
    """The six scenarios, each built lazily (the trace is read once and cached)."""
    cache: dict[str, Trace] = {}

    def base() -> Trace:
        if "base" not in cache:
            cache["base"] = load_azure_csv(trace_path)
        return cache["base"]

    def tokens() -> Trace | None:
        if "tokens" not in cache:
            t = load_default_tokens()
            if t is None:
                return None
            cache["tokens"] = t
        return cache["tokens"]

    out: list[Scenario] = []
    for k in TRACE_RATE_SCALES:

        def build_trace(k: float = k) -> Trace:
            t = scale_rate(base(), k, seed=seed)
            return fit_duration(t, duration_s) if duration_s < t.duration_s else t

        out.append(Scenario(f"trace-x{k:g}", build_trace, True))
    for kind in SYNTHETIC_KINDS:

        def build_synth(kind: Any = kind) -> Trace:
            return synthetic(
                kind, duration_s=duration_s, rate_scale=SYNTHETIC_RATE_SCALE, seed=seed, token_source=tokens()
            )

        out.append(Scenario(kind, build_synth, False))
    return out


@dataclass(frozen=True)
class Goal:
    name: str
    passed: bool
    detail: str


@dataclass
class ScenarioOutcome:
    name: str
    description: str
    requests: int
    oracle_peak_replicas: int
    in_range: bool
    results: dict[str, Result]
    cpu_s: dict[str, float] = field(default_factory=dict)  # process CPU time of each policy's run
    goals: list[Goal] = field(default_factory=list)


def _ratio(a: float, b: float) -> float:
    """a ÷ b; inf when only b is 0 (e.g. PoolPilot meets some windows, the baseline none), NaN if both are."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.nan
    if b == 0:
        return math.inf if a > 0 else math.nan
    return a / b


def poolpilot_ratios(results: dict[str, Result]) -> dict[str, dict[str, float | None]]:
    """PoolPilot's window attainment and GPU-hours divided by each other policy's (None if undefined)."""
    pp = results.get(POOLPILOT)
    if pp is None:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for name, r in results.items():
        if name == POOLPILOT:
            continue
        aw = _ratio(pp.slo_attainment_windows, r.slo_attainment_windows)
        gh = _ratio(pp.gpu_hours, r.gpu_hours)
        out[name] = {
            "windows": aw if math.isfinite(aw) else None,
            "gpu_hours": gh if math.isfinite(gh) else None,
        }
    return out


def check_goals(results: dict[str, Result]) -> list[Goal]:
    """The issue's four goals for PoolPilot against the baselines and the oracle in one scenario."""
    pp = results.get(POOLPILOT)
    oracle = results.get(ORACLE)
    if pp is None:
        return [Goal("poolpilot ran", False, "PoolPilot was not run")]
    goals: list[Goal] = []
    w = pp.slo_attainment_windows
    goals.append(Goal("≥ 99 % of 1-min windows in SLO", w >= WINDOW_GOAL, f"{w:.2%}"))
    if oracle is not None:
        r = _ratio(pp.gpu_hours, oracle.gpu_hours)
        goals.append(
            Goal(
                "GPU-hours ≤ 1.15 × oracle",
                math.isfinite(r) and r <= ORACLE_GPU_RATIO_GOAL,
                f"{pp.gpu_hours:.2f} / {oracle.gpu_hours:.2f} = {r:.2f}×",
            )
        )
    baselines = [results[b] for b in BASELINE_NAMES if b in results]
    good = [b for b in baselines if b.slo_attainment_windows >= WINDOW_GOAL]
    worse = [b for b in good if not pp.gpu_hours < b.gpu_hours]
    goals.append(
        Goal(
            "fewer GPU-hours than every baseline at ≥ 99 % windows",
            not worse,
            (
                "no baseline reaches 99 %"
                if not good
                else ", ".join(f"{b.policy} {b.gpu_hours:.2f}" for b in good) + f" vs {pp.gpu_hours:.2f}"
            ),
        )
    )
    cheaper = [b for b in baselines if b.gpu_hours < pp.gpu_hours]
    beaten = [b for b in cheaper if not w > b.slo_attainment_windows]
    goals.append(
        Goal(
            "higher attainment than every cheaper baseline",
            not beaten,
            (
                "no baseline uses fewer GPU-hours"
                if not cheaper
                else ", ".join(f"{b.policy} {b.slo_attainment_windows:.1%}" for b in cheaper) + f" vs {w:.1%}"
            ),
        )
    )
    return goals


def scenario_table(outcome: ScenarioOutcome) -> str:
    """Markdown table: every policy's attainment and GPU-hours, and PoolPilot's ratios to it."""
    pp = outcome.results.get(POOLPILOT)
    head = (
        "| policy | windows in SLO | requests in SLO | p99 ms | GPU-hours | replica GPU-h | peak replicas "
        "| PoolPilot windows ÷ it | PoolPilot GPU-h ÷ it |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for name, r in outcome.results.items():
        aw = _ratio(pp.slo_attainment_windows, r.slo_attainment_windows) if pp else math.nan
        gh = _ratio(pp.gpu_hours, r.gpu_hours) if pp else math.nan
        rows.append(
            f"| {name} | {r.slo_attainment_windows:.1%} | {r.slo_attainment_requests:.2%} | {r.p99_ms:.1f} "
            f"| {r.gpu_hours:.2f} | {r.replica_gpu_hours:.2f} | {r.peak_replicas} | {aw:.3f} | {gh:.3f} |"
        )
    return head + "\n".join(rows) + "\n"


def _speed(outcomes: Sequence[ScenarioOutcome]) -> dict[str, float]:
    eng_req = eng_wall = eng_cpu = or_req = or_wall = hs_req = hs_wall = 0.0
    best = 0.0
    for o in outcomes:
        for name, r in o.results.items():
            if not (math.isfinite(r.wall_s) and r.wall_s > 0):
                continue
            if name == ORACLE:
                sim = float(r.decisions[0].get("simulated_requests", 0)) if r.decisions else 0.0
                or_req += sim
                or_wall += r.wall_s
            elif name == HINDSIGHT:
                hs_req += float(r.decisions[0].get("simulated_requests", 0)) if r.decisions else 0.0
                hs_wall += r.wall_s
            else:
                eng_req += r.requests
                eng_wall += r.wall_s
                eng_cpu += o.cpu_s.get(name, math.nan)
                best = max(best, r.requests / r.wall_s)
    return {
        "engine_requests": eng_req,
        "engine_wall_s": eng_wall,
        "engine_requests_per_s": eng_req / eng_wall if eng_wall > 0 else math.nan,
        "run_cpu_s": eng_cpu,
        "requests_per_cpu_s": eng_req / eng_cpu if eng_cpu > 0 else math.nan,
        "best_run_requests_per_s": best,
        "oracle_simulated_requests": or_req,
        "oracle_wall_s": or_wall,
        "oracle_requests_per_s": or_req / or_wall if or_wall > 0 else math.nan,
        "hindsight_simulated_requests": hs_req,
        "hindsight_wall_s": hs_wall,
        "hindsight_requests_per_s": hs_req / hs_wall if hs_wall > 0 else math.nan,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help=f"first {QUICK_DURATION_S:g} s of every scenario"
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON here")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write the tables and goals as Markdown")
    parser.add_argument(
        "--trace", type=Path, default=DEFAULT_TRACE, help="Azure-format CSV (the shared trace)"
    )
    parser.add_argument(
        "--scenario", nargs="+", metavar="NAME", help="run only these scenarios (default: all six)"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N")
    parser.add_argument(
        "--report-dir", type=Path, metavar="DIR", help="also write a plot report per scenario"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal fails")
    suite = parser.add_argument_group("generalization suite (poolpilot.sim.suite)")
    suite.add_argument("--suite", choices=("generalize",), help="run the generalization suite instead")
    suite.add_argument(
        "--seeds",
        choices=tuple(SEED_BASES),
        default="dev",
        help="suite seed set: dev (develop on it), heldout (report it), sealed (report it, never read)",
    )
    suite.add_argument("--count", type=int, default=40, metavar="N", help="suite scenarios (default 40)")
    suite.add_argument(
        "--duration", type=float, default=FULL_DURATION_S, metavar="S", help="suite scenario length in s"
    )
    suite.add_argument("--jobs", type=int, metavar="J", help="suite processes (default: all cores)")
    suite.add_argument("--cache-dir", type=Path, metavar="DIR", help="suite results per scenario (resumable)")
    suite.add_argument(
        "--index",
        type=int,
        nargs="+",
        metavar="I",
        help="suite: only these scenario indices (each < --count; the report names the ones left out)",
    )
    suite.add_argument(
        "--reuse",
        type=Path,
        metavar="DIR",
        help="suite: run PoolPilot only, taking baselines, oracle and fixed fleets from DIR's records "
        "(a policy change moves none of them)",
    )
    suite.add_argument(
        "--rerun",
        nargs="+",
        metavar="POLICY",
        default=["poolpilot"],
        help="suite with --reuse: the policies run again (default: poolpilot; a change to what the "
        "controllers observe moves every one that reads the p99 signal: poolpilot aimd)",
    )
    suite.add_argument(
        "--report-only", action="store_true", help="suite: report the cached scenarios, run nothing"
    )
    suite.add_argument(
        "--explain",
        metavar="I",
        type=int,
        help="suite: replay scenario I of --seeds with PoolPilot and print its hour minute by minute with "
        "every decision and its reasons (Markdown; --markdown writes it to a file)",
    )


def _print(text: str = "") -> None:
    print(text, flush=True)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "suite", None) == "generalize":
        from poolpilot.sim import suite

        return suite.main(args)
    duration = QUICK_DURATION_S if args.quick else FULL_DURATION_S
    params = SimParams(seed=args.seed)
    try:
        if not Path(args.trace).is_file():
            raise ValueError(f"--trace: file not found: {args.trace}")
        all_scenarios = scenarios(args.trace, duration, args.seed)
        known = [s.name for s in all_scenarios]
        picked = args.scenario or known
        unknown = [s for s in picked if s not in known]
        if unknown:
            raise ValueError(f"unknown scenario {unknown[0]!r}; known: {', '.join(known)}")
        chosen = [s for s in all_scenarios if s.name in picked]
    except ValueError as exc:
        print(f"poolpilot bench: error: {exc}", file=sys.stderr)
        return 2
    policies = [POOLPILOT, *BASELINE_NAMES, ORACLE, HINDSIGHT]
    width = max(len(n) for n in policies)
    t0 = time.perf_counter()
    outcomes: list[ScenarioOutcome] = []
    for sc in chosen:
        try:
            trace = sc.build()
        except ValueError as exc:
            print(f"poolpilot bench: error: scenario {sc.name}: {exc}", file=sys.stderr)
            return 2
        _print(f"== {sc.name}: {trace.description}")
        _print(f"   {len(trace):,} requests, peak {trace.peak_rate_per_s():.1f} req/s over 1 min")
        results: dict[str, Result] = {}
        cpu: dict[str, float] = {}
        for name in policies:
            c0 = time.process_time()
            if name == HINDSIGHT:
                r = best_fixed_fleet(trace, prepare_params(trace, params), window_goal=WINDOW_GOAL)
            else:
                r = run_policy(name, trace, params)
            cpu[name] = time.process_time() - c0
            results[name] = r
            _print(
                f"   {name:{width}s} windows {r.slo_attainment_windows:7.2%}  GPU-h {r.gpu_hours:7.2f}  "
                f"p99 {r.p99_ms:7.1f} ms  peak {r.peak_replicas:3d}  ({r.wall_s:.1f} s)"
            )
        peak = results[ORACLE].peak_replicas
        lo, hi = PEAK_REPLICAS_RANGE
        in_range = lo <= peak <= hi
        outcome = ScenarioOutcome(sc.name, trace.description, len(trace), peak, in_range, results, cpu)
        outcome.goals = check_goals(results)
        outcomes.append(outcome)
        _print(f"   oracle peak need: {peak} replicas ({'within' if in_range else 'OUTSIDE'} {lo}–{hi})")
        hs_line = hindsight_text(outcome)
        if hs_line:
            _print(f"   {hs_line}")
        _print(_ratios_text(outcome))
        for g in outcome.goals:
            _print(f"   [{'PASS' if g.passed else 'FAIL'}] {g.name}: {g.detail}")
        if args.report_dir:
            from poolpilot.sim.report import write_report

            write_report(
                list(results.values()), args.report_dir / sc.name, title=f"PoolPilot bench: {sc.name}"
            )
        _print()
    speed = _speed(outcomes)
    speed_ok = speed["engine_requests_per_s"] >= SPEED_GOAL_REQ_PER_S
    speed_cpu_ok = speed["requests_per_cpu_s"] >= SPEED_GOAL_REQ_PER_S
    total = time.perf_counter() - t0
    _print("== summary")
    for o in outcomes:
        marks = " ".join("PASS" if g.passed else "FAIL" for g in o.goals)
        hs = hindsight_gpu_ratio(o.results)
        hs_text = f"  PoolPilot GPU-h ÷ hindsight-static {hs:.2f}" if hs is not None else ""
        _print(f"   {o.name:12s} oracle peak {o.oracle_peak_replicas:3d}  goals: {marks}{hs_text}")
    _print(
        f"   simulator speed: {speed['engine_requests_per_s']:,.0f} simulated requests per wall-clock s "
        f"({speed['engine_requests']:,.0f} requests in {speed['engine_wall_s']:.1f} s of engine runs; "
        f"best run {speed['best_run_requests_per_s']:,.0f}/s) [{'PASS' if speed_ok else 'FAIL'} ≥ 200,000/s]"
    )
    _print(
        f"   per CPU-second (whole policy run incl. controller and metrics): "
        f"{speed['requests_per_cpu_s']:,.0f}/s [{'PASS' if speed_cpu_ok else 'FAIL'} ≥ 200,000/s]; "
        f"oracle evaluations {speed['oracle_requests_per_s']:,.0f}/s over "
        f"{speed['oracle_simulated_requests']:,.0f} simulated requests"
    )
    if speed["hindsight_wall_s"] > 0:
        _print(
            f"   hindsight-static search: {speed['hindsight_requests_per_s']:,.0f}/s over "
            f"{speed['hindsight_simulated_requests']:,.0f} simulated requests "
            f"({speed['hindsight_wall_s']:.1f} s)"
        )
    _print(f"   bench wall time: {total:.0f} s")
    all_pass = all(g.passed for o in outcomes for g in o.goals) and speed_ok
    if args.json:
        doc = {
            "quick": bool(args.quick),
            "duration_s": duration,
            "params": {k: (v if not (isinstance(v, float) and not math.isfinite(v)) else None)
                       for k, v in params.as_dict().items()},
            "speed": speed,
            "speed_goal_passed_wall": speed_ok,
            "speed_goal_passed_cpu": speed_cpu_ok,
            "wall_s": total,
            "scenarios": [
                {
                    "name": o.name,
                    "description": o.description,
                    "requests": o.requests,
                    "oracle_peak_replicas": o.oracle_peak_replicas,
                    "oracle_peak_in_range": o.in_range,
                    "goals": [{"goal": g.name, "passed": g.passed, "detail": g.detail} for g in o.goals],
                    "poolpilot_ratios": poolpilot_ratios(o.results),
                    "poolpilot_gpu_hours_over_hindsight_static": hindsight_gpu_ratio(o.results),
                    "hindsight_static": hindsight_choice(o.results),
                    "results": {n: r.to_json(with_series=False) for n, r in o.results.items()},
                }
                for o in outcomes
            ],
        }  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1, allow_nan=False))
        _print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        text = markdown(outcomes, speed, speed_ok, duration, total)
        args.markdown.write_text(text, encoding="utf-8")
        _print(f"wrote {args.markdown}")
    return 1 if args.strict and not all_pass else 0


def _ratios_text(o: ScenarioOutcome) -> str:
    pp = o.results.get(POOLPILOT)
    if pp is None:
        return "   (PoolPilot not run)"
    width = max((len(n) for n in o.results), default=9)
    lines = [f"   PoolPilot ÷ policy: {'':{width - 9}s}  windows   GPU-hours"]
    for name, r in o.results.items():
        if name == POOLPILOT:
            continue
        aw = _ratio(pp.slo_attainment_windows, r.slo_attainment_windows)
        gh = _ratio(pp.gpu_hours, r.gpu_hours)
        lines.append(f"     vs {name:{width}s}   {aw:7.3f}   {gh:7.3f}")
    return "\n".join(lines)


def hindsight_gpu_ratio(results: dict[str, Result]) -> float | None:
    """PoolPilot GPU-h ÷ hindsight-static GPU-h (None if either is missing or the ratio is undefined)."""
    pp, hs = results.get(POOLPILOT), results.get(HINDSIGHT)
    if pp is None or hs is None:
        return None
    r = _ratio(pp.gpu_hours, hs.gpu_hours)
    return r if math.isfinite(r) else None


def hindsight_choice(results: dict[str, Result]) -> dict[str, Any] | None:
    """The fleet the hindsight search chose (replicas, nodes, batching, evaluations), JSON-ready."""
    hs = results.get(HINDSIGHT)
    if hs is None or not hs.decisions:
        return None
    d = hs.decisions[0]
    keys = ("replicas", "nodes", "batching", "window_goal", "met_goal", "slo_attainment_windows",
            "evaluations", "simulated_requests", "search_max_replicas")  # fmt: skip
    return {k: d.get(k) for k in keys}


def hindsight_text(o: ScenarioOutcome) -> str:
    """One line: the fixed fleet the hindsight search chose, and PoolPilot's GPU-hours over it."""
    c = hindsight_choice(o.results)
    if c is None:
        return ""
    b = c["batching"] or {}
    delay_ms = float(b.get("max_queue_delay_us", 0)) / 1000.0
    met = "" if c["met_goal"] else f" (no fixed fleet up to {c['search_max_replicas']} meets the goal)"
    ratio = hindsight_gpu_ratio(o.results)
    tail = f"; PoolPilot GPU-h ÷ it = {ratio:.3f}" if ratio is not None else ""
    nodes = f"{c['nodes']} node{'' if c['nodes'] == 1 else 's'}"
    inst = b.get("instance_count", 1)
    return (
        f"hindsight-static: {c['replicas']} replicas on {nodes}, queue delay {delay_ms:g} ms, "
        f"{inst} instance{'' if inst == 1 else 's'}, {c['evaluations']} evaluations{met}{tail}"
    )


def markdown(
    outcomes: Sequence[ScenarioOutcome],
    speed: dict[str, float],
    speed_ok: bool,
    duration_s: float,
    wall_s: float,
) -> str:
    """The whole benchmark as Markdown: per scenario a table and the goals; then the speed."""
    parts = [
        "# PoolPilot benchmark\n\n",
        f"`poolpilot bench` — {len(outcomes)} scenarios of {duration_s:g} s, objective p99 ≤ 150 ms, "
        "curve 50 + 2.19·batch ms (token-aware), 8 GPUs/node, 1 GPU/replica, 300 s node lead time, "
        f"60 s pod start. Bench wall time {wall_s:.0f} s.\n",
    ]
    lo, hi = PEAK_REPLICAS_RANGE
    for o in outcomes:
        parts.append(f"\n## {o.name}\n\n{o.description}; {o.requests:,} requests. ")
        parts.append(
            f"Oracle peak need: **{o.oracle_peak_replicas} replicas** "
            f"({'within' if o.in_range else 'outside'} {lo}–{hi}).\n\n"
        )
        parts.append(scenario_table(o))
        parts.append("\n")
        hs_line = hindsight_text(o)
        if hs_line:
            parts.append(f"Reference (not a baseline) {hs_line}.\n\n")
        for g in o.goals:
            parts.append(f"- **{'PASS' if g.passed else 'FAIL'}** {g.name}: {g.detail}\n")
    parts.append(
        "\n## Simulator speed\n\n"
        f"{speed['engine_requests_per_s']:,.0f} simulated requests per wall-clock second "
        f"({speed['engine_requests']:,.0f} requests in {speed['engine_wall_s']:.1f} s of engine runs, one "
        f"process); best single run {speed['best_run_requests_per_s']:,.0f}/s; the oracle's per-minute "
        f"evaluations {speed['oracle_requests_per_s']:,.0f}/s; the hindsight-static search's "
        f"{speed['hindsight_requests_per_s']:,.0f}/s. Goal ≥ 200,000/s: "
        f"**{'PASS' if speed_ok else 'FAIL'}**. Per CPU-second of whole policy runs (controller and "
        f"metrics included): {speed['requests_per_cpu_s']:,.0f}/s.\n"
    )
    return "".join(parts)
