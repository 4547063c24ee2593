"""Discrete-event simulation of one Triton pool on a GPU node pool, on a virtual clock.

What is modelled (see `SimParams` for every number):
- Router: round-robin over READY pods, like a Kubernetes Service (kube-proxy has no load awareness).
  No ready pod ⇒ the request is answered 503 at once (status `REJECTED_NO_REPLICA`).
- Each pod: one `poolpilot.triton.batcher.BatchQueue` (Triton's dynamic-batcher rules, shared with the
  CPU executor) and `instance_count` concurrent executions on its GPU. A batch's latency is
  `SimParams`'s curve (a + b·batch, plus the token straggler term and instance interference).
- Pod lifecycle: a pod needs `gpus_per_replica` GPUs on a READY node (else it stays Pending); it starts
  serving `pod_start_s` (60 s) after it got its GPUs. Scale-in removes Pending pods first, then
  starting ones, then ready ones (newest first); a removed ready pod leaves the router at once and
  drains its queue before it frees its GPUs (graceful termination).
- Nodes: a requested node is billed from the request and ready `node_provisioning_s` (300 s) later.
  Removal takes provisioning nodes first (newest first), then ready nodes, but never below what the
  existing pods occupy (pods are assumed perfectly packed; like Cluster Autoscaler, only empty nodes go).
- Batching change: a background reload on every pod (`reload_s`); the old config keeps serving until
  the swap, then every pod's queue is reconfigured (queued requests take the new settings). A newer
  change during a reload supersedes it. Pods that become ready load the config currently swapped in.
- Billing: GPU-hours = GPUs of nodes that exist (provisioning or ready) × time, over [0, duration_s]:
  that is what a cloud bills. `replica_gpu_hours` counts GPUs held by pods (starting, ready, draining).
- Signals: every `scrape_interval_s` the engine scrapes counters/gauges into `signals.PromStore`; the
  controller sees only `PromStore.signals(now)` (see signals.py), never per-request ground truth.
  Controller ticks run at `k·interval_s + control_phase_s`.

Optional controller attributes read with getattr: `initial_replicas: int | None` and
`initial_batching: BatchingConfig | None` (the fleet at t=0, ready, with its nodes). Otherwise the
engine starts every policy with the same warm fleet (`initial_replicas` argument) and Triton's default
batching (`dynamic_batching { }`: delay 0, preferred [max_batch_size], one instance).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from poolpilot.loads import Trace
from poolpilot.policy.types import BatchingConfig
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Action, Controller, Observation
from poolpilot.sim.signals import (
    ROUTER_BUCKETS_MS,
    PromStore,
    ScrapeSample,
    histogram_quantile,
    router_buckets_ms,
)
from poolpilot.triton.batcher import BatcherConfig, BatchQueue, QueuePolicy

# Request status codes in `EngineOutput.status`.
OK = 0
REJECTED_TIMEOUT = 1
REJECTED_QUEUE_FULL = 2
REJECTED_NO_REPLICA = 3
STATUS_NAMES = {
    OK: "ok",
    REJECTED_TIMEOUT: "rejected-timeout",
    REJECTED_QUEUE_FULL: "rejected-queue-full",
    REJECTED_NO_REPLICA: "rejected-no-replica",
}

_PENDING, _STARTING, _READY, _DRAINING, _GONE = range(5)
_EV_COMPLETE, _EV_WAKE, _EV_SCRAPE, _EV_TICK, _EV_POD_READY, _EV_NODE_READY, _EV_SWAP = range(7)


def default_batching(params: SimParams) -> BatchingConfig:
    """Triton's `dynamic_batching { }` as `GET .../config` shows it after normalisation."""
    mbs = params.model_max_batch_size
    return BatchingConfig(
        max_queue_delay_us=0, max_batch_size=mbs, preferred_batch_sizes=(mbs,), instance_count=1
    )


def batcher_config(b: BatchingConfig, params: SimParams) -> BatcherConfig:
    """The pod-side Triton config for a `BatchingConfig`; a config Triton would refuse is a ValueError."""
    if not 1 <= b.max_batch_size <= params.model_max_batch_size:
        raise ValueError(
            f"batching.max_batch_size must be in [1, {params.model_max_batch_size}] (the model's), "
            f"got {b.max_batch_size}"
        )
    if b.instance_count < 1:
        raise ValueError(f"batching.instance_count must be >= 1, got {b.instance_count}")
    if b.max_queue_delay_us < 0:
        raise ValueError(f"batching.max_queue_delay_us must be >= 0, got {b.max_queue_delay_us}")
    try:
        return BatcherConfig(
            max_batch_size=b.max_batch_size,
            preferred_batch_sizes=tuple(b.preferred_batch_sizes),
            max_queue_delay_us=b.max_queue_delay_us,
            default_queue_policy=QueuePolicy(
                timeout_action="REJECT",
                default_timeout_us=b.queue_timeout_us or 0,
                max_queue_size=b.max_queue_size,
            ),
        )
    except ValueError as exc:
        raise ValueError(f"batching: {exc}") from None


class _Pod:
    __slots__ = (
        "busy_mark",
        "busy_s",
        "busy_since",
        "instances",
        "pid",
        "queue",
        "ready_s",
        "running",
        "state",
        "wake_at",
    )

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.state = _PENDING
        self.queue: BatchQueue[int] | None = None
        self.instances = 1
        self.running = 0
        self.busy_since = 0.0
        self.busy_s = 0.0
        self.busy_mark = 0.0  # busy seconds at the previous scrape
        self.ready_s = math.inf
        self.wake_at: float | None = None

    def busy_total(self, now_s: float) -> float:
        return self.busy_s + (now_s - self.busy_since if self.running else 0.0)


def pod_summary_max_ms(recent: list[tuple[float, np.ndarray, np.ndarray]], q: float) -> float:
    """Max over pods of each pod's q-quantile in the window: Triton's per-pod summaries read with `max`."""
    if not recent:
        return math.nan
    lat = np.concatenate([r[1] for r in recent])
    pod = np.concatenate([r[2] for r in recent])
    if len(lat) == 0:
        return math.nan
    order = np.lexsort((lat, pod))
    pod_s, lat_s = pod[order], lat[order]
    bounds = np.flatnonzero(np.diff(pod_s)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(pod_s)]))
    ranks = np.minimum(ends - 1, starts + np.ceil(q * (ends - starts)).astype(np.int64) - 1)
    return float(lat_s[np.maximum(ranks, starts)].max())


class _FleetState:
    """Mutable fleet-wide counters of one run (typed, unlike a dict)."""

    __slots__ = (
        "acc_t",
        "batching_changes",
        "busy_done_s",
        "desired",
        "node_s",
        "node_target",
        "peak_nodes",
        "peak_replicas",
        "pod_gpu_s",
        "ready_nodes",
        "replica_changes",
    )

    def __init__(self) -> None:
        self.desired = 0  # replicas set on the workload
        self.ready_nodes = 0
        self.node_target = 0
        self.acc_t = 0.0  # billing integrated up to here
        self.node_s = 0.0  # node-seconds billed
        self.pod_gpu_s = 0.0  # GPU-seconds held by pods
        self.busy_done_s = 0.0  # busy GPU-seconds of pods already gone
        self.replica_changes = 0
        self.batching_changes = 0
        self.peak_replicas = 0
        self.peak_nodes = 0


FloatArray = npt.NDArray[np.float64]


@dataclass
class EngineOutput:
    """Raw results of one run: per-request arrays, billing integrals, a time series per scrape."""

    arrival_s: FloatArray
    tokens: npt.NDArray[np.int64]
    finish_s: FloatArray  # completion (or rejection) time
    start_s: FloatArray  # execution start (NaN if rejected)
    status: npt.NDArray[np.int8]
    duration_s: float
    node_gpu_hours: float
    node_hours: float
    replica_gpu_hours: float
    busy_gpu_hours: float
    replica_changes: int
    batching_changes: int
    peak_replicas: int
    peak_nodes: int
    series: dict[str, list[float]]
    scrapes: list[ScrapeSample]
    decisions: list[dict[str, Any]]
    wall_s: float
    cpu_s: float  # process CPU time of the run (robust when the machine is shared)
    executions: int
    dispatched_requests: int  # requests handed to an execution (each exactly once if the engine is right)
    rejected_requests: int
    aborted: bool = False  # stopped at `miss_limit`: arrays partial (status -1 = not finished)
    simulated_requests: int = 0  # arrivals routed before the run ended (all of them unless aborted)

    @property
    def latency_ms(self) -> FloatArray:
        out: FloatArray = (self.finish_s - self.arrival_s) * 1000.0
        return out


@dataclass
class _Counters:
    rejected_timeout: int = 0
    rejected_full: int = 0
    rejected_norep: int = 0
    hist: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(len(ROUTER_BUCKETS_MS) + 1))
    success: float = 0.0
    execs: float = 0.0
    request_us: float = 0.0
    queue_us: float = 0.0
    compute_us: float = 0.0
    tokens: float = 0.0


class FleetEngine:
    """One run of one controller over one trace. Use `run()` once."""

    def __init__(
        self,
        trace: Trace,
        params: SimParams,
        controller: Controller,
        *,
        initial_replicas: int,
        initial_batching: BatchingConfig | None = None,
        miss_limit: int | None = None,
    ) -> None:
        self.trace = trace
        self.params = params
        self.controller = controller
        interval = float(controller.interval_s)
        if not interval > 0:
            raise ValueError(f"controller {controller.name!r}: interval_s must be > 0, got {interval}")
        self.interval_s = interval
        init = getattr(controller, "initial_replicas", None)
        self.initial_replicas = int(init) if init is not None else initial_replicas
        self.initial_replicas = max(0, min(self.initial_replicas, params.max_replicas))
        batching = (
            getattr(controller, "initial_batching", None) or initial_batching or default_batching(params)
        )
        batcher_config(batching, params)  # validate early
        self.batching: BatchingConfig = batching  # what the pods run
        self.batching_target: BatchingConfig = batching  # what was last asked for (reload in progress)
        self._swap_version = 0
        if miss_limit is not None and miss_limit < 1:
            raise ValueError(f"miss_limit must be >= 1 or None, got {miss_limit}")
        self.miss_limit = miss_limit

    # ------------------------------------------------------------------------------------------------
    def run(self) -> EngineOutput:
        p = self.params
        trace = self.trace
        wall0 = time.perf_counter()
        cpu0 = time.process_time()
        duration = float(trace.duration_s)
        arr_np = trace.arrival_s
        tok_np = trace.tokens
        arr = arr_np.tolist()
        tok = tok_np.tolist()
        n = len(arr)
        tok_get = tok.__getitem__
        batch_ms = p.gpu_curve.batch_ms
        shared_ms = p.gpu_curve.shared_ms

        heap: list[tuple[float, int, int, Any]] = []
        seq = itertools.count()
        push = heapq.heappush
        pop = heapq.heappop

        seg_items: list[int] = []
        seg_len: list[int] = []
        seg_start: list[float] = []
        seg_finish: list[float] = []
        seg_pod: list[int] = []
        # Per-scrape (latency ms, pod id) of completions, for the per-pod summary's 60 s window.
        recent: list[tuple[float, np.ndarray, np.ndarray]] = []
        want_summary = p.p99_source == "pod_summary_max"
        rej_idx: list[int] = []
        rej_t: list[float] = []
        rej_kind: list[int] = []
        cnt = _Counters()
        router_bounds_ms = router_buckets_ms(p.slo_ms)
        store = PromStore(
            window_s=p.rate_window_s,
            quantile=p.latency_quantile,
            p99_source=p.p99_source,
            buckets_ms=router_bounds_ms,
        )
        self.store = store

        pods: list[_Pod] = []
        router: list[_Pod] = []  # READY pods, mutated in place
        pid_counter = itertools.count()
        fs = _FleetState()
        prov_nodes: dict[int, float] = {}
        node_counter = itertools.count()
        decisions: list[dict[str, Any]] = []

        def gpu_pods() -> int:
            return sum(1 for q in pods if q.state in (_STARTING, _READY, _DRAINING))

        def accrue(now: float) -> None:
            t1 = min(now, duration)
            dt = t1 - fs.acc_t
            if dt > 0:
                fs.node_s += (fs.ready_nodes + len(prov_nodes)) * dt
                fs.pod_gpu_s += gpu_pods() * p.gpus_per_replica * dt
                fs.acc_t = t1

        def rebuild_router() -> None:
            router[:] = [q for q in pods if q.state == _READY]

        def reject(items: tuple[int, ...], now: float, kind: int) -> None:
            for i in items:
                rej_idx.append(i)
                rej_t.append(now)
                rej_kind.append(kind)
            if kind == REJECTED_TIMEOUT:
                cnt.rejected_timeout += len(items)

        def dispatch(pod: _Pod, now: float) -> None:
            q = pod.queue
            assert q is not None
            running = pod.running
            instances = pod.instances
            while running < instances and q.count:
                execute, rejected, wake = q.next_action(now, instances - running)
                if rejected:
                    reject(rejected, now, REJECTED_TIMEOUT)
                if not execute:
                    if wake is not None and wake != pod.wake_at:
                        pod.wake_at = wake
                        push(heap, (wake, next(seq), _EV_WAKE, pod))
                    break
                nb = len(execute)
                lat = batch_ms(nb, tok[execute[0]] if nb == 1 else max(map(tok_get, execute)))
                if running:
                    lat = shared_ms(lat, running)
                else:
                    pod.busy_since = now
                running += 1
                push(heap, (now + lat * 0.001, next(seq), _EV_COMPLETE, (pod, execute, now)))
            pod.running = running

        def schedule_pending(now: float) -> None:
            slots = fs.ready_nodes * p.replicas_per_node
            used = gpu_pods()
            for pod in pods:
                if used >= slots:
                    break
                if pod.state == _PENDING:
                    accrue(now)
                    pod.state = _STARTING
                    used += 1
                    if p.pod_start_s <= 0:
                        pod_ready(pod, now)
                    else:
                        push(heap, (now + p.pod_start_s, next(seq), _EV_POD_READY, pod))

        def pod_ready(pod: _Pod, now: float) -> None:
            if pod.state != _STARTING:
                return
            pod.state = _READY
            pod.ready_s = now
            pod.queue = BatchQueue(batcher_config(self.batching, p))
            pod.instances = self.batching.instance_count
            pod.busy_mark = 0.0
            rebuild_router()

        def pod_gone(pod: _Pod, now: float) -> None:
            accrue(now)
            pod.state = _GONE
            fs.busy_done_s += pod.busy_total(now)
            pods.remove(pod)
            schedule_pending(now)
            reconcile_nodes(now)

        def set_replicas(target: int, now: float) -> None:
            accrue(now)
            fs.desired = target
            live = [q for q in pods if q.state in (_PENDING, _STARTING, _READY)]
            if target > len(live):
                for _ in range(target - len(live)):
                    pods.append(_Pod(next(pid_counter)))
            elif target < len(live):
                surplus = len(live) - target
                # pending first, then starting, then ready; newest first within each
                order = sorted(live, key=lambda q: (q.state, -q.pid))
                for pod in order[:surplus]:
                    if pod.state in (_PENDING, _STARTING):
                        pod.state = _GONE
                        pods.remove(pod)
                    else:
                        pod.state = _DRAINING
                        if pod.running == 0 and pod.queue is not None and len(pod.queue) == 0:
                            pod_gone(pod, now)
                rebuild_router()
            fs.peak_replicas = max(fs.peak_replicas, target)
            schedule_pending(now)
            reconcile_nodes(now)

        def reconcile_nodes(now: float) -> None:
            accrue(now)
            target = max(fs.node_target, p.min_nodes)
            total = fs.ready_nodes + len(prov_nodes)
            if total < target:
                for _ in range(target - total):
                    nid = next(node_counter)
                    if p.node_provisioning_s <= 0:
                        fs.ready_nodes += 1
                    else:
                        prov_nodes[nid] = now + p.node_provisioning_s
                        push(heap, (now + p.node_provisioning_s, next(seq), _EV_NODE_READY, nid))
                schedule_pending(now)
            elif total > target:
                surplus = total - target
                for nid in sorted(prov_nodes, reverse=True):
                    if surplus == 0:
                        break
                    del prov_nodes[nid]
                    surplus -= 1
                needed = p.nodes_for(gpu_pods())
                removable = max(0, fs.ready_nodes - needed)
                take = min(surplus, removable)
                fs.ready_nodes -= take
            fs.peak_nodes = max(fs.peak_nodes, fs.ready_nodes + len(prov_nodes))

        def swap(now: float) -> None:
            self.batching = self.batching_target
            cfg = batcher_config(self.batching, p)
            for pod in pods:
                if pod.queue is not None and pod.state in (_READY, _DRAINING):
                    pod.queue.reconfigure(cfg)
                    pod.instances = self.batching.instance_count
                    pod.wake_at = None
                    dispatch(pod, now)

        last_scrape = [0.0, 0]  # time, arrival index at the previous scrape
        seg_scraped = [0, 0]  # segments, items already scraped
        series: dict[str, list[float]] = {
            k: []
            for k in (
                "t_s",
                "arrivals_per_s",
                "p99_ms",
                "p99_signal_ms",
                "replicas",
                "ready_replicas",
                "nodes",
                "ready_nodes",
                "queue_delay_ms",
                "gpu_utilization",
                "max_queue_delay_us",
                "max_batch_size",
                "instance_count",
                "rejected",
            )
        }
        bounds = np.asarray(router_bounds_ms)
        nb = len(router_bounds_ms) + 1
        rej_scraped = [0]

        def scrape(now: float, ai: int) -> None:
            lo, hi = seg_scraped[0], len(seg_len)
            i_lo = seg_scraped[1]
            p99_true = math.nan
            qdelay = math.nan
            if hi > lo:
                lens = np.asarray(seg_len[lo:hi], dtype=np.int64)
                fin = np.asarray(seg_finish[lo:hi])
                st = np.asarray(seg_start[lo:hi])
                i_hi = i_lo + int(lens.sum())
                items = np.asarray(seg_items[i_lo:i_hi], dtype=np.int64)
                a = arr_np[items]
                lat_ms = (np.repeat(fin, lens) - a) * 1000.0 + p.request_overhead_ms
                q_s = np.repeat(st, lens) - a
                cnt.success += len(items)
                cnt.execs += hi - lo
                cnt.request_us += float(lat_ms.sum()) * 1000.0
                cnt.queue_us += float(q_s.sum()) * 1e6
                cnt.compute_us += float(((fin - st) * lens).sum()) * 1e6
                cnt.tokens += float(tok_np[items].sum())
                cnt.hist += np.bincount(np.searchsorted(bounds, lat_ms, side="left"), minlength=nb)
                seg_scraped[0], seg_scraped[1] = hi, i_hi
                p99_true = float(np.quantile(lat_ms, p.latency_quantile))
                qdelay = float(q_s.mean()) * 1000.0
                if want_summary:
                    pod_ids = np.repeat(np.asarray(seg_pod[lo:hi], dtype=np.int64), lens)
                    recent.append((now, lat_ms, pod_ids))
            summary_max = math.nan
            if want_summary:
                while recent and recent[0][0] <= now - p.rate_window_s:
                    recent.pop(0)
                summary_max = pod_summary_max_ms(recent, p.latency_quantile)
            t_prev = last_scrape[0]
            utils = []
            for pod in router:
                busy = pod.busy_total(now)
                start = max(t_prev, pod.ready_s)
                if now > start:
                    utils.append(min(1.0, (busy - pod.busy_mark) / (now - start)))
                pod.busy_mark = busy
            for pod in pods:
                if pod.state == _DRAINING:
                    pod.busy_mark = pod.busy_total(now)
            util = float(np.mean(utils)) if utils else math.nan
            pending = float(sum(len(pod.queue) for pod in pods if pod.queue is not None))
            sample = ScrapeSample(
                t_s=now,
                success=cnt.success,
                rejected=cnt.rejected_timeout,
                queue_full=cnt.rejected_full,
                no_replica=cnt.rejected_norep,
                inferences=cnt.success,
                execs=cnt.execs,
                request_us=cnt.request_us,
                queue_us=cnt.queue_us,
                compute_us=cnt.compute_us,
                tokens=cnt.tokens,
                pending=pending,
                gpu_util=util,
                ready_replicas=len(router),
                hist=tuple(np.cumsum(cnt.hist).tolist()),
                summary_p99_max_ms=summary_max,
            )
            store.add(sample)
            sig_p99 = math.nan
            win = store.window(now)
            if len(win) >= 2:
                sig_p99 = histogram_quantile(
                    p.latency_quantile, router_bounds_ms, np.asarray(win[-1].hist) - np.asarray(win[0].hist)
                )
            dt = now - t_prev
            series["t_s"].append(now)
            series["arrivals_per_s"].append((ai - last_scrape[1]) / dt if dt > 0 else math.nan)
            series["p99_ms"].append(p99_true)
            series["p99_signal_ms"].append(sig_p99)
            series["replicas"].append(fs.desired)
            series["ready_replicas"].append(len(router))
            series["nodes"].append(fs.ready_nodes + len(prov_nodes))
            series["ready_nodes"].append(fs.ready_nodes)
            series["queue_delay_ms"].append(qdelay)
            series["gpu_utilization"].append(util)
            series["max_queue_delay_us"].append(self.batching.max_queue_delay_us)
            series["max_batch_size"].append(self.batching.max_batch_size)
            series["instance_count"].append(self.batching.instance_count)
            series["rejected"].append(len(rej_idx) - rej_scraped[0])
            rej_scraped[0] = len(rej_idx)
            last_scrape[0], last_scrape[1] = now, ai

        def tick(now: float) -> None:
            sig = store.signals(now)
            in_flight = float(sum(len(q.queue) + q.running for q in pods if q.queue is not None))
            latest = store.samples[-1].pending if store.samples else math.nan
            obs = Observation(
                now_s=now,
                signals=sig,
                replicas=fs.desired,
                ready_replicas=len(router),
                batching=self.batching,
                nodes=fs.ready_nodes + len(prov_nodes),
                ready_nodes=fs.ready_nodes,
                gpus_per_node=p.gpus_per_node,
                gpus_per_replica=p.gpus_per_replica,
                queue_length=latest,
                in_flight=in_flight,
            )
            action = self.controller.step(obs)
            apply(action, now)

        def apply(action: Action, now: float) -> None:
            changed: dict[str, Any] = {}
            if action.batching is not None and action.batching != self.batching_target:
                batcher_config(action.batching, p)  # a config Triton would refuse is a controller bug
                self.batching_target = action.batching
                fs.batching_changes += 1
                self._swap_version += 1
                changed["batching"] = action.batching
                if p.reload_s <= 0:
                    swap(now)
                else:
                    push(heap, (now + p.reload_s, next(seq), _EV_SWAP, self._swap_version))
            if action.replicas is not None:
                target = max(0, min(int(action.replicas), p.max_replicas))
                if target != fs.desired:
                    fs.replica_changes += 1
                    changed["replicas"] = target
                    set_replicas(target, now)
            if action.nodes is not None:
                target = max(p.min_nodes, min(int(action.nodes), p.max_nodes))
                if target != fs.node_target:
                    changed["nodes"] = target
                    fs.node_target = target
                    reconcile_nodes(now)
            if changed:
                changed["t_s"] = now
                changed["reasons"] = list(action.reasons)
                decisions.append(changed)

        # ---- initial fleet: ready at t=0 --------------------------------------------------------------
        n0 = self.initial_replicas
        fs.node_target = max(p.min_nodes, p.nodes_for(n0))
        fs.ready_nodes = min(fs.node_target, p.max_nodes)
        fs.desired = n0
        fs.peak_replicas = n0
        fs.peak_nodes = fs.ready_nodes
        for _ in range(n0):
            pod = _Pod(next(pid_counter))
            pods.append(pod)
        slots = fs.ready_nodes * p.replicas_per_node
        for pod in pods[:slots]:
            pod.state = _STARTING
            pod_ready(pod, 0.0)
        schedule_pending(0.0)

        push(heap, (p.scrape_interval_s, next(seq), _EV_SCRAPE, None))
        push(heap, (p.control_phase_s % self.interval_s, next(seq), _EV_TICK, None))

        # ---- main loop -----------------------------------------------------------------------------------
        ai = 0
        inf = math.inf
        executions = 0
        # Early stop for yes/no evaluations (`miss_limit`): requests rejected or served later than the
        # objective, counted exactly as window attainment counts them; once `miss_limit` are certain the
        # quantile cannot meet it, and the rest of the run cannot change that.
        limit = self.miss_limit if self.miss_limit is not None else -1
        # A served request's latency is its finish time less its arrival plus the serving overhead.
        late_after_ms = p.slo_ms - p.request_overhead_ms
        late = 0
        aborted = False
        while True:
            # Arrivals up to the next event: routing and enqueueing only touch the heap via dispatch.
            t_ev = heap[0][0] if heap else inf
            while ai < n and arr[ai] <= t_ev:
                t = arr[ai]
                nready = len(router)
                if nready:
                    pod = router[ai % nready]
                    q = pod.queue
                    if not q.enqueue(ai, now_s=t):  # type: ignore[union-attr]
                        rej_idx.append(ai)
                        rej_t.append(t)
                        rej_kind.append(REJECTED_QUEUE_FULL)
                        cnt.rejected_full += 1
                    elif pod.running < pod.instances:
                        dispatch(pod, t)
                        t_ev = heap[0][0] if heap else inf
                else:
                    rej_idx.append(ai)
                    rej_t.append(t)
                    rej_kind.append(REJECTED_NO_REPLICA)
                    cnt.rejected_norep += 1
                ai += 1
            if not heap:
                if ai >= n:
                    break
                continue
            if limit > 0 and late + len(rej_idx) >= limit:
                aborted = True
                break
            t, _, kind, obj = pop(heap)
            if kind == _EV_COMPLETE:
                pod, batch, start = obj
                if limit > 0:
                    for i in batch:
                        if (t - arr[i]) * 1000.0 > late_after_ms:
                            late += 1
                executions += 1
                pod.running -= 1
                if pod.running == 0:
                    pod.busy_s += t - pod.busy_since
                seg_items.extend(batch)
                seg_len.append(len(batch))
                seg_start.append(start)
                seg_finish.append(t)
                seg_pod.append(pod.pid)
                if pod.state == _READY:
                    if pod.queue.count:  # type: ignore[union-attr]
                        dispatch(pod, t)
                elif pod.state == _DRAINING:
                    dispatch(pod, t)
                    if pod.running == 0 and len(pod.queue) == 0:
                        pod_gone(pod, t)
            elif kind == _EV_WAKE:
                pod = obj
                if pod.wake_at == t and pod.state in (_READY, _DRAINING):
                    pod.wake_at = None
                    dispatch(pod, t)
                    if pod.state == _DRAINING and pod.running == 0 and len(pod.queue) == 0:
                        pod_gone(pod, t)
            elif kind == _EV_SCRAPE:
                if t <= duration:
                    scrape(t, ai)
                    push(heap, (t + p.scrape_interval_s, next(seq), _EV_SCRAPE, None))
            elif kind == _EV_TICK:
                if t <= duration:
                    tick(t)
                    push(heap, (t + self.interval_s, next(seq), _EV_TICK, None))
            elif kind == _EV_POD_READY:
                if t <= duration:
                    pod_ready(obj, t)
            elif kind == _EV_NODE_READY:
                if obj in prov_nodes and t <= duration:
                    accrue(t)
                    del prov_nodes[obj]
                    fs.ready_nodes += 1
                    schedule_pending(t)
            elif kind == _EV_SWAP and obj == self._swap_version and t <= duration:
                swap(t)
        accrue(duration)

        # ---- per-request results -------------------------------------------------------------------------
        finish = np.full(n, np.nan)
        start_arr = np.full(n, np.nan)
        status = np.full(n, -1, dtype=np.int8)
        if seg_items:
            items = np.asarray(seg_items, dtype=np.int64)
            lens = np.asarray(seg_len, dtype=np.int64)
            finish[items] = np.repeat(np.asarray(seg_finish), lens) + p.request_overhead_ms / 1000.0
            start_arr[items] = np.repeat(np.asarray(seg_start), lens)
            status[items] = OK
        if rej_idx:
            ri = np.asarray(rej_idx, dtype=np.int64)
            finish[ri] = np.asarray(rej_t)
            status[ri] = np.asarray(rej_kind, dtype=np.int8)
        busy_s = fs.busy_done_s + sum(pod.busy_s for pod in pods)  # all executions have ended
        return EngineOutput(
            arrival_s=arr_np,
            tokens=tok_np,
            finish_s=finish,
            start_s=start_arr,
            status=status,
            duration_s=duration,
            node_gpu_hours=fs.node_s * p.gpus_per_node / 3600.0,
            node_hours=fs.node_s / 3600.0,
            replica_gpu_hours=fs.pod_gpu_s / 3600.0,
            busy_gpu_hours=busy_s / 3600.0,
            replica_changes=fs.replica_changes,
            batching_changes=fs.batching_changes,
            peak_replicas=fs.peak_replicas,
            peak_nodes=fs.peak_nodes,
            series=series,
            scrapes=store.samples,
            decisions=decisions,
            wall_s=time.perf_counter() - wall0,
            cpu_s=time.process_time() - cpu0,
            executions=executions,
            dispatched_requests=len(seg_items),
            rejected_requests=len(rej_idx),
            aborted=aborted,
            simulated_requests=ai,
        )
