"""Sweep the steady-load property over many random plants (more than CI's 15 derandomized examples).

    python bench/steady_sweep.py [N] [SEED]

Each example: a steady load (±3 % ripple) on the test plant of `tests/policy/conftest.py` (a true
batch-latency curve and tail factor the policy does not know), three hours of ticks from a random start.
It fails when the policy changes anything in the last hour, moves more than 12 times, ends above the
objective, or ends above 1.25 × the plant's true need + 1 — the assertions of
`test_steady_load_converges_then_holds_for_an_hour`. Prints each failure and the count.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from poolpilot.policy import PoolState  # noqa: E402


def _kit() -> object:
    path = ROOT / "tests" / "policy" / "conftest.py"
    spec = importlib.util.spec_from_file_location("policy_conftest", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["policy_conftest"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    cf: object = _kit()
    rnd = random.Random(seed)
    bad = 0
    for _ in range(n):
        rate, tf = rnd.uniform(20, 3000), rnd.uniform(0.85, 1.3)
        a, b, start = rnd.uniform(20, 70), rnd.uniform(1.2, 3.5), rnd.randint(1, 20)
        spec = cf.make_spec(replicas={"min": 1, "max": 64})  # type: ignore[attr-defined]
        plant = cf.Plant(a_ms=a, b_ms=b, tail_factor=tf)  # type: ignore[attr-defined]

        def load(t: float, rate: float = rate) -> float:
            return rate * (1 + 0.03 * math.sin(t / 97.0))

        run = cf.run_loop(  # type: ignore[attr-defined]
            spec, plant, load, duration_s=3 * 3600, state=PoolState(replicas=start, batching=None)
        )
        late = [(t, d.actions, d.reasons[:1]) for t, d, _ in run.decisions if t >= 7200 and d.actions]
        moves = sum(1 for _, d, _ in run.decisions if d.actions)
        _, last, sig = run.decisions[-1]
        objective_ms = spec.slo.latency_target_ms * (1 - spec.slo.margin_ratio)
        need = cf.plant_true_need(plant, rate * 1.03, objective_ms)  # type: ignore[attr-defined]
        if need is None:  # unreachable within replicas.max: the policy must say so
            ok = not late and moves <= 12 and any("objective unreachable" in r for r in last.reasons)
        else:
            ok = (
                not late
                and moves <= 12
                and sig.p99_ms <= spec.slo.latency_target_ms
                and last.replicas <= math.ceil(1.25 * need) + 1
            )
        if not ok:
            bad += 1
            print(
                f"FAIL rate={rate!r} tail_factor={tf!r} a_ms={a!r} b_ms={b!r} start={start}: "
                f"moves={moves} p99={sig.p99_ms:.0f} replicas={last.replicas} true need={need} {late[:1]}",
                flush=True,
            )
    print(f"{bad} failed, {n - bad} passed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
