"""Signals as Prometheus would give them to the operator, computed from scrapes, never from ground truth.

The engine scrapes the fleet every `scrape_interval_s` (15 s) into a `ScrapeSample`: pool-wide cumulative
counters (Triton's `nv_inference_*` summed over pods, counters continue across reloads), the
pending-request gauge, the GPU utilisation gauge and a router-side latency histogram. `PromStore.signals`
then answers like the operator's PromQL at query time `now_s`, using the samples in `(now − 60 s, now]`:

- rates: `(last − first) / (t_last − t_first)` over the samples in the window (Prometheus `rate()` without
  its edge extrapolation; a ratio of two rates is identical). Fewer than two samples ⇒ NaN.
- `p99_ms`: `histogram_quantile(q, rate(router_request_duration_ms_bucket[1m]))` on a ROUTER-side
  histogram of successful requests' end-to-end latency with buckets around the objective
  (`ROUTER_BUCKETS_MS`). This is what the policy gets: per-pod Triton summaries cannot be aggregated
  across pods, and Triton's own histogram has only first-response buckets of 100/500/2000/5000 ms
  (triton.md §3.2–3.3). Linear interpolation inside a bucket, as Prometheus does; a quantile in the
  +Inf bucket returns the largest finite bound. `p99_source="pod_summary_max"` (SimParams) gives the
  policy Triton's per-pod summary instead: each pod's exact quantile over its last 60 s of requests,
  max over pods (`max by (model) (nv_inference_request_summary_us{quantile="0.99"})`).
- `gpu_utilization`: `avg_over_time` of the per-pod gauge, averaged over ready pods. The gauge is the
  fraction of the last scrape interval during which the pod's GPU had at least one execution running
  (DCGM_FI_DEV_GPU_UTIL semantics: busy if any kernel ran; with instance_count > 1 this is not the
  instance-busy fraction).
- `queue_time_us`, `compute_us_per_exec`: Triton's per-request cumulative durations divided by the
  success rate (triton.md §3.6); compute is charged per request, so it is the batch duration weighted
  by batch size. `avg_batch_size` = inferences / executions.
- `failure_rate_by_reason`: `REJECTED` (queue-policy timeouts, Triton counts them), `QUEUE_FULL`
  (503 "Exceeds maximum queue size", counted at the router since Triton does not) and `NO_REPLICA`
  (router had no ready endpoint).
- `age_s`: now − time of the newest sample (inf when there is none: all fields NaN).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from poolpilot.policy.types import Signals

P99Source = Literal["router_histogram", "pod_summary_max"]

# Router histogram buckets (ms, `le`) for a 150 ms objective, dense around it; +Inf is implicit.
ROUTER_BUCKETS_MS: tuple[float, ...] = (
    10.0, 25.0, 50.0, 75.0, 100.0, 110.0, 120.0, 130.0, 140.0, 150.0, 160.0, 175.0, 200.0,
    250.0, 300.0, 400.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 10000.0,
)  # fmt: skip
_BUCKET_LAYOUT_SLO_MS = 150.0


def router_buckets_ms(slo_ms: float) -> tuple[float, ...]:
    """The router's buckets for an objective of `slo_ms`: the 150 ms layout scaled to it.

    Why: a histogram resolves a quantile only to its bucket width, and a platform team sets the router's
    buckets around its own objective (docs/operations.md). Fixed 150 ms buckets read a 388 ms p99 by
    linear interpolation inside 300–400 ms: found in the suite, 385 ms read as 395 ms, a miss that
    never was. Scaled, every objective gets the same relative resolution (±3 % near it).
    """
    if not (math.isfinite(slo_ms) and slo_ms > 0):
        raise ValueError(f"slo_ms must be a positive number, got {slo_ms!r}")
    scale = slo_ms / _BUCKET_LAYOUT_SLO_MS
    return tuple(round(b * scale, 3) for b in ROUTER_BUCKETS_MS)


@dataclass(frozen=True, slots=True)
class ScrapeSample:
    """One scrape of the pool: cumulative counters, gauges, cumulative histogram buckets."""

    t_s: float
    success: float
    rejected: float
    queue_full: float
    no_replica: float
    inferences: float
    execs: float
    request_us: float
    queue_us: float
    compute_us: float
    tokens: float
    pending: float
    gpu_util: float  # mean over ready pods of the busy fraction since the previous scrape; NaN if none
    ready_replicas: int
    hist: tuple[float, ...]  # cumulative count per router bucket (`router_buckets_ms`), then +Inf
    # max over pods of the per-pod summary quantile (60 s window), what
    # `max(nv_inference_request_summary_us{quantile="0.99"})` gives; NaN when no pod has data, and
    # not computed (NaN) unless SimParams.p99_source is "pod_summary_max" (summaries are off by default).
    summary_p99_max_ms: float = math.nan


def histogram_quantile(q: float, bounds: tuple[float, ...], counts: npt.ArrayLike) -> float:
    """Prometheus `histogram_quantile` over cumulative bucket counts.

    `counts[i]` is the cumulative count for `le=bounds[i]`; the last entry is `le=+Inf`.
    """
    c = np.asarray(counts, dtype=np.float64)
    total = float(c[-1]) if len(c) else 0.0
    if not total > 0:
        return math.nan
    rank = q * total
    i = int(np.searchsorted(c, rank, side="left"))
    if i >= len(bounds):  # in the +Inf bucket
        return float(bounds[-1])
    lower = 0.0 if i == 0 else float(bounds[i - 1])
    below = 0.0 if i == 0 else float(c[i - 1])
    in_bucket = float(c[i]) - below
    if in_bucket <= 0:
        return float(bounds[i])
    return lower + (float(bounds[i]) - lower) * (rank - below) / in_bucket


class PromStore:
    """The scraped time series of one pool, queried like the operator's PromQL."""

    def __init__(
        self,
        *,
        window_s: float = 60.0,
        quantile: float = 0.99,
        p99_source: P99Source = "router_histogram",
        buckets_ms: tuple[float, ...] = ROUTER_BUCKETS_MS,
    ) -> None:
        if p99_source not in ("router_histogram", "pod_summary_max"):
            raise ValueError(f"p99_source must be router_histogram or pod_summary_max, got {p99_source!r}")
        self.window_s = window_s
        self.quantile = quantile
        self.p99_source = p99_source
        self.buckets_ms = buckets_ms
        self.samples: list[ScrapeSample] = []
        self._times: list[float] = []

    def add(self, sample: ScrapeSample) -> None:
        if self._times and sample.t_s < self._times[-1]:
            raise ValueError("scrapes must be added in time order")
        self.samples.append(sample)
        self._times.append(sample.t_s)

    def window(self, now_s: float) -> list[ScrapeSample]:
        """Samples with t in (now − window, now]."""
        hi = bisect.bisect_right(self._times, now_s)
        lo = bisect.bisect_right(self._times, now_s - self.window_s)
        return self.samples[lo:hi]

    def rate_seen(self, now_s: float) -> float:
        """The inference rate the window's inferences arrived at, as the operator's query gives it
        (`queries.inferences_seen_query`): at steps of a quarter window back from `now_s` over the
        window less one step (the intervals the window's `rate()` spans), the `irate` of the latest two
        samples within two steps, averaged weighted by itself. NaN without inferences."""
        step = self.window_s / 4.0
        num = den = 0.0
        for k in range(3):
            t = now_s - k * step
            hi = bisect.bisect_right(self._times, t)
            if hi < 2 or self._times[hi - 2] <= t - 2 * step or self._times[hi - 2] <= now_s - self.window_s:
                continue
            a, b = self.samples[hi - 2], self.samples[hi - 1]
            dt = b.t_s - a.t_s
            r = (b.inferences - a.inferences) / dt if dt > 0 else 0.0
            if r > 0:
                num += r * r
                den += r
        return num / den if den > 0 else math.nan

    def signals(self, now_s: float) -> Signals:
        win = self.window(now_s)
        hi = bisect.bisect_right(self._times, now_s)
        if hi == 0:
            return Signals(age_s=math.inf)
        last = self.samples[hi - 1]
        age = now_s - last.t_s
        nan = math.nan
        w = self.window_s  # the pods' summaries and the rates span one window here
        if len(win) < 2:
            return Signals(
                pending_requests=last.pending,
                ready_replicas=last.ready_replicas,
                age_s=age,
                p99_window_s=w,
                rate_window_s=w,
            )
        first = win[0]
        last = win[-1]
        span = last.t_s - first.t_s

        def d(name: str) -> float:
            return float(getattr(last, name) - getattr(first, name))

        succ = d("success")
        execs = d("execs")
        utils = [s.gpu_util for s in win if not math.isnan(s.gpu_util)]
        buckets = np.asarray(last.hist) - np.asarray(first.hist)
        if self.p99_source == "pod_summary_max":
            p99 = last.summary_p99_max_ms
        else:
            p99 = histogram_quantile(self.quantile, self.buckets_ms, buckets)
        return Signals(
            p99_ms=p99,
            request_rate_per_s=(succ + d("rejected")) / span,
            inference_rate_per_s=d("inferences") / span,
            inference_rate_seen_per_s=self.rate_seen(now_s),
            gpu_utilization=float(np.mean(utils)) if utils else nan,
            queue_time_us=d("queue_us") / succ if succ > 0 else nan,
            avg_batch_size=d("inferences") / execs if execs > 0 else nan,
            compute_us_per_exec=d("compute_us") / succ if succ > 0 else nan,
            pending_requests=last.pending,
            mean_tokens_per_request=d("tokens") / succ if succ > 0 else nan,
            failure_rate_by_reason={
                "REJECTED": d("rejected") / span,
                "QUEUE_FULL": d("queue_full") / span,
                "NO_REPLICA": d("no_replica") / span,
            },
            ready_replicas=last.ready_replicas,
            age_s=age,
            p99_per_pod=self.p99_source == "pod_summary_max",
            p99_window_s=w,
            rate_window_s=w,
        )
