"""The generalization suite (`poolpilot bench --suite generalize`): unseen loads and plants.

    poolpilot bench --suite generalize [--seeds dev|heldout|sealed] [--count N] [--duration S] [--jobs J]
        [--cache-dir DIR] [--json OUT] [--markdown OUT]

Scenario i of a seed set is a pure function of (set, i): family = FAMILIES[i mod len], everything else
drawn from `numpy.random.default_rng(base + i)` — dev seeds base 0, held-out seeds base 1,000,000,
sealed seeds base 2,000,000 (`SEED_BASES`). Each draws a target peak fleet (log-uniform 3–300 replicas,
turned into a peak rate with the plant's measured per-replica capacity), a plant (curve A 20–80 ms,
B 0.5–4 ms per item, token cost 0–30 ms per 1k tokens, node lead 120–600 s, pod start 20–120 s,
objective 100–500 ms) and, for synthetic families, a token mix. Families: the shared trace by
superposition and by cloning, and the synthetic shapes of `suite_load.SHAPES` (the on/off family always
with long prompts and short outputs).

Every controller starts from the same fleet: the first minute's measured need (`start_replicas`,
`WARM_START`; docs/generalization.md, "A fair start"); fixed fleets (static, AIMD, the frontier) keep
their own size from t = 0.

Per scenario: PoolPilot, every baseline, the oracle, and the fixed-fleet frontier — fixed fleets of whole
nodes (Triton's default batching), ready at t=0: bisection for the fewest nodes meeting 99 % of windows
(attainment taken as non-decreasing in nodes) plus the largest fleet PoolPilot's GPU-hours can buy, which
is the only fixed fleet that can dominate it (the cheaper ones attain no more). From these:

- *dominated*: some fixed fleet or baseline with no more GPU-hours and no less attainment, one strictly;
- *ratio*: PoolPilot's GPU-hours over those of the cheapest fixed fleet meeting 99 % (None if none within
  the plant's max nodes).

Results are cached per scenario as JSON in the cache folder (key = the scenario's spec, so a changed
spec re-runs it); a rerun skips what is cached, and `--report-only` reports what is cached without
running anything. Scenarios run in parallel processes (`--jobs`, default all cores), with a progress
line per finished scenario.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from poolpilot.loads import DEFAULT_TRACE, Trace, fit_duration, load_azure_csv, scale_rate
from poolpilot.sim.controllers import FixedController
from poolpilot.sim.engine import default_batching
from poolpilot.sim.oracle import first_minute_need
from poolpilot.sim.params import SimParams
from poolpilot.sim.reactive import ReactivePlant, oracle_needs, reactive_reference, unavoidable_misses
from poolpilot.sim.registry import BASELINE_NAMES, ORACLE, run_policy
from poolpilot.sim.run import Result, prepare_params, replica_capacity_per_s, simulate
from poolpilot.sim.search import gallop_bisect
from poolpilot.sim.suite_load import TOKEN_MIXES, draw_tokens, poisson_arrivals, rate_shape, superpose
from poolpilot.sim.suite_seeds import SEED_BASES

POOLPILOT = "poolpilot"
WINDOW_GOAL = 0.99
FAMILIES: tuple[str, ...] = (
    "trace-superpose",
    "trace-clone",
    "ramp",
    "diurnal",
    "mmpp",
    "flash",
    "onoff",
    "ramp-burst-flash",
)
DEFAULT_COUNT = 40
PEAK_REPLICAS_RANGE = (3.0, 300.0)
# How the controllers' common starting fleet is sized (docs/generalization.md, "A fair start"): the fewest
# replicas meeting the objective over the first minute, measured in the engine. Part of the cache key.
WARM_START = "first-minute-need"
_EPS = 1e-9


@dataclass(frozen=True)
class ScenarioSpec:
    """Everything that defines one scenario; the cache key."""

    name: str
    family: str
    seed: int
    duration_s: float
    target_peak_replicas: float
    token_mix: str
    plant: dict[str, float | int]
    warm_start: str = WARM_START

    def params(self) -> SimParams:
        return SimParams(seed=self.seed, **self.plant)  # type: ignore[arg-type]


def draw_spec(seed_set: str, index: int, duration_s: float) -> ScenarioSpec:
    """Scenario `index` of a seed set (module docstring)."""
    if seed_set not in SEED_BASES:
        raise ValueError(f"--seeds must be one of {', '.join(SEED_BASES)}, got {seed_set!r}")
    seed = SEED_BASES[seed_set] + index
    rng = np.random.default_rng(seed)
    family = FAMILIES[index % len(FAMILIES)]
    lo, hi = PEAK_REPLICAS_RANGE
    target = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    a_ms = float(rng.uniform(20.0, 80.0))
    slo_ms = float(rng.uniform(max(100.0, 1.5 * a_ms + 10.0), 500.0))
    max_nodes = max(32, math.ceil(2.0 * target / 8))
    plant: dict[str, float | int] = {
        "batch_latency_a_ms": round(a_ms, 2),
        "batch_latency_b_ms": round(float(rng.uniform(0.5, 4.0)), 3),
        "token_ms_per_1k": round(float(rng.uniform(0.0, 30.0)), 2),
        "node_provisioning_s": round(float(rng.uniform(120.0, 600.0)), 1),
        "pod_start_s": round(float(rng.uniform(20.0, 120.0)), 1),
        "slo_ms": round(slo_ms, 1),
        "max_nodes": max_nodes,
        "max_replicas": max_nodes * 8,
    }
    if family == "onoff":
        mix = "long-prompt"
    elif family.startswith("trace"):
        mix = "trace"
    else:
        mix = TOKEN_MIXES[int(rng.integers(0, len(TOKEN_MIXES)))]
    return ScenarioSpec(
        name=f"{seed_set}-{index:03d}-{family}",
        family=family,
        seed=seed,
        duration_s=duration_s,
        target_peak_replicas=round(target, 2),
        token_mix=mix,
        plant=plant,
    )


def build_trace(spec: ScenarioSpec, base: Trace | None) -> Trace:
    """The scenario's arrivals: its peak 1-minute rate ≈ target replicas × measured per-replica capacity."""
    rng = np.random.default_rng(spec.seed + 7)
    peak_rate = spec.target_peak_replicas * replica_capacity_per_s(spec.params())
    if spec.family.startswith("trace"):
        if base is None:
            raise ValueError(f"{spec.name}: the shared trace is needed ({DEFAULT_TRACE})")
        cut = fit_duration(base, spec.duration_s) if spec.duration_s < base.duration_s else base
        k = peak_rate / max(cut.peak_rate_per_s(60.0), _EPS)
        if spec.family == "trace-clone":
            return scale_rate(cut, k, seed=spec.seed)
        return superpose(cut, k, rng)
    shape = rate_shape(spec.family, rng, spec.duration_s)
    t = poisson_arrivals(rng, shape, peak_rate, spec.duration_s)
    ctx, gen = draw_tokens(rng, spec.token_mix, len(t), base)
    return Trace(
        arrival_s=t,
        context_tokens=ctx,
        generated_tokens=gen,
        duration_s=spec.duration_s,
        name=spec.family,
        description=(
            f"{spec.family} (seed {spec.seed}), peak {peak_rate:.1f} req/s, tokens {spec.token_mix}"
        ),
    )


def start_replicas(trace: Trace, params: SimParams) -> int:
    """The fleet every controller starts from in the suite (`WARM_START`), ready at t = 0.

    `oracle.first_minute_need`: what the first minute's load needs on this plant with Triton's default
    batching. When no fleet within `max_replicas` meets that minute (more replicas do not help), the
    first minute's rate at 70 % of the measured per-replica capacity — the static baseline's rule,
    without looking past the first minute.
    """
    need = first_minute_need(trace, params)
    if need is None:
        rate = float(trace.rate_per_window(60.0)[0]) if len(trace) else 0.0
        need = math.ceil(rate / max(0.7 * replica_capacity_per_s(params), _EPS))
    return max(params.min_replicas, min(params.max_replicas, need))


# ---- the fixed-fleet frontier -------------------------------------------------------------------


@dataclass(frozen=True)
class FleetPoint:
    nodes: int
    replicas: int
    windows: float
    gpu_hours: float


Evaluate = Callable[[int], FleetPoint]


class Frontier:
    """Fixed fleets of whole nodes, each evaluated at most once (monotone attainment assumed)."""

    def __init__(self, evaluate: Evaluate, max_nodes: int) -> None:
        self._evaluate = evaluate
        self.max_nodes = max_nodes
        self.points: dict[int, FleetPoint] = {}

    def at(self, nodes: int) -> FleetPoint:
        if nodes not in self.points:
            self.points[nodes] = self._evaluate(nodes)
        return self.points[nodes]

    def meets(self, nodes: int, goal: float) -> bool:
        return self.at(nodes).windows >= goal - _EPS

    def fewest_meeting(self, goal: float, guess: int = 1) -> FleetPoint | None:
        """The fewest nodes whose attainment ≥ goal: gallop from `guess` (down or up), then bisect."""
        nodes = gallop_bisect(lambda n: self.meets(n, goal), 1, self.max_nodes, start=guess)
        return None if nodes is None else self.at(nodes)

    def affordable(self, gpu_hours: float, gpu_hours_per_node: float) -> FleetPoint | None:
        """The largest fleet whose GPU-hours are ≤ `gpu_hours` (None if not even one node)."""
        n = min(self.max_nodes, math.floor(gpu_hours / gpu_hours_per_node + 1e-9))
        return self.at(n) if n >= 1 else None


@dataclass(frozen=True)
class Point:
    """A policy or fleet reduced to what dominance compares."""

    name: str
    windows: float
    gpu_hours: float


def dominators(pp: Point, others: Iterable[Point]) -> list[Point]:
    """Every point with no more GPU-hours and no less attainment than `pp`, strictly better in one."""
    out = []
    for o in others:
        no_worse = o.gpu_hours <= pp.gpu_hours + _EPS and o.windows >= pp.windows - _EPS
        strictly = o.gpu_hours < pp.gpu_hours - _EPS or o.windows > pp.windows + _EPS
        if no_worse and strictly:
            out.append(o)
    return out


# ---- one scenario -------------------------------------------------------------------------------


def _summary(r: Result) -> dict[str, Any]:
    missed = r.missed_windows()
    return {
        **({"missed": missed} if missed is not None else {}),
        "windows": r.slo_attainment_windows,
        "requests_in_slo": r.slo_attainment_requests,
        "gpu_hours": r.gpu_hours,
        "p99_ms": r.p99_ms if math.isfinite(r.p99_ms) else None,
        "peak_replicas": r.peak_replicas,
        "rejected": r.rejected_requests,
        "requests": r.requests,
        "wall_s": r.wall_s,
    }


def run_scenario(
    spec: ScenarioSpec,
    base: Trace | None,
    policies: Sequence[str],
    reuse: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every policy and the frontier on one scenario; the JSON record the cache keeps.

    `reuse`: a record of the same spec (`--reuse`): only `policies` are run again, every other result
    and every fixed fleet already evaluated are taken from it (a policy change moves neither the
    baselines nor the fixed fleets; the frontier adds the fleet the new GPU-hours could buy).
    """
    t0 = time.perf_counter()
    trace = build_trace(spec, base)
    params = prepare_params(trace, spec.params())
    start = start_replicas(trace, params)
    run_params = replace(params, initial_replicas=start)  # fixed fleets (static, AIMD) keep their own
    results = dict(reuse["results"]) if reuse else {}
    run = list(policies)
    if reuse is not None and ORACLE in reuse["results"] and "oracle_needs" not in reuse and ORACLE not in run:
        run.append(ORACLE)  # a record from before the reactive reference: its oracle runs once more
    raw = {name: run_policy(name, trace, run_params) for name in run}
    results.update({name: _summary(r) for name, r in raw.items()})
    needs: list[int | None] | None = (
        oracle_needs(raw[ORACLE].series, params.slo_ms)
        if ORACLE in raw
        else (reuse or {}).get("oracle_needs")
    )
    per_node = params.replicas_per_node
    hours = trace.duration_s / 3600.0

    def evaluate(nodes: int) -> FleetPoint:
        reps = min(params.max_replicas, nodes * per_node)
        fleet = FixedController(reps, default_batching(params), name="fixed", interval_s=60.0)
        r = simulate(trace, lambda _p: fleet, replace(params, initial_replicas=reps))
        return FleetPoint(nodes, reps, r.slo_attainment_windows, r.gpu_hours)

    frontier = Frontier(evaluate, params.max_nodes)
    if reuse:
        frontier.points.update({f["nodes"]: FleetPoint(**f) for f in reuse["frontier"]})
    cap = replica_capacity_per_s(params)
    guess = math.ceil(trace.peak_rate_per_s(60.0) / max(cap, _EPS) / per_node)
    fleet99 = frontier.fewest_meeting(WINDOW_GOAL, guess)
    record: dict[str, Any] = {
        "spec": asdict(spec),
        "description": trace.description,
        "requests": len(trace),
        "peak_rate_per_s": trace.peak_rate_per_s(60.0),
        "start_replicas": start,
        "results": results,
    }
    if POOLPILOT in results:
        frontier.affordable(results[POOLPILOT]["gpu_hours"], params.gpus_per_node * hours)
    record["frontier"] = [asdict(p) for _, p in sorted(frontier.points.items())]
    record["fleet99"] = asdict(fleet99) if fleet99 else None
    if needs is not None:
        record["oracle_needs"] = needs
        record["reactive"] = asdict(
            reactive_reference(needs, reactive_plant(params, start, trace.duration_s))
        )
    record["wall_s"] = time.perf_counter() - t0
    if reuse:
        record["rerun"] = run  # the oracle too when it ran again for its needs
    return record


def reactive_plant(params: SimParams, start: int, duration_s: float) -> ReactivePlant:
    """The scenario's reaction times for the reactive reference; a need is known one scrape in."""
    return ReactivePlant(
        start_replicas=start,
        replicas_per_node=params.replicas_per_node,
        gpus_per_node=params.gpus_per_node,
        max_replicas=min(params.max_replicas, params.max_nodes * params.replicas_per_node),
        node_lead_s=params.node_provisioning_s,
        pod_start_s=params.pod_start_s,
        notice_s=params.scrape_interval_s,
        duration_s=duration_s,
        min_nodes=params.min_nodes,
    )


def unavoidable(record: dict[str, Any]) -> list[int] | None:
    """The minutes no controller from the suite's start meets (`reactive.unavoidable_misses`).

    Computed from the record's spec, start and the oracle's needs, so records made before it was
    reported need no re-run. None when the record has no oracle needs.
    """
    needs = record.get("oracle_needs")
    if needs is None or "start_replicas" not in record:
        return None
    spec = ScenarioSpec(**record["spec"])
    plant = reactive_plant(spec.params(), record["start_replicas"], spec.duration_s)
    return list(unavoidable_misses(needs, plant))


# Why PoolPilot is dominated, one cause per scenario (`dominance_cause` tests "infeasible", then "unknown",
# then the rest in this order).
CAUSES: dict[str, str] = {
    "infeasible": "infeasible: no fleet within max meets a window (the oracle meets none); a cheaper "
    "controller at 0 %",
    "own": "own misses: meeting the windows the reactive reference meets would end the dominance",
    "ahead": "ahead of need: even with its own misses met, a dominator wins windows only capacity held "
    "above every need seen meets",
    "cost": "cost: even with its own misses met, a dominator meets as many windows for fewer GPU-hours",
    "unknown": "unknown: the record has no reactive reference or missed minutes (re-run it with --reuse)",
}


def dominance_cause(
    record: dict[str, Any], pp: Point, dom: Sequence[Point], own_misses: Sequence[int] | None
) -> str | None:
    """Which of `CAUSES` explains why PoolPilot is dominated (None: it is not).

    Infeasible first: where the oracle, free to pick any fleet and batching each minute, meets no window,
    every controller meets none and dominance is cost alone. Unknown, where the record lacks the reactive
    reference or PoolPilot's missed minutes (`judge`'s own misses are None). Then the policy's own losses,
    where they decide it: PoolPilot credited with the minutes a controller seeing load only as it arrives
    meets (at the same GPU-hours) is dominated no more. Then, credited so: a dominator that still wins
    more windows wins them with capacity held above any need seen so far (a fixed fleet holds the hour's
    peak from t = 0); otherwise the dominators match its windows for fewer GPU-hours (cost).
    """
    if not dom:
        return None
    oracle = record["results"].get(ORACLE)
    fleets = record["frontier"]
    if (oracle is not None and oracle["windows"] <= _EPS) or (
        oracle is None and fleets and all(f["windows"] <= _EPS for f in fleets)
    ):
        return "infeasible"
    if own_misses is None:
        return "unknown"
    credited = pp
    if own_misses:  # a subset of PoolPilot's missed minutes, so those are recorded and windows < 1
        # The hour's window count, from the missed share: 59 for a trace cut to 3,502 s, 60 otherwise.
        windows = round(len(record["results"][POOLPILOT]["missed"]) / (1.0 - pp.windows))
        credited = replace(pp, windows=pp.windows + len(own_misses) / windows)
    still = dominators(credited, dom)
    if not still:
        return "own"
    if any(d.windows > credited.windows + _EPS for d in still):
        return "ahead"
    return "cost"


def judge(record: dict[str, Any]) -> dict[str, Any]:
    """Dominance (with its cause) and the ratio to the cheapest fixed fleet meeting 99 %, from a record."""
    res = record["results"]
    if POOLPILOT not in res:
        return {"dominated": None, "dominated_by": [], "ratio": None, "pp_meets": None, "cause": None}
    pp = Point(POOLPILOT, res[POOLPILOT]["windows"], res[POOLPILOT]["gpu_hours"])
    others = [Point(n, r["windows"], r["gpu_hours"]) for n, r in res.items() if n in BASELINE_NAMES]
    others += [Point(f"fixed-{f['nodes']}n", f["windows"], f["gpu_hours"]) for f in record["frontier"]]
    dom = dominators(pp, others)
    f99 = record["fleet99"]
    ratio = pp.gpu_hours / f99["gpu_hours"] if f99 and f99["gpu_hours"] > 0 else None
    reactive = record.get("reactive")
    pp_missed = res[POOLPILOT].get("missed")
    # PoolPilot's misses the reactive reference meets: the policy's own losses (None if unknown).
    own = None if reactive is None or pp_missed is None else sorted(set(pp_missed) - set(reactive["missed"]))
    bound = unavoidable(record)
    n_windows = len(record.get("oracle_needs") or ())
    return {
        "dominated": bool(dom),
        "cause": dominance_cause(record, pp, dom, own),
        "dominated_by": [f"{d.name} ({d.windows:.1%}, {d.gpu_hours:.2f} GPU-h)" for d in dom],
        "ratio": ratio,
        "pp_meets": pp.windows >= WINDOW_GOAL - _EPS,
        # None: a record from before the reactive reference (re-run it with --reuse to add it).
        "reactive_meets": None if reactive is None else reactive["windows"] >= WINDOW_GOAL - _EPS,
        "own_misses": own,
        # The minutes no controller from the fair start meets, and whether 99 % is within reach despite
        # them (None: the record has no oracle needs).
        "unavoidable": bound,
        "goal_reachable": None if bound is None else len(bound) <= (1.0 - WINDOW_GOAL) * n_windows + _EPS,
    }


def aggregate(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fraction dominated; where a fixed fleet meets 99 %: PoolPilot's share meeting it, ratios."""
    judged = [(r, judge(r)) for r in records]
    judged = [(r, j) for r, j in judged if j["dominated"] is not None]
    with_fleet = [(r, j) for r, j in judged if j["ratio"] is not None]
    ratios = [float(j["ratio"]) for _, j in with_fleet]
    reachable = [j for _, j in with_fleet if j["reactive_meets"]]
    known = all(j["reactive_meets"] is not None for _, j in with_fleet)
    within = [j for _, j in with_fleet if j["goal_reachable"]]
    bounded = all(j["goal_reachable"] is not None for _, j in with_fleet)
    return {
        "scenarios": len(judged),
        "dominated": sum(1 for _, j in judged if j["dominated"]),
        "dominated_causes": {c: n for c in CAUSES if (n := sum(1 for _, j in judged if j["cause"] == c))},
        "fraction_dominated": (sum(1 for _, j in judged if j["dominated"]) / len(judged)) if judged else None,
        "with_fixed_fleet_99": len(with_fleet),
        "fraction_pp_meets_99": (
            sum(1 for _, j in with_fleet if j["pp_meets"]) / len(with_fleet) if with_fleet else None
        ),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "worst_ratio": max(ratios) if ratios else None,
        # Over every scenario: windows PoolPilot misses that the reactive reference meets (None if unknown).
        "own_misses": (
            sum(len(j["own_misses"]) for _, j in judged)
            if all(j["own_misses"] is not None for _, j in judged)
            else None
        ),
        "missed_windows": (
            sum(len(r["results"][POOLPILOT]["missed"]) for r, _ in judged)
            if all("missed" in r["results"][POOLPILOT] for r, _ in judged)
            else None
        ),
        # Of those, where the reactive reference meets 99 % too (None when a record lacks it).
        "with_reactive_99": len(reachable) if known else None,
        "fraction_pp_meets_99_reactive": (
            sum(1 for j in reachable if j["pp_meets"]) / len(reachable) if known and reachable else None
        ),
        # Of those, where 99 % is within any controller's reach from the fair start (None if unknown).
        "with_goal_reachable": len(within) if bounded else None,
        "fraction_pp_meets_99_reachable": (
            sum(1 for j in within if j["pp_meets"]) / len(within) if bounded and within else None
        ),
    }


# ---- cache, parallel runs, report ---------------------------------------------------------------


def cached(cache_dir: Path, spec: ScenarioSpec, policies: Sequence[str]) -> dict[str, Any] | None:
    """The cached record of `spec` if it was run with the same spec and at least these policies."""
    path = cache_dir / f"{spec.name}.json"
    try:
        rec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if rec.get("spec") != json.loads(json.dumps(asdict(spec))) or not set(policies) <= set(rec["results"]):
        return None
    return rec


_BASE: dict[str, Trace | None] = {}


def _load_base(path: Path) -> Trace | None:
    key = str(path)
    if key not in _BASE:
        _BASE[key] = load_azure_csv(path) if path.is_file() else None
    return _BASE[key]


def _worker(
    spec: ScenarioSpec, trace_path: str, policies: tuple[str, ...], reuse: dict[str, Any] | None
) -> dict[str, Any]:
    return run_scenario(spec, _load_base(Path(trace_path)), policies, reuse)


def run_suite(
    specs: Sequence[ScenarioSpec],
    *,
    cache_dir: Path,
    trace_path: Path,
    policies: Sequence[str],
    jobs: int,
    out: Callable[[str], None],
    rerun: Sequence[str] = (),
    reuse_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Every scenario's record, from the cache or run (in `jobs` processes); a progress line each.

    With `reuse_dir`, a scenario not in the cache runs only the `rerun` policies and takes everything
    else from its record in `reuse_dir` (a scenario without one there is skipped and named).
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    todo = []
    reused: dict[str, dict[str, Any]] = {}
    skipped = []
    for s in specs:
        rec = cached(cache_dir, s, policies)
        if rec is not None:
            records[s.name] = rec
        elif reuse_dir is None:
            todo.append(s)
        elif (old := cached(reuse_dir, s, policies)) is not None:
            reused[s.name] = old
            todo.append(s)
        else:
            skipped.append(s.name)
    if skipped:
        out(f"suite: not in {reuse_dir}, skipped: {', '.join(skipped)}")
        specs = [s for s in specs if s.name not in skipped]
    out(
        f"suite: {len(specs)} scenarios, {len(records)} cached in {cache_dir}, "
        f"{len(todo)} to run, {jobs} jobs"
    )
    t0 = time.perf_counter()

    def finish(rec: dict[str, Any]) -> None:
        name = rec["spec"]["name"]
        records[name] = rec
        (cache_dir / f"{name}.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
        done = len(records)
        el = time.perf_counter() - t0
        ran = done - (len(specs) - len(todo))
        eta = el / ran * (len(specs) - done) if ran else math.nan
        j = judge(rec)
        pp = rec["results"].get(POOLPILOT, {})
        ratio = f"{j['ratio']:.2f}" if j["ratio"] is not None else "—"
        out(
            f"[{done}/{len(specs)}] {name}: PoolPilot {pp.get('windows', math.nan):.1%} "
            f"{pp.get('gpu_hours', math.nan):.2f} GPU-h, ÷ fleet99 {ratio}, "
            f"{'DOMINATED' if j['dominated'] else 'not dominated'} ({rec['wall_s']:.0f} s; "
            f"elapsed {el:.0f} s, eta {eta:.0f} s)"
        )

    pol = tuple(rerun) if reuse_dir is not None else tuple(policies)
    if jobs <= 1:
        base = _load_base(trace_path)
        for s in todo:
            finish(run_scenario(s, base, pol, reused.get(s.name)))
    elif todo:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_worker, s, str(trace_path), pol, reused.get(s.name)) for s in todo]
            for fut in as_completed(futures):
                finish(fut.result())
    return [records[s.name] for s in specs]


def default_policies() -> tuple[str, ...]:
    return (POOLPILOT, *BASELINE_NAMES, ORACLE)


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _reactive_line(agg: dict[str, Any]) -> str:
    if agg["with_reactive_99"] is None:
        return "- the reactive reference: not in every record (re-run with `--reuse` to add it)\n"
    own = (
        f"- PoolPilot misses {agg['missed_windows']} windows over all scenarios; the reactive reference "
        f"meets {agg['own_misses']} of them (PoolPilot's own losses; the rest are met only by capacity "
        "held above every need seen so far)\n"
        if agg["own_misses"] is not None and agg["missed_windows"] is not None
        else ""
    )
    return (
        f"- of those, the reactive reference (a controller that holds no more than the largest need it has "
        f"seen, `poolpilot.sim.reactive`) meets 99 % in {agg['with_reactive_99']}; PoolPilot meets 99 % in "
        f"{_fmt(agg['fraction_pp_meets_99_reactive'], '.1%')} of those\n" + own
    )


def _bound_line(agg: dict[str, Any]) -> str:
    if agg["with_goal_reachable"] is None:
        return ""
    return (
        f"- of those, {agg['with_goal_reachable']} leave 99 % within reach of a controller starting from "
        "the suite's start (`unavoidable` minutes: none meets them, "
        "`poolpilot.sim.reactive.unavoidable_misses`); "
        f"PoolPilot meets 99 % in {_fmt(agg['fraction_pp_meets_99_reachable'], '.1%')} of those\n"
    )


def _causes_line(agg: dict[str, Any]) -> str:
    causes = agg["dominated_causes"]
    if not causes:
        return ""
    return "".join(
        ["- why dominated (one cause each, `poolpilot.sim.suite.dominance_cause`):\n"]
        + [f"  - {n} × {CAUSES[c]}\n" for c, n in causes.items()]
    )


def _minutes(ms: Sequence[int] | None) -> str:
    if ms is None:
        return "—"
    if not ms:
        return "none"
    return ", ".join(map(str, ms[:6])) + (f", … ({len(ms)})" if len(ms) > 6 else "")


def _reactive_cell(reactive: dict[str, Any] | None) -> str:
    if reactive is None:
        return "—"
    missed = reactive["missed"]
    where = f" (misses {_minutes(missed)})" if missed else ""
    return f"{reactive['windows']:.1%} / {reactive['gpu_hours']:.1f}{where}"


def markdown(records: Sequence[dict[str, Any]], seed_set: str, wall_s: float | None) -> str:
    """The suite as Markdown: aggregate, per family, and one row per scenario."""
    agg = aggregate(records)
    parts = [
        f"# Generalization suite ({seed_set} seeds)\n\n",
        f"{agg['scenarios']} scenarios; "
        + (
            "rendered from their cached records (`--report-only`: no scenario run).\n\n"
            if wall_s is None
            else f"wall time {wall_s:.0f} s (cached scenarios cost nothing).\n\n"
        ),
        f"- PoolPilot dominated: **{agg['dominated']} / {agg['scenarios']}** "
        f"({_fmt(agg['fraction_dominated'], '.1%')})\n",
        _causes_line(agg),
        f"- scenarios where a fixed fleet within max meets 99 % of windows: {agg['with_fixed_fleet_99']}; "
        f"PoolPilot meets 99 % in {_fmt(agg['fraction_pp_meets_99'], '.1%')} of them\n",
        _bound_line(agg),
        _reactive_line(agg),
        f"- PoolPilot GPU-h ÷ cheapest fixed fleet meeting 99 %: median {_fmt(agg['median_ratio'], '.3f')}, "
        f"worst {_fmt(agg['worst_ratio'], '.3f')}\n\n## Per family\n\n",
        "| family | scenarios | dominated | PoolPilot ≥ 99 % (of those with a fleet) "
        "| median ratio | worst |\n",
        "|---|---|---|---|---|---|\n",
    ]
    for fam in FAMILIES:
        rs = [r for r in records if r["spec"]["family"] == fam]
        if not rs:
            continue
        a = aggregate(rs)
        parts.append(
            f"| {fam} | {a['scenarios']} | {a['dominated']} | "
            f"{_fmt(a['fraction_pp_meets_99'], '.0%')} of {a['with_fixed_fleet_99']} | "
            f"{_fmt(a['median_ratio'], '.3f')} | {_fmt(a['worst_ratio'], '.3f')} |\n"
        )
    names = [n for n in default_policies() if any(n in r["results"] for r in records)]
    parts.append(
        "\n## Per scenario\n\nwindows in SLO / GPU-hours per policy; `fleet99` = the fewest whole nodes "
        "meeting 99 % of windows (Triton default batching); `reactive` = the reactive reference "
        "(`poolpilot.sim.reactive`: the oracle's per-minute needs, known one scrape into each minute, "
        "held for good, served a node lead and a pod start later) and the minutes it misses; `own misses` = "
        "the minutes PoolPilot misses and the reference meets; `unavoidable` = the minutes no controller "
        "starting from the suite's start meets (no fleet within max meets them, or they end before what is "
        "asked for at t = 0 can serve and need more than the start fleet's nodes hold); "
        "`why` = the cause of a dominance "
        "(infeasible, own, ahead, cost, unknown: `poolpilot.sim.suite.CAUSES`).\n\n"
        "| scenario | peak target | SLO ms | "
        + " | ".join(names)
        + " | reactive | own misses | unavoidable | fleet99 | ratio | dominated by | why |\n|"
        + "---|" * (len(names) + 10)
        + "\n"
    )
    for r in records:
        j = judge(r)
        s = r["spec"]
        cells = []
        for n in names:
            x = r["results"].get(n)
            cells.append(f"{x['windows']:.1%} / {x['gpu_hours']:.1f}" if x else "—")
        f99 = r["fleet99"]
        f99_text = f"{f99['nodes']} n: {f99['windows']:.1%} / {f99['gpu_hours']:.1f}" if f99 else "none"
        parts.append(
            f"| {s['name']} | {s['target_peak_replicas']:.0f} | {s['plant']['slo_ms']:.0f} | "
            + " | ".join(cells)
            + f" | {_reactive_cell(r.get('reactive'))} | {_minutes(j['own_misses'])} | "
            + f"{_minutes(j['unavoidable'])} | {f99_text} | "
            + f"{_fmt(j['ratio'], '.2f')} | "
            + f"{'; '.join(j['dominated_by']) or '—'} | {j['cause'] or '—'} |\n"
        )
    return "".join(parts)


def _explain(args: Any, index: int) -> int:
    """`--explain I`: one scenario's hour with PoolPilot's decisions (`poolpilot.sim.suite_explain`)."""
    from poolpilot.sim.suite_explain import explain

    if index < 0:
        print("poolpilot bench: error: --explain must be a scenario index >= 0", file=sys.stderr)
        return 2
    spec = draw_spec(args.seeds, index, args.duration)
    text = explain(spec, _load_base(Path(args.trace)))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text, encoding="utf-8")
        print(f"wrote {args.markdown}", flush=True)
    else:
        print(text, flush=True)
    return 0


def main(args: Any) -> int:
    """Entry point of `poolpilot bench --suite generalize`."""
    if args.count < 1:
        print("poolpilot bench: error: --count must be >= 1", file=sys.stderr)
        return 2
    if not args.duration > 0:
        print("poolpilot bench: error: --duration must be > 0", file=sys.stderr)
        return 2
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        print("poolpilot bench: error: --jobs must be >= 1", file=sys.stderr)
        return 2
    explain_i = getattr(args, "explain", None)
    if explain_i is not None:
        return _explain(args, explain_i)
    only = getattr(args, "index", None)
    if only is not None and not all(0 <= i < args.count for i in only):
        print(f"poolpilot bench: error: --index must be in [0, {args.count})", file=sys.stderr)
        return 2
    indices = sorted(set(only)) if only is not None else list(range(args.count))
    left_out = [i for i in range(args.count) if i not in indices]
    if left_out:
        print(f"suite: --index leaves out scenarios {', '.join(map(str, left_out))}", flush=True)
    specs = [draw_spec(args.seeds, i, args.duration) for i in indices]
    cache_dir = args.cache_dir or Path(f"suite-cache/{args.seeds}-{args.duration:g}s")
    t0 = time.perf_counter()

    def out(line: str) -> None:
        print(line, flush=True)

    reuse_dir = getattr(args, "reuse", None)
    unknown = sorted(set(getattr(args, "rerun", None) or ()) - set(default_policies()))
    if unknown:
        print(
            f"poolpilot bench: error: --rerun: unknown {', '.join(unknown)} "
            f"(one of {', '.join(default_policies())})",
            file=sys.stderr,
        )
        return 2
    if reuse_dir is not None and reuse_dir.resolve() == cache_dir.resolve():
        print("poolpilot bench: error: --reuse must name another folder than --cache-dir", file=sys.stderr)
        return 2
    report_only = bool(getattr(args, "report_only", False))
    if report_only:
        found = [cached(cache_dir, s, default_policies()) for s in specs]
        records = [r for r in found if r is not None]
        missing = [s.name for s, r in zip(specs, found, strict=True) if r is None]
        out(
            f"report from {len(records)} cached scenarios in {cache_dir}; "
            f"not run: {', '.join(missing) or 'none'}"
        )
    else:
        records = run_suite(
            specs,
            cache_dir=cache_dir,
            trace_path=args.trace,
            policies=default_policies(),
            jobs=jobs,
            out=out,
            rerun=tuple(getattr(args, "rerun", None) or (POOLPILOT,)),
            reuse_dir=reuse_dir,
        )
    wall = time.perf_counter() - t0
    agg = aggregate(records)
    out(
        f"== {args.seeds} seeds: dominated {agg['dominated']}/{agg['scenarios']}; "
        f"PoolPilot ≥ 99 % in {_fmt(agg['fraction_pp_meets_99'], '.1%')} of {agg['with_fixed_fleet_99']} "
        f"scenarios with a fixed fleet meeting 99 %; GPU-h ratio median {_fmt(agg['median_ratio'], '.3f')}, "
        f"worst {_fmt(agg['worst_ratio'], '.3f')}; the reactive reference meets 99 % in "
        f"{_fmt(agg['with_reactive_99'], 'd')} of those, PoolPilot in "
        f"{_fmt(agg['fraction_pp_meets_99_reactive'], '.1%')} of those; 99 % is within reach from the "
        f"start in {_fmt(agg['with_goal_reachable'], 'd')} of them, PoolPilot meets it in "
        f"{_fmt(agg['fraction_pp_meets_99_reachable'], '.1%')} of those; PoolPilot's own misses "
        f"(windows the reference meets) {_fmt(agg['own_misses'], 'd')} of {_fmt(agg['missed_windows'], 'd')}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"seeds": args.seeds, "aggregate": agg,
               "scenarios": [{**r, "judgement": judge(r)} for r in records]}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        out(f"wrote {args.json}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(
            markdown(records, args.seeds, None if report_only else wall), encoding="utf-8"
        )
        out(f"wrote {args.markdown}")
    return 0
