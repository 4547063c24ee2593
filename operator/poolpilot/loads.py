"""The loads, one module for the simulator and the load generator: the Azure LLM trace, rate multipliers,
seeded synthetic loads. `poolpilot simulate --synthetic K` and `poolpilot loadgen --synthetic K` draw the
same arrivals and tokens from `synthetic` (same duration, rate scale and seed), and the Azure CSV is parsed
only by `load_azure_csv`. Errors are `LoadError` (a ValueError) naming the field, and the row for a CSV.

A `Trace` is three aligned numpy arrays sorted by time: `arrival_s` (seconds from the first request),
`context_tokens`, `generated_tokens`, plus `duration_s` (the span the trace describes, which is what
GPU-hours are billed over) and a human-readable `description` saying how it was made.

Rate multiplier (`scale_rate`), method `clone` (default): each request is cloned ⌊k⌋ times plus once more
with probability k − ⌊k⌋ (Bernoulli), every clone shifted by a seeded uniform jitter in [0, 1 s). This
keeps the trace's minute-scale shape and token mix, and turns k identical copies into a locally
Poisson-like stream. Method `compress` divides timestamps by k instead (the hour becomes 1/k hours).

Synthetic loads (`synthetic`) are non-homogeneous Poisson processes (thinning) with a seeded generator;
token lengths are drawn with replacement from the shared trace's (context, generated) pairs, or from a
lognormal fit to it (medians 1,020 / 129, p99 4,142 / 601) when the trace file is not available:
- `step`: the base rate, 3× the base rate from 1/3 to 2/3 of the duration, then the base rate again;
- `diurnal`: base · (0.3 + 1.7 · (1 − cos 2πt/T)/2): a compressed day, trough 0.3×, peak 2× at T/2;
- `flash`: the base rate, with a flash crowd at 40 % of the duration ramping to 6× in 30 s and decaying
  back with a 120 s time constant;
- `constant`: the base rate throughout (a steady Poisson stream, for calibration and tests).
The base rate is the shared trace's mean (5.5 requests/s) times `rate_scale`, or `base_rps` when given.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# The shared trace, relative to the repository root (the repo is /work/main, shared is /work/shared).
DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
)
TRACE_MEAN_RATE_PER_S = 5.5  # the shared trace's mean arrival rate (README, measured)

# Lognormal fit to the shared trace (median, p99) when the file itself is not available.
_CTX_MEDIAN, _CTX_P99 = 1020.0, 4142.0
_GEN_MEDIAN, _GEN_P99 = 129.0, 601.0
_Z99 = 2.3263478740408408

SyntheticKind = Literal["step", "diurnal", "flash", "constant"]
SYNTHETIC_KINDS: tuple[SyntheticKind, ...] = ("step", "diurnal", "flash")  # the bench's shapes
LOAD_SHAPES: tuple[SyntheticKind, ...] = (*SYNTHETIC_KINDS, "constant")  # what --synthetic accepts


class LoadError(ValueError):
    """A bad trace file or load parameter; the message names the field (and the CSV row)."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival; arrays are read-only by convention."""

    arrival_s: FloatArray
    context_tokens: IntArray
    generated_tokens: IntArray
    duration_s: float
    name: str
    description: str

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.context_tokens) != n or len(self.generated_tokens) != n:
            raise LoadError("trace arrays must have the same length")
        if n and not bool(np.all(np.diff(self.arrival_s) >= 0)):
            raise LoadError("trace arrival_s must be sorted")
        if not self.duration_s >= 0:
            raise LoadError(f"duration_s must be >= 0, got {self.duration_s}")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def tokens(self) -> IntArray:
        """Context + generated tokens per request (the unit of cost per 1k tokens)."""
        return self.context_tokens + self.generated_tokens

    def rate_per_window(self, window_s: float = 60.0) -> FloatArray:
        """Arrivals per second in consecutive windows covering [0, duration_s)."""
        n_win = max(1, math.ceil(self.duration_s / window_s))
        counts = np.bincount(
            np.minimum((self.arrival_s // window_s).astype(np.int64), n_win - 1), minlength=n_win
        )
        return counts.astype(np.float64) / window_s

    def peak_rate_per_s(self, window_s: float = 60.0) -> float:
        """The busiest window's arrival rate (what a static fleet is provisioned for)."""
        return float(self.rate_per_window(window_s).max()) if len(self) else 0.0


def load_azure_csv(path: str | Path) -> Trace:
    """Read `TIMESTAMP,ContextTokens,GeneratedTokens`; errors name the row and the field."""
    p = Path(path)
    if not p.is_file():
        raise LoadError(f"trace file not found: {p}")
    times: list[float] = []
    ctx: list[int] = []
    gen: list[int] = []
    with p.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        expected = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header is None or [h.strip() for h in header] != expected:
            raise LoadError(f"{p}: header must be {','.join(expected)}, got {header!r}")
        for row_no, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 3:
                raise LoadError(f"{p}:{row_no}: expected 3 fields, got {len(row)}")
            ts = row[0].strip()
            try:
                # 7 fractional digits (100 ns): datetime takes at most 6, so split the fraction off.
                base, _, frac = ts.partition(".")
                t = datetime.fromisoformat(base).timestamp() + (float("0." + frac) if frac else 0.0)
            except ValueError:
                raise LoadError(f"{p}:{row_no}: TIMESTAMP {ts!r} is not a timestamp") from None
            c, g = (
                _token_count(p, row_no, name, raw) for name, raw in zip(expected[1:], row[1:], strict=True)
            )
            times.append(t)
            ctx.append(c)
            gen.append(g)
    if not times:
        raise LoadError(f"{p}: no rows (no requests)")
    t_arr = np.asarray(times, dtype=np.float64)
    order = np.argsort(t_arr, kind="stable")
    t_arr = t_arr[order] - t_arr[order[0]]
    return Trace(
        arrival_s=t_arr,
        context_tokens=np.asarray(ctx, dtype=np.int64)[order],
        generated_tokens=np.asarray(gen, dtype=np.int64)[order],
        duration_s=float(math.floor(t_arr[-1]) + 1),  # the trace covers [0, duration_s)
        name=p.stem,
        description=f"{p.name}: {len(t_arr)} requests over {t_arr[-1]:.0f} s",
    )


def _token_count(path: Path, row_no: int, column: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise LoadError(f"{path}:{row_no}: {column} {raw.strip()!r} is not an integer") from None
    if value < 0:
        raise LoadError(f"{path}:{row_no}: {column} must be >= 0, got {value}")
    return value


def scale_rate(
    trace: Trace, rate_scale: float, *, seed: int = 0, method: Literal["clone", "compress"] = "clone"
) -> Trace:
    """Multiply the arrival rate by `rate_scale` (see the module docstring for the two methods)."""
    if not rate_scale > 0 or not math.isfinite(rate_scale):
        raise LoadError(f"rate_scale must be a positive number, got {rate_scale}")
    if rate_scale == 1.0:
        return trace
    if method == "compress":
        return Trace(
            arrival_s=trace.arrival_s / rate_scale,
            context_tokens=trace.context_tokens,
            generated_tokens=trace.generated_tokens,
            duration_s=trace.duration_s / rate_scale,
            name=trace.name,
            description=f"{trace.description}; rate ×{rate_scale:g} by timestamp compression",
        )
    if method != "clone":
        raise LoadError(f"rate-scale method must be clone or compress, got {method!r}")
    rng = np.random.default_rng(seed)
    whole = math.floor(rate_scale)
    frac = rate_scale - whole
    copies = np.full(len(trace), whole, dtype=np.int64)
    if frac > 0:
        copies += (rng.random(len(trace)) < frac).astype(np.int64)
    idx = np.repeat(np.arange(len(trace)), copies)
    t = trace.arrival_s[idx] + rng.random(len(idx))
    t = np.minimum(t, np.nextafter(trace.duration_s, 0.0))  # stay inside [0, duration_s)
    order = np.argsort(t, kind="stable")
    return Trace(
        arrival_s=t[order],
        context_tokens=trace.context_tokens[idx][order],
        generated_tokens=trace.generated_tokens[idx][order],
        duration_s=trace.duration_s,
        name=trace.name,
        description=(
            f"{trace.description}; rate ×{rate_scale:g} by cloning each request "
            f"(⌊k⌋ copies + Bernoulli fraction, uniform jitter [0, 1 s), seed {seed})"
        ),
    )


def fit_duration(trace: Trace, duration_s: float) -> Trace:
    """Cut the trace to `duration_s`, or loop it (shifted copies) until it covers `duration_s`."""
    if not duration_s > 0:
        raise LoadError(f"duration must be > 0 s, got {duration_s}")
    if duration_s <= trace.duration_s:
        keep = trace.arrival_s < duration_s
        return Trace(
            arrival_s=trace.arrival_s[keep],
            context_tokens=trace.context_tokens[keep],
            generated_tokens=trace.generated_tokens[keep],
            duration_s=duration_s,
            name=trace.name,
            description=f"{trace.description}; first {duration_s:g} s",
        )
    if trace.duration_s <= 0:
        raise LoadError("cannot loop a trace of zero duration")
    loops = math.ceil(duration_s / trace.duration_s)
    t = np.concatenate([trace.arrival_s + k * trace.duration_s for k in range(loops)])
    ctx = np.tile(trace.context_tokens, loops)
    gen = np.tile(trace.generated_tokens, loops)
    keep = t < duration_s
    return Trace(
        arrival_s=t[keep],
        context_tokens=ctx[keep],
        generated_tokens=gen[keep],
        duration_s=duration_s,
        name=trace.name,
        description=f"{trace.description}; looped to {duration_s:g} s",
    )


def _rate_function(kind: SyntheticKind, base: float, duration_s: float) -> Callable[[FloatArray], FloatArray]:
    if kind == "step":

        def step(t: FloatArray) -> FloatArray:
            high = (t >= duration_s / 3) & (t < 2 * duration_s / 3)
            return np.where(high, 3.0 * base, base)

        return step
    if kind == "diurnal":

        def diurnal(t: FloatArray) -> FloatArray:
            return base * (0.3 + 1.7 * (1 - np.cos(2 * np.pi * t / duration_s)) / 2)

        return diurnal
    if kind == "flash":
        t0, ramp_s, tau_s, peak = 0.4 * duration_s, 30.0, 120.0, 6.0

        def flash(t: FloatArray) -> FloatArray:
            up = np.clip((t - t0) / ramp_s, 0.0, 1.0)
            down = np.where(t > t0 + ramp_s, np.exp(-(t - t0 - ramp_s) / tau_s), 1.0)
            return base * (1.0 + (peak - 1.0) * up * down)

        return flash
    if kind == "constant":
        return lambda t: np.full_like(t, base)
    raise LoadError(f"synthetic must be one of {', '.join(LOAD_SHAPES)}, got {kind!r}")


def synthetic(
    kind: SyntheticKind,
    *,
    duration_s: float = 3600.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    token_source: Trace | None = None,
    base_rps: float | None = None,
) -> Trace:
    """A seeded synthetic load (see the module docstring for the shapes and the token model)."""
    if kind not in LOAD_SHAPES:
        raise LoadError(f"synthetic must be one of {', '.join(LOAD_SHAPES)}, got {kind!r}")
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise LoadError(f"duration must be > 0 s, got {duration_s}")
    if not (rate_scale > 0 and math.isfinite(rate_scale)):
        raise LoadError(f"rate_scale must be > 0, got {rate_scale}")
    if base_rps is not None and not (base_rps > 0 and math.isfinite(base_rps)):
        raise LoadError(f"base_rps must be > 0, got {base_rps}")
    base = TRACE_MEAN_RATE_PER_S * rate_scale if base_rps is None else base_rps
    rate = _rate_function(kind, base, duration_s)
    grid = np.linspace(0.0, duration_s, 4097)
    lam_max = float(rate(grid).max()) * 1.0001
    rng = np.random.default_rng(seed)
    n_cand = rng.poisson(lam_max * duration_s)
    cand = np.sort(rng.random(n_cand) * duration_s)
    keep = rng.random(n_cand) * lam_max < rate(cand)
    t = cand[keep]
    n = len(t)
    if token_source is not None and len(token_source):
        pick = rng.integers(0, len(token_source), n)
        ctx = token_source.context_tokens[pick]
        gen = token_source.generated_tokens[pick]
        tok_desc = f"tokens resampled from {token_source.name}"
    else:
        ctx = _lognormal(rng, _CTX_MEDIAN, _CTX_P99, n)
        gen = _lognormal(rng, _GEN_MEDIAN, _GEN_P99, n)
        tok_desc = "tokens lognormal (fit to the Azure conversation trace)"
    return Trace(
        arrival_s=t,
        context_tokens=ctx,
        generated_tokens=gen,
        duration_s=duration_s,
        name=f"synthetic-{kind}",
        description=(
            f"synthetic {kind}: Poisson, base {base:.1f} req/s"
            f"{f' (5.5 × {rate_scale:g})' if base_rps is None else ''}, "
            f"{duration_s:g} s, seed {seed}, {tok_desc}"
        ),
    )


def _lognormal(rng: np.random.Generator, median: float, p99: float, n: int) -> IntArray:
    sigma = math.log(p99 / median) / _Z99
    return np.maximum(1, np.round(rng.lognormal(math.log(median), sigma, n))).astype(np.int64)


def load_default_tokens() -> Trace | None:
    """The shared trace for token resampling, or None when it is not available (lognormal fallback)."""
    try:
        return load_azure_csv(DEFAULT_TRACE)
    except ValueError:
        return None


def delayed(trace: Trace, idle_s: float) -> Trace:
    """The trace after `idle_s` seconds without any request (a pool that runs idle before its load)."""
    if not (idle_s >= 0 and math.isfinite(idle_s)):
        raise LoadError(f"idle time before the load must be >= 0 s, got {idle_s}")
    if idle_s == 0:
        return trace
    return Trace(
        arrival_s=trace.arrival_s + idle_s,
        context_tokens=trace.context_tokens,
        generated_tokens=trace.generated_tokens,
        duration_s=trace.duration_s + idle_s,
        name=trace.name,
        description=f"{trace.description}; after {idle_s:g} s idle",
    )


def segment(trace: Trace, start_s: float, duration_s: float) -> Trace:
    """The requests in `[start_s, start_s + duration_s)`, shifted to start at 0 (a window of a trace)."""
    if not (start_s >= 0 and math.isfinite(start_s)):
        raise LoadError(f"segment start must be >= 0 s, got {start_s}")
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise LoadError(f"segment duration must be > 0 s, got {duration_s}")
    if start_s + duration_s > trace.duration_s:
        raise LoadError(
            f"segment [{start_s:g}, {start_s + duration_s:g}) s ends past the trace ({trace.duration_s:g} s)"
        )
    keep = (trace.arrival_s >= start_s) & (trace.arrival_s < start_s + duration_s)
    return Trace(
        arrival_s=trace.arrival_s[keep] - start_s,
        context_tokens=trace.context_tokens[keep],
        generated_tokens=trace.generated_tokens[keep],
        duration_s=duration_s,
        name=trace.name,
        description=f"{trace.description}; segment [{start_s:g}, {start_s + duration_s:g}) s",
    )
