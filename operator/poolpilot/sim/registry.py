"""Which policies `poolpilot simulate --policy` knows, and how to run one by name.

`CONTROLLERS` maps a name to `factory(params: SimParams) -> Controller`. The baselines come from
`poolpilot.sim.baselines.BASELINES` and are imported lazily (at first use), so the simulator core does
not depend on them at import time. `oracle` is not a controller: it is a lower bound computed with
perfect foresight by `poolpilot.sim.oracle.run_oracle(trace, params) -> Result`. Nor is
`hindsight-static`: the cheapest fixed fleet that meets 99 % of 1-minute windows, chosen knowing the whole
trace (`poolpilot.sim.hindsight.best_fixed_fleet`). It is known by name but left out of `all`
(`ALL_POLICIES`): its search runs the engine over the whole trace 4–10 times, about as long as the six
controllers of `all` together.
"""

from __future__ import annotations

from collections.abc import Callable

from poolpilot.loads import Trace
from poolpilot.sim.controllers import PoolPilotController
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Controller
from poolpilot.sim.run import Result, prepare_params, simulate

BASELINE_NAMES: tuple[str, ...] = ("static", "hpa", "keda", "kpa", "aimd")
ORACLE = "oracle"
HINDSIGHT = "hindsight-static"
ALL_POLICIES: tuple[str, ...] = ("poolpilot", *BASELINE_NAMES, ORACLE)  # what `all` expands to
POLICY_NAMES: tuple[str, ...] = (*ALL_POLICIES, HINDSIGHT)  # every name `run_policy` knows


def _baseline(name: str) -> Callable[[SimParams], Controller]:
    def make(params: SimParams) -> Controller:
        from poolpilot.sim.baselines import BASELINES

        return BASELINES[name](params)

    make.__name__ = f"make_{name}"
    return make


CONTROLLERS: dict[str, Callable[[SimParams], Controller]] = {
    "poolpilot": PoolPilotController,
    **{name: _baseline(name) for name in BASELINE_NAMES},
}


def expand_policies(names: list[str]) -> list[str]:
    """`all` ⇒ `ALL_POLICIES` (not `hindsight-static`); an unknown name is a ValueError listing the known."""
    out: list[str] = []
    for name in names:
        picked = list(ALL_POLICIES) if name == "all" else [name]
        for n in picked:
            if n not in POLICY_NAMES:
                raise ValueError(f"unknown policy {n!r}; known: {', '.join(POLICY_NAMES)}, all")
            if n not in out:
                out.append(n)
    return out


def run_policy(name: str, trace: Trace, params: SimParams) -> Result:
    """Run one named policy over the trace."""
    if name == ORACLE:
        from poolpilot.sim.oracle import run_oracle

        return run_oracle(trace, prepare_params(trace, params))
    if name == HINDSIGHT:
        from poolpilot.sim.hindsight import best_fixed_fleet

        return best_fixed_fleet(trace, prepare_params(trace, params))
    try:
        factory = CONTROLLERS[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}") from None
    return simulate(trace, factory, params)
