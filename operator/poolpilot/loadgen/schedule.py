"""Arrival schedules for the load generator, built on `poolpilot.loads` (the simulator's loads).

A schedule is a list of :class:`Arrival` offsets from the start of the run, so the sender can be
open-loop — each request leaves at its offset whatever earlier responses do — and tests can check the
shape exactly. The trace is parsed by `loads.load_azure_csv` and synthetic shapes come from
`loads.synthetic`, so `loadgen --synthetic K` sends what `simulate --synthetic K` simulates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poolpilot import loads
from poolpilot.loads import LoadError, Trace


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request: when it leaves (seconds after the run starts) and its LLM token counts."""

    offset_s: float
    context_tokens: int = 0
    generated_tokens: int = 0


def from_trace(trace: Trace, *, max_requests: int | None = None) -> list[Arrival]:
    """The trace's requests as a schedule (offsets as in the trace), at most `max_requests`."""
    n = len(trace) if max_requests is None else min(len(trace), max_requests)
    return [
        Arrival(offset_s=t, context_tokens=c, generated_tokens=g)
        for t, c, g in zip(
            trace.arrival_s[:n].tolist(),
            trace.context_tokens[:n].tolist(),
            trace.generated_tokens[:n].tolist(),
            strict=True,
        )
    ]


def read_azure_trace(
    path: str | Path,
    *,
    rate_scale: float = 1.0,
    start_offset_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[Arrival]:
    """An Azure LLM trace CSV as a schedule (parsed by `loads.load_azure_csv`).

    Offsets are relative to the first kept row. ``rate_scale`` > 1 compresses time (2.0 = twice
    the request rate, same order and token counts). ``start_offset_s`` skips that much trace time
    (before scaling); ``duration_s`` (after scaling) and ``max_requests`` bound the result.
    """
    _check_positive("rate_scale", rate_scale)
    _check_bounds(duration_s=duration_s, max_requests=max_requests)
    if not (start_offset_s >= 0 and math.isfinite(start_offset_s)):
        raise LoadError(f"start_offset_s must be >= 0, got {start_offset_s}")
    trace = loads.load_azure_csv(path)
    keep = trace.arrival_s >= start_offset_s
    if not bool(keep.any()):
        raise LoadError(f"{path}: no rows left after start_offset_s={start_offset_s}")
    t = trace.arrival_s[keep]
    offsets = (t - t[0]) / rate_scale
    inside = np.ones(len(offsets), dtype=bool) if duration_s is None else offsets < duration_s
    cut = Trace(
        arrival_s=offsets[inside],
        context_tokens=trace.context_tokens[keep][inside],
        generated_tokens=trace.generated_tokens[keep][inside],
        duration_s=float(duration_s if duration_s is not None else offsets[-1]),
        name=trace.name,
        description=trace.description,
    )
    return from_trace(cut, max_requests=max_requests)


def synthetic(
    kind: str,
    *,
    duration_s: float,
    seed: int,
    rate_scale: float = 1.0,
    base_rps: float | None = None,
    token_source: Trace | None = None,
    max_requests: int | None = None,
) -> list[Arrival]:
    """`loads.synthetic` as a schedule: the simulator's shape, rate, seed and tokens.

    The base rate is the shared trace's mean × ``rate_scale`` (as in ``simulate``), or ``base_rps``.
    """
    _check_bounds(duration_s=duration_s, max_requests=max_requests)
    if kind not in loads.LOAD_SHAPES:
        raise LoadError(f"synthetic must be one of {', '.join(loads.LOAD_SHAPES)}, got {kind!r}")
    trace = loads.synthetic(
        kind,  # type: ignore[arg-type]  # checked above
        duration_s=duration_s,
        rate_scale=rate_scale,
        seed=seed,
        token_source=token_source,
        base_rps=base_rps,
    )
    return from_trace(trace, max_requests=max_requests)


def mean_rate_rps(schedule: Iterable[Arrival]) -> float:
    """Requests per second over the schedule's span (first to last offset); 0 for < 2 arrivals."""
    offsets = [a.offset_s for a in schedule]
    if len(offsets) < 2 or offsets[-1] <= offsets[0]:
        return 0.0
    return (len(offsets) - 1) / (offsets[-1] - offsets[0])


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise LoadError(f"{name} must be a finite number > 0, got {value}")


def _check_bounds(*, duration_s: float | None, max_requests: int | None) -> None:
    if duration_s is not None:
        _check_positive("duration_s", duration_s)
    if max_requests is not None and max_requests < 1:
        raise LoadError(f"max_requests must be >= 1, got {max_requests}")
