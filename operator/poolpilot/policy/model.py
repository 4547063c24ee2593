"""The per-pool latency model: a fitted batch-latency line and a queueing estimate of the tail.

Pure arithmetic, no I/O. Two parts:

* `observe` keeps batch latency ≈ a + b·batch fitted online from (average batch size, compute time per
  execution) pairs — an exponentially weighted least-squares fit regularised toward a prior line, so a
  pool that has only ever run one batch size keeps the prior slope and moves the intercept.
* `estimate` predicts the latency quantile of one replica for a candidate (queue delay, instances)
  at an arrival rate, from how Triton's dynamic batcher forms batches (triton.md §1.2). The formula
  and its check against a discrete-event batcher are in docs/policy.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

from poolpilot.api.types import InferencePoolSpec
from poolpilot.policy.params import PolicyParams
from poolpilot.policy.types import CurvePoint, LatencyModel


def with_spec_prior(spec: InferencePoolSpec, params: PolicyParams) -> PolicyParams:
    """`params` with the prior line the pool's spec declares (`spec.model.batchLatency`), if any.

    A measured profile of the model on its GPU is a better prior than any default; the pool's own
    executions still move the line (`observe`).
    """
    declared = spec.model.batch_latency
    if declared is None:
        return params
    return replace(params, prior_a_ms=declared.base_ms, prior_b_ms=declared.per_item_ms)


def prior_model(params: PolicyParams) -> LatencyModel:
    """The model of a pool that has not been observed yet."""
    return LatencyModel(a_ms=params.prior_a_ms, b_ms=params.prior_b_ms)


def _fit(m: LatencyModel, params: PolicyParams) -> tuple[float, float]:
    """Solve the 2x2 ridge normal equations toward the prior; slope kept positive."""
    pa = params.prior_intercept_weight
    pb = params.prior_slope_weight
    a0, b0 = params.prior_a_ms, params.prior_b_ms
    m11, m12, m22 = m.sum_w + pa, m.sum_x, m.sum_xx + pb
    r1, r2 = m.sum_y + pa * a0, m.sum_xy + pb * b0
    det = m11 * m22 - m12 * m12
    a = (r1 * m22 - m12 * r2) / det
    b = (m11 * r2 - m12 * r1) / det
    b_min = 1e-3 * max(params.prior_b_ms, 1e-9)
    if b < b_min:  # a flat or falling fit would make bigger batches free: keep a small positive slope
        b = b_min
        a = (r1 - m12 * b) / m11
    return max(a, 0.0), b


def observe(
    m: LatencyModel, *, batch_items: float, compute_ms: float, slowdown: float, params: PolicyParams
) -> LatencyModel:
    """Add one (average batch, compute time per execution) observation and refit.

    `slowdown` is the estimated interference of concurrent instances at the observed point
    (`Estimate.slowdown`); the line is kept for one execution alone.
    """
    y = compute_ms / max(slowdown, 1.0)
    d = params.fit_decay
    x = batch_items
    m = replace(
        m,
        sum_w=m.sum_w * d + 1.0,
        sum_x=m.sum_x * d + x,
        sum_y=m.sum_y * d + y,
        sum_xx=m.sum_xx * d + x * x,
        sum_xy=m.sum_xy * d + x * y,
        samples=m.samples + 1,
    )
    a, b = _fit(m, params)
    return replace(m, a_ms=a, b_ms=b)


def with_correction(m: LatencyModel, ratio: float, params: PolicyParams, *, dt_s: float) -> LatencyModel:
    """Blend a new measured/predicted p99 ratio into the correction (log-space EWMA, clamped).

    The peak correction decays toward the new correction with time constant
    `correction_peak_decay_s` (`dt_s` is the time since the previous tick).
    """
    ratio = min(max(ratio, params.correction_min), params.correction_max)
    al = params.correction_alpha
    c = math.exp((1 - al) * math.log(m.correction) + al * math.log(ratio))
    c = min(max(c, params.correction_min), params.correction_max)
    peak = m.correction_peak if m.correction_peak > 0 else c
    peak = c + (peak - c) * math.exp(-max(dt_s, 0.0) / params.correction_peak_decay_s)
    if peak - c <= params.correction_peak_snap * c:
        # Finish the decay: an exponential never arrives, and a scale-in threshold crossed by its
        # last 0.1 % hours later is a change on a steady load for no reason anyone could check.
        peak = c
    return replace(m, correction=c, correction_peak=max(peak, c))


def with_offset(
    m: LatencyModel,
    measured_ms: float,
    predicted_ms: float,
    params: PolicyParams,
    *,
    dt_s: float,
    cap_ms: float,
) -> LatencyModel:
    """Blend measured − predicted p99 into the additive correction (EWMA, clamped to ±`cap_ms`)."""
    diff = min(max(measured_ms - predicted_ms, -cap_ms), cap_ms)
    al = params.correction_alpha
    off = (1 - al) * m.offset_ms + al * diff
    peak = m.offset_peak_ms if math.isfinite(m.offset_peak_ms) else off
    peak = off + (peak - off) * math.exp(-max(dt_s, 0.0) / params.correction_peak_decay_s)
    if peak - off <= params.correction_peak_snap * max(predicted_ms, 1.0):
        peak = off  # finish the decay (see `with_correction`)
    return replace(m, offset_ms=off, offset_peak_ms=max(peak, off))


def with_measured_p99(
    m: LatencyModel,
    rate_per_replica: float,
    p99_ms: float,
    params: PolicyParams,
    *,
    now_s: float,
    replicas: int,
    window_s: float = 0.0,
) -> LatencyModel:
    """Record one window's p99 at its load per replica in the measured curve (the caller decides which
    windows describe one fleet: `_Tick.measure`).

    The entry within `curve_bucket_ratio` of the load takes it into an exponentially weighted mean and
    variance (weight `correction_alpha`) and counts it; a load not seen before starts an entry of its
    own. A reading less than `window_s` (the p99's window) after the entry's last one is dropped: ticks
    read overlapping windows, four to a 60 s window at a 15 s tick, and counted each they make a point's
    readings and its spread those of one window read four times, not of four windows (`curve_z`,
    `curve_min_readings`). Entries not measured for `curve_max_age_s` leave, then the least recently
    measured beyond the bound.
    """
    if not (math.isfinite(rate_per_replica) and rate_per_replica > 0 and math.isfinite(p99_ms)):
        return m
    al, half_band = params.correction_alpha, math.log(params.curve_bucket_ratio) / 2.0

    def gap(point: CurvePoint) -> float:
        return abs(math.log(point.rate_per_replica_per_s / rate_per_replica))

    near = min(m.p99_curve, key=gap, default=None)
    if near is not None and gap(near) > half_band:
        near = None
    if near is not None and now_s - near.seen_s < window_s:
        return m  # the same window as the point's last reading: not a new one
    if near is not None:
        diff = p99_ms - near.p99_mean_ms
        point = CurvePoint(
            rate_per_replica_per_s=(1 - al) * near.rate_per_replica_per_s + al * rate_per_replica,
            p99_mean_ms=near.p99_mean_ms + al * diff,
            p99_var_ms2=(1 - al) * (near.p99_var_ms2 + al * diff * diff),
            seen_s=now_s,
            replicas=max(near.replicas, replicas),
            readings=near.readings + 1,
        )
    else:
        point = CurvePoint(rate_per_replica, p99_ms, 0.0, now_s, replicas, 1)
    kept = [e for e in m.p99_curve if e is not near and now_s - e.seen_s <= params.curve_max_age_s]
    kept.append(point)
    kept.sort(key=lambda e: e.seen_s)
    newest = sorted(kept[-params.curve_max_entries :], key=lambda e: e.rate_per_replica_per_s)
    return replace(m, p99_curve=tuple(newest))


def curve_level(point: CurvePoint, z: float) -> float:
    """The p99 a measured point is judged by: its mean reading plus `z` standard deviations of the
    readings (one minute's p99 of bursty load is a draw; judged on the mean, half the windows miss)."""
    return point.p99_mean_ms + z * math.sqrt(max(point.p99_var_ms2, 0.0))


def scale_in_correction(m: LatencyModel) -> float:
    """The correction scale-in is checked with: the recent peak (conservative)."""
    return max(m.correction, m.correction_peak)


def pessimistic(m: LatencyModel) -> LatencyModel:
    """The model with its recent peak corrections: what scale-in and node release are checked with."""
    off = max(m.offset_ms, m.offset_peak_ms) if math.isfinite(m.offset_peak_ms) else m.offset_ms
    return replace(m, correction=scale_in_correction(m), offset_ms=off)


def corrected(m: LatencyModel, p99_ms: float, offset_scale: float = 1.0) -> float:
    """A raw model p99 with the pool's multiplicative/additive corrections applied.

    `offset_scale`: the additive tail was measured under the running setting; it is execution time (long
    requests), so a candidate whose concurrent instances slow every execution by a different factor
    scales it by that factor's ratio (`instance_offset_scale`).
    """
    return p99_ms * m.correction + m.offset_ms * offset_scale


def instance_offset_scale(instances: int, running_instances: int, params: PolicyParams) -> float:
    """How the measured additive tail transfers to `instances` from the `running_instances` it was seen at.

    Interference slows every execution on the GPU, the long ones too: a tail of 100 ms measured with one
    instance is 180 ms with two at the default `instance_slowdown` 0.8 (found on dev seed 9: a second
    instance predicted to save 20 % of a 240-replica fleet took its p99 from 300 to 480 ms).
    """
    s = params.instance_slowdown
    return (1.0 + s * (max(instances, 1) - 1)) / (1.0 + s * (max(running_instances, 1) - 1))


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted behaviour of one replica under a candidate configuration."""

    p99_ms: float  # uncorrected: `corrected(model, p99_ms)` is the prediction
    mean_batch_items: float
    batch_latency_ms: float  # at the mean batch
    wait_p99_ms: float
    utilization: float  # demand / capacity with full batches (inf when overloaded)
    slowdown: float = 1.0  # execution-time factor from concurrent instances on the GPU


def _erlang_c(k: int, offered: float) -> float:
    """Probability that an arrival finds all k servers busy (M/M/k), offered load in servers."""
    if offered <= 0:
        return 0.0
    if offered >= k:
        return 1.0
    term = 1.0
    total = 1.0
    for i in range(1, k):
        term *= offered / i
        total += term
    last = term * offered / k * k / (k - offered)
    return last / (total + last)


_Z_CACHE: dict[float, float] = {}


def z_score(quantile: float) -> float:
    """Standard normal quantile, cached (the search calls it for every candidate)."""
    z = _Z_CACHE.get(quantile)
    if z is None:
        z = NormalDist().inv_cdf(quantile)
        _Z_CACHE[quantile] = z
    return z


def estimate(
    m: LatencyModel,
    *,
    rate_per_s: float,
    max_queue_delay_us: int,
    instance_count: int,
    max_batch_size: int,
    quantile: float,
    items_per_request: float,
    params: PolicyParams,
    replicas: int = 1,
) -> Estimate:
    """Latency quantile of one replica receiving `rate_per_s` inferences/s (Poisson) under a config.

    Batches form in one of two regimes. Busy: every instance is executing, and a batch is whatever
    arrived while the soonest instance ran, B = λa / (k − λb). Delay-bound: a free instance waits
    until the oldest request has waited the queue delay D, B = 1 + λD. The quantile is the wait for
    a batch to go (the delay, or an instance's residual execution when all are busy — Erlang-C
    probability, uniform residual) plus the batch latency at the batch size's own quantile, plus a
    tail term that grows as demand nears the capacity with full batches.
    """
    return Estimate(
        *core(
            m.a_ms,
            m.b_ms,
            rate_per_s / 1000.0,
            max_queue_delay_us / 1000.0,
            instance_count,
            max_batch_size,
            z_score(quantile),
            1.0 - quantile,
            items_per_request,
            arrival_cv2(params, replicas),
            params.instance_slowdown,
            params.wait_model == "renewal",
            m.spread_ms,
        )
    )


_ERLANG_Q: dict[tuple[int, float], float] = {}


def erlang_quantile(shape: int, p: float) -> float:
    """p-quantile of an Erlang(shape) variable of MEAN 1 (cached: the search asks for few shapes).

    Exact CDF, 1 − e^(−x) Σ_{n<shape} x^n/n! with x in rate units, inverted by bisection.
    """
    key = (shape, p)
    got = _ERLANG_Q.get(key)
    if got is not None:
        return got

    def cdf(x: float) -> float:
        term, total = 1.0, 1.0
        for n in range(1, shape):
            term *= x / n
            total += term
        return 1.0 - math.exp(-x) * total

    lo, hi = 0.0, float(shape)
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    got = 0.5 * (lo + hi) / shape
    _ERLANG_Q[key] = got
    return got


def _wait_one_instance(
    a: float, b: float, lam: float, lat: float, items: float, d_ms: float, tail_q: float, arrival_cv2: float
) -> float:
    """Wait quantile of one instance fed by renewal arrivals (interarrival CV² = `arrival_cv2`).

    Busy (one request's execution outlasts the mean gap, λ·L₁ ≥ 1): the instance never idles and an
    arrival waits out the running batch, up to its whole length (or the queue delay, if longer).
    Otherwise a request that comes X after the previous one finds the instance busy for L − X more
    (with a queue delay D: the previous batch left at D and runs until D + L, so a request arriving
    at X ≥ D waits D + L − X; one arriving before D rides along). Its quantile uses the low quantile of
    X ~ Erlang(1/CV²) scaled to the mean gap 1/λ: Poisson (random routing) is shape 1; round robin
    over r replicas is shape r, nearly regular — a fleet whose per-replica gap is longer than one
    execution barely queues, and its p99 is ~L, not ~2·L. Checked against the simulator's engine in
    tests/sim/test_model_vs_engine.py.
    """
    shape = max(1, min(1024, round(1.0 / max(arrival_cv2, 1e-3))))
    gap_q = erlang_quantile(shape, tail_q) / lam
    behind = max(0.0, lat - gap_q) if d_ms <= 0 else d_ms + max(0.0, lat - max(gap_q, d_ms))
    if lam * (a + b * items) >= 1.0:
        # Never below the idle-regime value: the estimate must not drop as load crosses into "busy".
        return max(lat * (1.0 - tail_q), d_ms, behind)
    return behind


def arrival_cv2(params: PolicyParams, replicas: int) -> float:
    """Variability of one replica's arrivals: round robin over r replicas smooths Poisson to ~1/r."""
    if params.router == "round_robin":
        return 1.0 / max(replicas, 1)
    return 1.0


_EULER_GAMMA = 0.5772156649015329
_SHARE_AT_P99 = math.log(100.0) - 1.0


def straggler_share(batch: float) -> float:
    """How far the longest of `batch` requests' costs lies above their mean, as a share of the p99's.

    For an exponential tail the expected maximum of B draws lies H_B - 1 means above the mean (H_B the
    harmonic number, here ln(B + 1/2) + γ) and the p99 lies ln 100 - 1 above it. 0 at batch 1. Checked
    on the suite's long-prompt mix (lognormal): within 4 % of the true mean batch time up to batch 29
    (docs/generalization.md)."""
    if batch <= 1.0:
        return 0.0
    return max(0.0, math.log(batch + 0.5) + _EULER_GAMMA - 1.0) / _SHARE_AT_P99


def core(
    a: float,
    b: float,
    lam: float,
    d_ms: float,
    k: int,
    big_m: int,
    z: float,
    tail_q: float,
    items: float,
    arrival_cv2: float = 1.0,
    interference: float = 0.0,
    renewal: bool = True,
    spread: float = 0.0,
) -> tuple[float, float, float, float, float, float]:
    """`estimate` on plain numbers (hot path): (p99, batch, latency, wait, utilisation, slowdown).

    `lam` is per millisecond. `interference` is the slowdown one concurrently running instance adds
    to an execution on the same GPU, counted for all k − 1 others. `arrival_cv2` is the
    squared coefficient of variation of one replica's inter-arrival times: 1 for Poisson (random
    routing), about 1/replicas behind a round-robin router; it scales the chance of finding every
    instance busy and the spread of batch sizes. `spread` (ms, `LatencyModel.spread_ms`) adds a batch's wait
    for its longest request to the line: spread · `straggler_share`(batch).
    """
    # Worst case: every other instance runs alongside. A load-dependent share looked closer on paper
    # but picked more instances than pay off in the fleet simulator (see docs/policy.md).
    slow = 1.0 + interference * (k - 1)
    a, b, spread = a * slow, b * slow, spread * slow
    l_full = a + b * big_m + (spread * straggler_share(big_m) if spread > 0 else 0.0)
    if lam <= 0:
        l1 = a + b * min(items, big_m)
        return l1 + d_ms, 1.0, l1, d_ms, 0.0, slow
    util = lam * l_full / (k * big_m)
    if lam * b >= k or util >= 1.0:
        return math.inf, float(big_m), l_full, math.inf, math.inf, slow
    batch_busy = lam * a / (k - lam * b)
    if spread > 0:
        # B = λ(a + b·B + spread·share(B))/k: the share is concave and below 1, so the iteration from
        # the line's answer rises to the fixed point (util < 1 bounds it by max_batch_size).
        for _ in range(8):
            nxt = lam * (a + spread * straggler_share(batch_busy)) / (k - lam * b)
            done = nxt - batch_busy < 1e-3 or nxt >= big_m
            batch_busy = nxt
            if done:
                break
    batch_delay = items + lam * d_ms
    batch = max(items, batch_busy, batch_delay)
    if batch > big_m:
        batch = float(big_m)
    extra = spread * straggler_share(batch) if spread > 0 else 0.0
    lat = a + b * batch + extra
    a_eff = a + extra  # the straggler at this batch is a fixed cost of each execution
    # Probability an arriving batch finds every instance busy; M/M/k overstates it for the nearly
    # deterministic service of k >= 2 instances (checked against a discrete-event batcher).
    if k == 1 and renewal:
        wait = _wait_one_instance(a_eff, b, lam, lat, items, d_ms, tail_q, arrival_cv2)
    else:
        offered = lam * lat / batch
        p_wait = min(offered, 0.999) if k == 1 else _erlang_c(k, min(offered, k * 0.999)) * min(1.0, 0.25 * k)
        p_wait *= arrival_cv2
        wait = lat * (1.0 - (tail_q / p_wait) ** (1.0 / k)) if p_wait > tail_q else 0.0
    if batch_delay >= batch_busy and d_ms > 0 and not (k == 1 and renewal):
        # Delay-bound: batches leave every D + 1/λ; instance j frees L after its dispatch, so a
        # request waits for an instance only when L exceeds k such intervals.
        if wait < d_ms:
            wait = d_ms
        wait = min(wait, max(d_ms, lat - (k - 1) * (d_ms + 1.0 / lam)))
    batch_q = batch + z * math.sqrt(batch * items * arrival_cv2)
    if batch_q > big_m:
        batch_q = float(big_m)
    tail = l_full * tail_q * util / (1.0 - util)
    return wait + a_eff + b * batch_q + tail, batch, lat, wait, util, slow
