"""Triton's Prometheus metrics, with Triton's exact names, types and labels (triton.md §3).

Why hand-rolled exposition instead of `prometheus_client` metric objects: prometheus_client
appends `_total` to counter samples and its Summary has no quantiles, while Triton
(prometheus-cpp) exposes `nv_inference_count` without a suffix and summaries with `quantile`
labels over a 60 s sliding window. We render the text format ourselves; the tests parse it with
`prometheus_client.parser` to prove it is valid.

Everything here runs on the executor's event loop thread (no locks needed).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from poolpilot.triton import SUMMARY_WINDOW_S

Labels = tuple[tuple[str, str], ...]

# name -> (type, help); order = page order.
COUNTERS: dict[str, str] = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": "Number of model executions performed (does not include cached requests)",
    "nv_inference_request_duration_us": "Cumulative inference request duration in microseconds "
    "(includes cached requests)",
    "nv_inference_queue_duration_us": "Cumulative inference queuing duration in microseconds "
    "(includes cached requests)",
    "nv_inference_compute_input_duration_us": "Cumulative compute input duration in microseconds "
    "(does not include cached requests)",
    "nv_inference_compute_infer_duration_us": "Cumulative compute inference duration in microseconds "
    "(does not include cached requests)",
    "nv_inference_compute_output_duration_us": "Cumulative inference compute output duration in microseconds "
    "(does not include cached requests)",
}
TOKENS_COUNTER = "poolpilot_executor_tokens_total"
EXTRA_COUNTERS: dict[str, str] = {
    # Not a Triton metric: Triton counts inferences, not tokens. A production fleet gets token throughput from
    # the model (Triton's custom-metrics API) or its gateway; the operator reads it under the name set by
    # `--tokens-metric` for cost per 1k tokens. Our executor exports it so the sandbox has one.
    TOKENS_COUNTER: "Tokens in successfully served requests (the integer TOKENS input, summed)",
}
LATENCY_COUNTERS = frozenset(
    {
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    }
)
SUMMARIES: dict[str, str] = {
    "nv_inference_request_summary_us": "Summary of inference request duration in microseconds "
    "(includes cached requests)",
    "nv_inference_queue_summary_us": "Summary of inference queuing duration in microseconds "
    "(includes cached requests)",
    "nv_inference_compute_input_summary_us": "Summary of compute input duration in microseconds "
    "(does not include cached requests)",
    "nv_inference_compute_infer_summary_us": "Summary of compute inference duration in microseconds "
    "(does not include cached requests)",
    "nv_inference_compute_output_summary_us": "Summary of inference compute output duration in microseconds "
    "(does not include cached requests)",
}
PENDING = "nv_inference_pending_request_count"
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)


@dataclass(frozen=True)
class MetricsSettings:
    """`--metrics-config` switches (Triton names)."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    ignored: tuple[str, ...] = ()
    """Triton keys accepted for command-line compatibility but not implemented (histogram_latencies)."""

    @staticmethod
    def parse(entries: Iterable[str]) -> MetricsSettings:
        """Parse repeated `key=value` flags; unknown keys fail naming the key."""
        counter, summary, quantiles = True, False, DEFAULT_QUANTILES
        ignored: list[str] = []
        for entry in entries:
            key, sep, value = entry.partition("=")
            if not sep:
                raise ValueError(f"--metrics-config expects key=value, got {entry!r}")
            if key in ("counter_latencies", "summary_latencies"):
                if value not in ("true", "false"):
                    raise ValueError(f"--metrics-config {key} must be true or false, got {value!r}")
                if key == "counter_latencies":
                    counter = value == "true"
                else:
                    summary = value == "true"
            elif key == "summary_quantiles":
                parsed = []
                for part in value.split(","):
                    q, colon, err = part.partition(":")
                    try:
                        parsed.append((float(q), float(err) if colon else 0.0))
                    except ValueError:
                        raise ValueError(f"--metrics-config summary_quantiles: bad entry {part!r}") from None
                quantiles = tuple(parsed)
            elif key == "histogram_latencies":
                ignored.append(entry)
            else:
                raise ValueError(f"--metrics-config: unsupported key {key!r}")
        return MetricsSettings(counter, summary, quantiles, tuple(ignored))


@dataclass
class _Window:
    """Observations of the last SUMMARY_WINDOW_S seconds plus all-time count and sum."""

    samples: deque[tuple[float, float]] = field(default_factory=deque)
    count: int = 0
    total: float = 0.0

    def observe(self, now_s: float, value: float) -> None:
        self.samples.append((now_s, value))
        self.count += 1
        self.total += value
        self._trim(now_s)

    def _trim(self, now_s: float) -> None:
        horizon = now_s - SUMMARY_WINDOW_S
        while self.samples and self.samples[0][0] < horizon:
            self.samples.popleft()

    def quantile(self, now_s: float, q: float) -> float:
        self._trim(now_s)
        if not self.samples:
            return math.nan
        values = sorted(v for _, v in self.samples)
        index = min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))
        return values[index]


class MetricsRegistry:
    """The executor's metric state, rendered in Prometheus text format by :meth:`render`."""

    def __init__(self, settings: MetricsSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._clock = clock
        self._counters: dict[str, dict[Labels, float]] = {name: {} for name in {**COUNTERS, **EXTRA_COUNTERS}}
        self._summaries: dict[str, dict[Labels, _Window]] = {name: {} for name in SUMMARIES}
        self.gauge_sources: list[Callable[[], Iterable[tuple[str, str, Labels, float]]]] = []
        """Callables yielding (family, help, labels, value) gauge samples at scrape time."""

    def inc(self, name: str, labels: Labels, value: float = 1.0) -> None:
        if name in LATENCY_COUNTERS and not self.settings.counter_latencies:
            return
        series = self._counters[name]
        series[labels] = series.get(labels, 0.0) + value

    def ensure(self, labels: Labels) -> None:
        """Create a model's series at 0 on load, as Triton's reporter does."""
        for name in COUNTERS:
            if name == "nv_inference_request_failure":
                for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
                    self._counters[name].setdefault((*labels, ("reason", reason)), 0.0)
            elif name not in LATENCY_COUNTERS or self.settings.counter_latencies:
                self._counters[name].setdefault(labels, 0.0)

    def forget(self, labels: Labels) -> None:
        """Drop a model's series (unload destroys Triton's reporter, triton.md §3.4)."""
        prefix = len(labels)
        stores: list[dict[Labels, Any]] = [*self._counters.values(), *self._summaries.values()]
        for store in stores:
            for key in [k for k in store if k[:prefix] == labels]:
                del store[key]

    def observe(self, name: str, labels: Labels, value_us: float) -> None:
        if not self.settings.summary_latencies:
            return
        window = self._summaries[name].get(labels)
        if window is None:
            window = self._summaries[name][labels] = _Window()
        window.observe(self._clock(), value_us)

    def counter_value(self, name: str, labels: Labels) -> float:
        return self._counters[name].get(labels, 0.0)

    def render(self) -> str:
        lines: list[str] = []
        for name, help_text in {**COUNTERS, **EXTRA_COUNTERS}.items():
            series = self._counters[name]
            if not series:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            lines += [f"{name}{_fmt_labels(lbl)} {_fmt(v)}" for lbl, v in series.items()]
        gauges: dict[str, tuple[str, list[tuple[Labels, float]]]] = {}
        for source in self.gauge_sources:
            for family, help_text, lbl, value in source():
                gauges.setdefault(family, (help_text, []))[1].append((lbl, value))
        for family, (help_text, samples) in gauges.items():
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} gauge"]
            lines += [f"{family}{_fmt_labels(lbl)} {_fmt(v)}" for lbl, v in samples]
        now = self._clock()
        for name, help_text in SUMMARIES.items():
            windows = self._summaries[name]
            if not windows:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} summary"]
            for lbl, window in windows.items():
                for q, _err in self.settings.quantiles:
                    value = window.quantile(now, q)
                    lines.append(f"{name}{_fmt_labels((*lbl, ('quantile', _fmt(q))))} {_fmt(value)}")
                lines.append(f"{name}_count{_fmt_labels(lbl)} {window.count}")
                lines.append(f"{name}_sum{_fmt_labels(lbl)} {_fmt(window.total)}")
        return "\n".join(lines) + "\n"


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _fmt_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class BusyTracker:
    """Emulated `nv_gpu_utilization`: fraction of the last interval with ≥1 execution running.

    Same meaning as NVML's utilization.gpu (triton.md §3.7): a busy flag, not a load level.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._active = 0
        self._busy_since = 0.0
        self._busy_accum_s = 0.0
        self._last_sample_s = clock()
        self._last_accum_s = 0.0
        self.utilization = 0.0

    def start(self) -> None:
        if self._active == 0:
            self._busy_since = self._clock()
        self._active += 1

    def stop(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._busy_accum_s += self._clock() - self._busy_since

    def sample(self) -> float:
        """Close an interval (called every --metrics-interval-ms) and return its busy fraction."""
        now = self._clock()
        accum = self._busy_accum_s + (now - self._busy_since if self._active else 0.0)
        span = now - self._last_sample_s
        if span > 0:
            self.utilization = min(1.0, max(0.0, (accum - self._last_accum_s) / span))
        self._last_sample_s, self._last_accum_s = now, accum
        return self.utilization
