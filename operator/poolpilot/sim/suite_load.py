"""Scenario loads for the generalization suite: seeded rate shapes, token mixes, trace superposition.

Every shape is a rate function normalised to a peak of 1 over the scenario (the suite multiplies it by
the peak rate its target fleet size needs), sampled as a non-homogeneous Poisson process by thinning.
Parameters are drawn from the scenario's own `numpy.random.Generator`, so a scenario is a pure function
of its seed. Families (issue 12):

- `ramp`: a linear ramp from a random start level to the peak over a random span, then flat;
- `diurnal`: a compressed day, random trough level and phase;
- `mmpp`: a Markov-modulated Poisson process — a 2-state chain (calm / burst) with random mean sojourns
  (1–10 min calm, 0.5–3 min burst) and a random burst ratio 2–5×;
- `flash`: a base level with 1–3 flash crowds (ramp 10–60 s to 3–8×, exponential decay 60–300 s);
- `onoff`: minute-scale on/off bursts (on 0.5–3 min, off 0.5–5 min, off level 0–20 % of on);
- `ramp-burst-flash`: the issue's synthetic hour — a slow ramp, Markov-modulated bursts and two flash
  crowds on top of each other.

Token mixes (`TOKEN_MIXES`): short-prompt chat, the shared trace's own pairs, long-prompt code, and long
prompts with short outputs (the second Azure trace's description). The shared trace itself is scaled by
`superpose`: k copies of the whole trace, each circularly shifted by its own random offset, the
fractional copy thinned; shifts up to 2 min keep the minute-scale shape. Every request keeps its own
tokens and no two arrivals are clones of one another at the same instant (unlike the cloning of
`traces.scale_rate`, also offered as a family).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from poolpilot.loads import FloatArray, IntArray, Trace

RateShape = Callable[[FloatArray], FloatArray]

SHAPES: tuple[str, ...] = ("ramp", "diurnal", "mmpp", "flash", "onoff", "ramp-burst-flash")
TOKEN_MIXES: tuple[str, ...] = ("chat", "trace", "code", "long-prompt")
# (context median, context p99, generated median, generated p99) of each lognormal mix
_MIX_LOGNORMAL: dict[str, tuple[float, float, float, float]] = {
    "chat": (150.0, 1200.0, 180.0, 700.0),
    "code": (3000.0, 7500.0, 250.0, 1000.0),
    "long-prompt": (2500.0, 7000.0, 20.0, 120.0),
}
_Z99 = 2.3263478740408408
_GRID_POINTS = 4097


def _ramp(rng: np.random.Generator, dur: float) -> RateShape:
    start = rng.uniform(0.1, 0.5)
    t0, t1 = sorted(rng.uniform(0.0, 1.0, 2) * dur)
    t1 = max(t1, t0 + 60.0)
    return lambda t: start + (1.0 - start) * np.clip((t - t0) / (t1 - t0), 0.0, 1.0)


def _diurnal(rng: np.random.Generator, dur: float) -> RateShape:
    trough = rng.uniform(0.1, 0.6)
    phase = rng.uniform(0.0, 2 * math.pi)
    return lambda t: trough + (1 - trough) * (1 - np.cos(2 * np.pi * t / dur + phase)) / 2


def _step_path(rng: np.random.Generator, dur: float, mean_a_s: float, mean_b_s: float) -> list[float]:
    """Switch times of an alternating renewal process starting in state A (exponential sojourns)."""
    times, t, state_a = [], 0.0, bool(rng.random() < 0.7)
    if not state_a:
        times.append(0.0)
    while t < dur:
        t += rng.exponential(mean_a_s if state_a else mean_b_s)
        times.append(t)
        state_a = not state_a
    return times


def _alternating(switches: list[float], low: float, high: float, first_low: bool) -> RateShape:
    edges = np.asarray(switches, dtype=np.float64)

    def f(t: FloatArray) -> FloatArray:
        n = np.searchsorted(edges, t, side="right")
        in_low = (n % 2 == 0) == first_low
        return np.where(in_low, low, high)

    return f


def _mmpp(rng: np.random.Generator, dur: float) -> RateShape:
    ratio = rng.uniform(2.0, 5.0)
    calm_s, burst_s = rng.uniform(60.0, 600.0), rng.uniform(30.0, 180.0)
    return _alternating(_step_path(rng, dur, calm_s, burst_s), 1.0 / ratio, 1.0, True)


def _onoff(rng: np.random.Generator, dur: float) -> RateShape:
    on_s, off_s, off_level = rng.uniform(30.0, 180.0), rng.uniform(30.0, 300.0), rng.uniform(0.0, 0.2)
    return _alternating(_step_path(rng, dur, off_s, on_s), off_level, 1.0, True)


def _flash_crowds(rng: np.random.Generator, dur: float, count: int) -> RateShape:
    crowds = [
        (
            rng.uniform(0.1, 0.85) * dur,
            rng.uniform(10.0, 60.0),
            rng.uniform(60.0, 300.0),
            rng.uniform(3.0, 8.0),
        )
        for _ in range(count)
    ]

    def f(t: FloatArray) -> FloatArray:
        out = np.ones_like(t)
        for t0, ramp_s, tau_s, peak in crowds:
            up = np.clip((t - t0) / ramp_s, 0.0, 1.0)
            down = np.where(t > t0 + ramp_s, np.exp(-(t - t0 - ramp_s) / tau_s), 1.0)
            out = out + (peak - 1.0) * up * down
        return out

    return f


def _flash(rng: np.random.Generator, dur: float) -> RateShape:
    return _flash_crowds(rng, dur, int(rng.integers(1, 4)))


def _ramp_burst_flash(rng: np.random.Generator, dur: float) -> RateShape:
    ramp, bursts, flash = _ramp(rng, dur), _mmpp(rng, dur), _flash_crowds(rng, dur, 2)
    return lambda t: ramp(t) * bursts(t) * flash(t)


_SHAPE_BUILDERS: dict[str, Callable[[np.random.Generator, float], RateShape]] = {
    "ramp": _ramp,
    "diurnal": _diurnal,
    "mmpp": _mmpp,
    "flash": _flash,
    "onoff": _onoff,
    "ramp-burst-flash": _ramp_burst_flash,
}


def rate_shape(name: str, rng: np.random.Generator, duration_s: float) -> RateShape:
    """A random rate shape of family `name`, normalised so its peak over [0, duration_s] is 1."""
    try:
        raw = _SHAPE_BUILDERS[name](rng, duration_s)
    except KeyError:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join(SHAPES)}") from None
    peak = float(raw(np.linspace(0.0, duration_s, _GRID_POINTS)).max())
    if not peak > 0:
        raise ValueError(f"shape {name!r} has no load")
    return lambda t: raw(t) / peak


def poisson_arrivals(rng: np.random.Generator, shape: RateShape, peak_per_s: float, dur: float) -> FloatArray:
    """Arrival times of a Poisson process with rate peak_per_s · shape(t) (thinning; shape ≤ 1)."""
    n = int(rng.poisson(peak_per_s * dur * 1.0001))
    cand = np.sort(rng.random(n) * dur)
    keep = rng.random(n) * 1.0001 < shape(cand)
    return cand[keep]


def draw_tokens(
    rng: np.random.Generator, mix: str, n: int, source: Trace | None
) -> tuple[IntArray, IntArray]:
    """(context, generated) tokens of n requests from a token mix (`trace` resamples the shared trace)."""
    if mix == "trace" and source is not None and len(source):
        pick = rng.integers(0, len(source), n)
        return source.context_tokens[pick], source.generated_tokens[pick]
    c50, c99, g50, g99 = _MIX_LOGNORMAL.get(mix, (1020.0, 4142.0, 129.0, 601.0))

    def lognormal(median: float, p99: float) -> IntArray:
        sigma = math.log(p99 / median) / _Z99
        return np.maximum(1, np.round(rng.lognormal(math.log(median), sigma, n))).astype(np.int64)

    return lognormal(c50, c99), lognormal(g50, g99)


def superpose(trace: Trace, k: float, rng: np.random.Generator, max_shift_s: float = 120.0) -> Trace:
    """⌊k⌋ whole copies plus one thinned copy, each circularly shifted by a uniform offset in
    [0, max_shift_s): small enough to keep the trace's minute-scale shape, large enough that no copy's
    requests land next to another copy's twins."""
    if not k > 0:
        raise ValueError(f"superposition factor must be > 0, got {k}")
    dur = trace.duration_s
    parts_t, parts_i = [], []
    copies = math.ceil(k)
    for c in range(copies):
        idx = np.arange(len(trace))
        if c == copies - 1 and k < copies:
            idx = idx[rng.random(len(idx)) < k - (copies - 1)]
        parts_t.append((trace.arrival_s[idx] + rng.uniform(0.0, min(max_shift_s, dur))) % dur)
        parts_i.append(idx)
    t = np.concatenate(parts_t)
    i = np.concatenate(parts_i)
    order = np.argsort(t, kind="stable")
    return Trace(
        arrival_s=t[order],
        context_tokens=trace.context_tokens[i][order],
        generated_tokens=trace.generated_tokens[i][order],
        duration_s=dur,
        name=trace.name,
        description=(
            f"{trace.description}; ×{k:.3g} by superposing copies shifted circularly "
            f"by U[0, {max_shift_s:g} s)"
        ),
    )
