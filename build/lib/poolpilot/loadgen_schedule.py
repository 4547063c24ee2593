"""Arrival schedules for the load generator: the Azure LLM trace, or seeded synthetic shapes.

Pure (no I/O beyond reading the trace file handed in, no clock): a schedule is a list of
:class:`Arrival` offsets from the start of the run, so the sender can be open-loop — each request
leaves at its offset whatever earlier responses do — and tests can check the shape exactly.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import numpy as np

SYNTHETIC_KINDS: Final = ("constant", "step", "diurnal", "flash")
"""Shapes of :func:`rate_at`: constant (Poisson at the base rate); step (base, then base × peak factor
from half-time on); diurnal (one day compressed into the run: base at the ends, base × peak factor at
half-time); flash (base, with a flash crowd of base × peak factor from 40 % to 60 % of the run)."""

TRACE_COLUMNS: Final = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request: when it leaves (seconds after the run starts) and its LLM token counts."""

    offset_s: float
    context_tokens: int = 0
    generated_tokens: int = 0


class ScheduleError(ValueError):
    """Bad trace file or schedule parameters; the message names the field (and row)."""


def read_azure_trace(
    path: str | Path,
    *,
    rate_scale: float = 1.0,
    start_offset_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[Arrival]:
    """Read an Azure LLM trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``) into a schedule.

    Offsets are relative to the first kept row. ``rate_scale`` > 1 compresses time (2.0 = twice
    the request rate, same order and token counts). ``start_offset_s`` skips that much trace time
    (before scaling); ``duration_s`` (after scaling) and ``max_requests`` bound the result.
    """
    _check_positive("rate_scale", rate_scale)
    _check_bounds(duration_s=duration_s, max_requests=max_requests)
    if start_offset_s < 0:
        raise ScheduleError(f"start_offset_s must be >= 0, got {start_offset_s}")
    path = Path(path)
    stamps: list[tuple[float, int, int]] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ScheduleError(
                f"{path}: missing column(s) {missing}; expected header {','.join(TRACE_COLUMNS)}"
            )
        for line_no, row in enumerate(reader, start=2):
            stamps.append(_parse_row(path, line_no, row))
    if not stamps:
        raise ScheduleError(f"{path}: trace has no rows")
    stamps.sort(key=lambda s: s[0])  # the trace is nearly, not strictly, sorted

    first = stamps[0][0] + start_offset_s
    out: list[Arrival] = []
    for t, ctx, gen in stamps:
        if t < first:
            continue
        offset_s = (t - first) / rate_scale
        if duration_s is not None and offset_s >= duration_s:
            break
        out.append(Arrival(offset_s=offset_s, context_tokens=ctx, generated_tokens=gen))
        if max_requests is not None and len(out) >= max_requests:
            break
    if not out:
        raise ScheduleError(f"{path}: no rows left after start_offset_s={start_offset_s}")
    return out


def _parse_row(path: Path, line_no: int, row: dict[str, str]) -> tuple[float, int, int]:
    raw_ts = (row.get("TIMESTAMP") or "").strip()
    try:
        ts = datetime.fromisoformat(raw_ts).timestamp()
    except ValueError:
        raise ScheduleError(f"{path}:{line_no}: TIMESTAMP {raw_ts!r} is not an ISO date-time") from None
    counts: list[int] = []
    for column in ("ContextTokens", "GeneratedTokens"):
        raw = (row.get(column) or "").strip()
        try:
            value = int(raw)
        except ValueError:
            raise ScheduleError(f"{path}:{line_no}: {column} {raw!r} is not an integer") from None
        if value < 0:
            raise ScheduleError(f"{path}:{line_no}: {column} must be >= 0, got {value}")
        counts.append(value)
    return ts, counts[0], counts[1]


def rate_at(kind: str, t_s: float, *, base_rps: float, duration_s: float, peak_factor: float) -> float:
    """Intended arrival rate (requests/s) of a synthetic shape at time ``t_s`` into the run."""
    if kind == "constant":
        return base_rps
    if kind == "step":
        return base_rps * (peak_factor if t_s >= duration_s / 2 else 1.0)
    if kind == "flash":
        return base_rps * (peak_factor if 0.4 * duration_s <= t_s < 0.6 * duration_s else 1.0)
    if kind == "diurnal":
        # Trough base_rps at the start and end, crest base_rps·peak_factor at half-time.
        phase = 0.5 - 0.5 * math.cos(2 * math.pi * t_s / duration_s)
        return base_rps * (1.0 + (peak_factor - 1.0) * phase)
    raise ScheduleError(f"synthetic must be one of {', '.join(SYNTHETIC_KINDS)}, got {kind!r}")


def synthetic(
    kind: str,
    *,
    base_rps: float,
    duration_s: float,
    seed: int,
    peak_factor: float = 3.0,
    max_requests: int | None = None,
) -> list[Arrival]:
    """A seeded Poisson schedule whose rate follows :func:`rate_at` (non-homogeneous, by thinning).

    Token counts are drawn from a log-normal around the Azure conversation trace's medians
    (~1,000 context, ~100 generated tokens), so token-aware emulation sees varied requests.
    """
    if kind not in SYNTHETIC_KINDS:
        raise ScheduleError(f"synthetic must be one of {', '.join(SYNTHETIC_KINDS)}, got {kind!r}")
    _check_positive("base_rps", base_rps)
    _check_positive("duration_s", duration_s)
    _check_positive("peak_factor", peak_factor)
    _check_bounds(duration_s=duration_s, max_requests=max_requests)

    def rate(t: float) -> float:
        return rate_at(kind, t, base_rps=base_rps, duration_s=duration_s, peak_factor=peak_factor)

    return _thinned_poisson(rate, max(base_rps, base_rps * peak_factor), duration_s, seed, max_requests)


def _thinned_poisson(
    rate: Callable[[float], float], rate_max: float, duration_s: float, seed: int, max_requests: int | None
) -> list[Arrival]:
    rng = np.random.default_rng(seed)
    out: list[Arrival] = []
    t = 0.0
    while True:
        t += float(rng.exponential(1.0 / rate_max))
        if t >= duration_s:
            break
        if rng.random() * rate_max > rate(t):
            continue
        ctx = int(min(8192, rng.lognormal(mean=math.log(1000), sigma=0.8)))
        gen = int(max(1, min(2048, rng.lognormal(mean=math.log(100), sigma=0.8))))
        out.append(Arrival(offset_s=t, context_tokens=ctx, generated_tokens=gen))
        if max_requests is not None and len(out) >= max_requests:
            break
    return out


def mean_rate_rps(schedule: Iterable[Arrival]) -> float:
    """Requests per second over the schedule's span (first to last offset); 0 for < 2 arrivals."""
    offsets = [a.offset_s for a in schedule]
    if len(offsets) < 2 or offsets[-1] <= offsets[0]:
        return 0.0
    return (len(offsets) - 1) / (offsets[-1] - offsets[0])


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ScheduleError(f"{name} must be a finite number > 0, got {value}")


def _check_bounds(*, duration_s: float | None, max_requests: int | None) -> None:
    if duration_s is not None:
        _check_positive("duration_s", duration_s)
    if max_requests is not None and max_requests < 1:
        raise ScheduleError(f"max_requests must be >= 1, got {max_requests}")
