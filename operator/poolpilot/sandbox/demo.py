"""`poolpilot sandbox demo`: a segment of the Azure trace through a live sandbox, and the same run simulated.

    poolpilot sandbox demo --dir DIR --json OUT --report REPORT_DIR [--duration S]
        [--node-provisioning-seconds S] [--pod-start-seconds S] [--rate-scale X] [--time-compress K]
        [--trace-start-s S] [--seed N] [--batch-latency-ms A,B]

What it does: starts the sandbox (`Sandbox`: control plane, kube-scheduler, kwok GPU nodes, the pod runner,
Prometheus, the operator under the chart's RBAC), applies docs/examples/sandbox/ with the flags' node lead
time and a model repository whose emulated GPU curve is `--batch-latency-ms`, waits for the Deployment's pods,
then replays the trace segment through the load generator via the Service while sampling the cluster every
scrape interval. Then it reads the operator's Events and Prometheus' series, stops everything, runs the same
scenario through the simulator (same GPU curve, pod start, node lead, scrape interval, trace segment, rate
scale, seed, the same InferencePool and GPUNodePool specs, hence the same policy tick) and writes OUT and the
report.

The trace segment: `--trace-start-s` of the shared trace, `duration × time-compress` seconds long, compressed
into `duration` (timestamps divided by K, which multiplies the rate by K and keeps the minute-scale shape: the
default 45 trace minutes hold a rise, a burst and a fall), then cloned ×`rate-scale` (`loads.scale_rate`).

OUT: `live` and `simulated` with the keys of `poolpilot simulate --json` (see `poolpilot.sim.run`),
`agreement` (`p99_median_abs_error_pct`: per-minute p99 of the load generator's requests vs the simulated
requests, median absolute error in % of the simulated value; `gpu_hours_ratio`: live / simulated;
`replicas_within_1_fraction`: the fraction of samples whose desired replica counts are within ±1), and `_run`
(the parameters).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from poolpilot import loads
from poolpilot.gpucurve import DEFAULT_TOKEN_MS_PER_1K, DEFAULT_TOKEN_REF
from poolpilot.loads import Trace

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "docs" / "examples" / "sandbox"
MODEL = "llm_emulated"
NAMESPACE = "chat"
POOL = "chat"
DEPLOYMENT = "chat-triton"
NODE_POOL = "sandbox-gpus"
NODE_POOL_LABEL = "poolpilot.io/gpunodepool"
PROVISIONING_TAINT = "poolpilot.io/provisioning"
SUMMARY_P99 = f'max(nv_inference_request_summary_us{{namespace="{NAMESPACE}",quantile="0.99"}}) / 1000'
GPU_UTIL = f'avg(nv_gpu_utilization{{namespace="{NAMESPACE}"}})'


@dataclass(frozen=True)
class DemoConfig:
    """Every knob of one demo run (the flags)."""

    work_dir: Path
    duration_s: float = 900.0
    trace: Path = loads.DEFAULT_TRACE
    trace_start_s: float = 780.0
    time_compress: float = 3.0
    rate_scale: float = 3.0
    seed: int = 0
    node_provisioning_s: int = 75
    pod_start_s: float = 10.0
    scrape_interval_s: float = 5.0
    batch_latency_ms: tuple[float, float] = (40.0, 30.0)
    initial_replicas: int = 3
    # The pool is handed to the operator this long before the load arrives (the scenario, live and simulated,
    # starts with it: the operator's first ticks and rate windows see an idle pool, as a live pool's do).
    idle_before_s: float = 60.0
    # None: the pool's default (300 s) divided by time_compress — the trace's time runs K× faster, so do
    # the policy's slow clocks; otherwise the fall of a 15-minute demo never reaches a scale-in.
    scale_down_stabilization_s: int | None = None

    @property
    def stabilization_s(self) -> int:
        if self.scale_down_stabilization_s is not None:
            return self.scale_down_stabilization_s
        from poolpilot.api.types import ReplicaSpec

        default = int(ReplicaSpec.model_fields["scale_down_stabilization_seconds"].default)
        return max(30, round(default / self.time_compress))

    def __post_init__(self) -> None:
        for name in ("duration_s", "time_compress", "rate_scale", "scrape_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"--{name.replace('_', '-')} must be a number > 0, got {v}")
        if not (math.isfinite(self.idle_before_s) and 0 <= self.idle_before_s <= 600):
            raise ValueError(f"--idle-before-seconds must be in [0, 600], got {self.idle_before_s}")
        if not 30 <= self.node_provisioning_s <= 600:
            raise ValueError(
                f"--node-provisioning-seconds must be in [30, 600], got {self.node_provisioning_s}"
            )
        if not 0 <= self.pod_start_s <= 300:
            raise ValueError(f"--pod-start-seconds must be in [0, 300], got {self.pod_start_s}")
        a, b = self.batch_latency_ms
        if not (a > 0 and b >= 0):
            raise ValueError(f"--batch-latency-ms must be A,B with A > 0 and B >= 0, got {a},{b}")


def build_trace(config: DemoConfig) -> Trace:
    """The demo's load: a segment of the trace, time-compressed, cloned to the rate scale, after the idle
    time (the trace's t = 0 is when the InferencePool is applied)."""
    whole = loads.load_azure_csv(config.trace)
    seg = loads.segment(whole, config.trace_start_s, config.duration_s * config.time_compress)
    seg = loads.scale_rate(seg, config.time_compress, seed=config.seed, method="compress")
    return loads.delayed(loads.scale_rate(seg, config.rate_scale, seed=config.seed), config.idle_before_s)


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def manifests(config: DemoConfig, repository: Path) -> dict[str, dict[str, Any]]:
    """docs/examples/sandbox/ with the demo's node lead time, replicas and model repository (pure)."""
    docs = {p.name: example(p.name) for p in sorted(EXAMPLES.glob("*.yaml"))}
    docs["10-gpunodepool.yaml"]["spec"]["provisioningSeconds"] = config.node_provisioning_s
    replicas = docs["40-inferencepool.yaml"]["spec"].setdefault("replicas", {})
    replicas["scaleDownStabilizationSeconds"] = config.stabilization_s
    # The emulated GPU's profile, as perf_analyzer would measure it: the policy's prior (live and simulated).
    a, b = config.batch_latency_ms
    docs["40-inferencepool.yaml"]["spec"]["model"]["batchLatency"] = {"baseMs": a, "perItemMs": b}
    dep = docs["20-deployment.yaml"]
    dep["spec"]["replicas"] = config.initial_replicas
    dep["spec"]["template"]["metadata"]["annotations"]["sandbox.poolpilot.io/model-repository"] = str(
        repository
    )
    return docs


def write_model_repository(config: DemoConfig, target: Path) -> Path:
    """The emulated model with the demo's GPU curve (one set of parameters for executor and simulator)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(REPO / "executor_image" / "emulated_repository", target)
    cfg = target / MODEL / "config.pbtxt"
    a, b = config.batch_latency_ms
    text = cfg.read_text()
    marker = 'key: "emulated_batch_latency_ms"\n  value: { string_value: "'
    start = text.index(marker) + len(marker)
    end = text.index('"', start)
    cfg.write_text(text[:start] + f"{a:g},{b:g}" + text[end:])
    return target


# --- live run ---------------------------------------------------------------------------------------------


@dataclass
class Sample:
    """One look at the cluster (every scrape interval)."""

    t_s: float
    replicas: int
    ready_replicas: int
    nodes: int
    ready_nodes: int
    batching: dict[str, Any]
    last_decision: dict[str, Any]
    p99_signal_ms: float
    gpu_utilization: float


@dataclass
class LiveRun:
    """What the live run left behind, for the metrics, the agreement and the report."""

    samples: list[Sample] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    prometheus: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    loadgen_report: dict[str, Any] = field(default_factory=dict)
    setup_s: float = math.nan
    load_s: float = math.nan
    started_wall: float = math.nan
    # Mean time a served request spent in the pods' queues and executions (Triton's counters), in ms.
    server_time_ms: float = math.nan


class Observer:
    """Reads the pool's state through the Kubernetes API (the admin client) and Prometheus."""

    def __init__(self, box: Any) -> None:
        import kubernetes.client

        self.box = box
        self.apps = kubernetes.client.AppsV1Api(box.api_client)
        self.core = kubernetes.client.CoreV1Api(box.api_client)
        self.custom = kubernetes.client.CustomObjectsApi(box.api_client)

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """The API's JSON as dicts (the client's model deserialisation costs far more CPU)."""
        return json.loads(call(*args, _preload_content=False, **kwargs).data)

    def ready_pods(self) -> int:
        pods = self._raw(self.core.list_namespaced_pod, NAMESPACE, label_selector=f"app={DEPLOYMENT}")
        return sum(
            1
            for p in pods["items"]
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        )

    def nodes(self) -> tuple[int, int]:
        """(nodes that exist — billed, provisioning or ready; nodes ready and schedulable)."""
        items: list[Any] = self.core.list_node(label_selector=f"{NODE_POOL_LABEL}={NODE_POOL}").items
        ready = sum(1 for n in items if not any(t.key == PROVISIONING_TAINT for t in (n.spec.taints or [])))
        return len(items), ready

    def pool_status(self) -> dict[str, Any]:
        obj: Any = self.custom.get_namespaced_custom_object(
            "poolpilot.io", "v1alpha1", NAMESPACE, "inferencepools", POOL
        )
        status: dict[str, Any] = obj.get("status") or {}
        return status

    def prom(self, promql: str) -> float:
        try:
            return float(self.box.prometheus.query_value(promql))
        except Exception:
            return math.nan

    def sample(self, t_s: float) -> Sample:
        dep = self._raw(self.apps.read_namespaced_deployment, DEPLOYMENT, NAMESPACE)
        status = self.pool_status()
        nodes, ready_nodes = self.nodes()
        return Sample(
            t_s=t_s,
            replicas=int(dep["spec"].get("replicas") or 0),
            ready_replicas=self.ready_pods(),
            nodes=nodes,
            ready_nodes=ready_nodes,
            batching=dict(status.get("batching") or {}),
            last_decision=dict(status.get("lastDecision") or {}),
            p99_signal_ms=self.prom(SUMMARY_P99),
            gpu_utilization=self.prom(GPU_UTIL),
        )

    def events(self) -> list[dict[str, Any]]:
        """The operator's Events on the InferencePool and the GPUNodePool, oldest first."""
        out = []
        for ns, name in ((NAMESPACE, POOL), ("default", NODE_POOL)):
            items = self.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            for e in items:
                when = e.last_timestamp or e.event_time or e.first_timestamp
                out.append(
                    {
                        "time": when.timestamp() if when else math.nan,
                        "object": f"{e.involved_object.kind}/{name}",
                        "reason": e.reason,
                        "message": e.message,
                        "count": e.count or 1,
                    }
                )
        return sorted(out, key=lambda e: e["time"])


def _wait(what: str, check: Any, timeout_s: float, box: Any) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        box.cluster.check_alive()
        time.sleep(1.0)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")


SERVER_TIME_US = (
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


def server_time_promql(window_s: float) -> str:
    """PromQL: mean ms a served request spent queued and executing in the pods over the last `window_s`."""
    w = f"{math.ceil(window_s) + 30}s"
    spent = " + ".join(f'sum(increase({m}{{namespace="{NAMESPACE}"}}[{w}]))' for m in SERVER_TIME_US)
    return f'({spent}) / sum(increase(nv_inference_request_success{{namespace="{NAMESPACE}"}}[{w}])) / 1000'


def request_overhead_ms(latency_ms: list[float], server_time_ms: float) -> float:
    """Mean serving overhead outside the queue and the execution: the load generator's mean latency of
    served requests less the pods' mean queue + compute time (HTTP, (de)serialisation, the event loops of
    client and executor on this CPU). 0 when either is unknown."""
    if not latency_ms or not math.isfinite(server_time_ms):
        return 0.0
    return max(0.0, float(np.mean(latency_ms)) - server_time_ms)


def _progress(t_s: float, total_s: float, s: Sample) -> str:
    decision = s.last_decision
    reasons = decision.get("reasons") or []
    last = f"{decision.get('action', '-')}: {reasons[0] if reasons else ''}"
    return (
        f"[{t_s:5.0f}/{total_s:.0f} s] p99 {s.p99_signal_ms:5.0f} ms (pods, Prometheus) · "
        f"replicas {s.replicas} ({s.ready_replicas} ready) · nodes {s.ready_nodes}/{s.nodes} · "
        f"batching {s.batching.get('maxQueueDelayMicroseconds', '-')} µs "
        f"x{s.batching.get('instanceCount', '-')}"
        f" · last {last[:110]}"
    )


def run_live(config: DemoConfig, trace: Trace, out: LiveRun) -> None:
    """Start the sandbox, apply the examples, replay `trace` via the Service, record, stop everything."""
    from poolpilot import loadgen
    from poolpilot.loadgen import schedule as loadgen_schedule
    from poolpilot.sandbox.cli import Sandbox

    began = time.monotonic()
    repo = write_model_repository(config, config.work_dir / "models")
    docs = manifests(config, repo.resolve())
    box = Sandbox(
        config.work_dir / "sandbox",
        pod_start_s=config.pod_start_s,
        scrape_interval_s=config.scrape_interval_s,
    )
    box.start()
    try:
        print(f"sandbox up in {time.monotonic() - began:.0f} s", flush=True)
        for name, doc in docs.items():
            if name != "40-inferencepool.yaml":
                box.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
        obs = Observer(box)
        lead = config.node_provisioning_s + config.pod_start_s + 120
        _wait(
            f"{config.initial_replicas} Ready pods",
            lambda: obs.ready_pods() >= config.initial_replicas,
            lead,
            box,
        )
        box.cluster.kubectl("apply", "-f", "-", input=json.dumps(docs["40-inferencepool.yaml"]))
        out.setup_s = time.monotonic() - began
        print(
            f"{config.initial_replicas} pods Ready, InferencePool applied after {out.setup_s:.0f} s",
            flush=True,
        )
        schedule = loadgen_schedule.from_trace(trace)
        lg_config = loadgen.LoadgenConfig(
            urls=(),
            service=f"{NAMESPACE}/{DEPLOYMENT}",
            kubeconfig=str(box.cluster.kubeconfig),
            model=MODEL,
            seed=config.seed,
        )
        out.started_wall = time.time()
        t0 = time.monotonic()
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_loop, args=(obs, config, out, t0, stop), daemon=True)
        sampler.start()
        try:
            out.loadgen_report = _run_loadgen(lg_config, schedule, config.work_dir / "loadgen", out)
        finally:
            stop.set()
            sampler.join(timeout=30)
        out.load_s = time.monotonic() - t0
        _align(out, float(out.loadgen_report["started_wall"]))
        out.events = obs.events()
        end = time.time()
        for key, promql in (("p99_ms", SUMMARY_P99), ("gpu_utilization", GPU_UTIL)):
            series = box.prometheus.query_range(
                promql, start=out.started_wall, end=end, step_s=config.scrape_interval_s
            )
            values = series[0]["values"] if series else []
            out.prometheus[key] = [(float(t) - out.started_wall, float(v)) for t, v in values]
        out.server_time_ms = obs.prom(server_time_promql(end - out.started_wall))
    finally:
        box.stop()
        print("sandbox stopped", flush=True)


def _run_loadgen(lg_config: Any, schedule: list[Any], work: Path, out: LiveRun) -> dict[str, Any]:
    """The load generator in a process of its own (spawned), like a real client: the observer's API calls
    and JSON decoding must not delay its sends or its latency clock (one GIL would). Its records come back
    through its CSV (`poolpilot loadgen --csv`'s format); `out.records` grows as the sampler reads them."""
    import multiprocessing

    work.mkdir(parents=True, exist_ok=True)
    records_csv, report_json = work / "requests.csv", work / "report.json"
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=_loadgen_child,
        args=(lg_config, schedule, records_csv, report_json, os.getpid()),
        daemon=True,
    )
    child.start()
    try:
        child.join()
    finally:
        if child.is_alive():  # interrupted: no load may outlive the demo
            child.terminate()
            child.join(10)
    if child.exitcode != 0 or not report_json.exists():
        raise RuntimeError(f"the load generator failed (exit code {child.exitcode})")
    out.records = read_records(records_csv)
    report: dict[str, Any] = json.loads(report_json.read_text())
    return report


def _align(out: LiveRun, loadgen_started_wall: float) -> None:
    """Put the samples on the load generator's clock (its records count from its own start, a spawn later)."""
    shift = loadgen_started_wall - out.started_wall
    for s in out.samples:
        s.t_s -= shift
    for d in out.decisions:
        d["t_s"] -= shift
    out.started_wall = loadgen_started_wall


def _loadgen_child(
    lg_config: Any, schedule: list[Any], records_csv: Path, report_json: Path, parent_pid: int
) -> None:
    from poolpilot import loadgen
    from poolpilot.sandbox.processes import tie_to_parent

    tie_to_parent(parent_pid)  # started from the main thread: no load outlives a killed demo

    records: list[Any] = []
    started_wall = time.time()
    report = asyncio.run(loadgen.run(lg_config, schedule, records=records))
    loadgen.write_csv(records_csv, records)
    report_json.write_text(json.dumps({**json.loads(report.to_json()), "started_wall": started_wall}))


def read_records(path: Path) -> list[Any]:
    """`loadgen.write_csv`'s rows back as RequestRecords."""
    import csv

    from poolpilot.loadgen import RequestRecord

    with path.open(newline="") as fh:
        return [
            RequestRecord(
                index=int(row["index"]),
                url=row["url"],
                intended_send_s=float(row["intended_send_s"]),
                send_s=float(row["send_s"]),
                latency_ms=float(row["latency_ms"]) if row["latency_ms"] else math.nan,
                status=row["status"],
            )
            for row in csv.DictReader(fh)
        ]


def _sample_loop(obs: Observer, config: DemoConfig, out: LiveRun, t0: float, stop: threading.Event) -> None:
    last_key: tuple[Any, ...] | None = None
    last_print = -math.inf
    while not stop.is_set():
        t_s = time.monotonic() - t0
        try:
            s = obs.sample(t_s)
        except Exception as exc:  # a slow API call must not end the run; the gap shows in the series
            print(f"[{t_s:5.0f} s] sample failed: {exc}", file=sys.stderr, flush=True)
            stop.wait(config.scrape_interval_s)
            continue
        out.samples.append(s)
        key = (s.last_decision.get("time"), s.last_decision.get("action"))
        if s.last_decision and key != last_key:
            last_key = key
            out.decisions.append({"t_s": t_s, **s.last_decision})
        if t_s - last_print >= 10:
            last_print = t_s
            print(_progress(t_s, config.duration_s + config.idle_before_s, s), flush=True)
        stop.wait(max(0.0, config.scrape_interval_s - (time.monotonic() - t0 - t_s)))


# --- metrics: the live run in `poolpilot simulate --json`'s keys -------------------------------------------


def _step_integral_h(t_s: list[float], values: list[float], end_s: float) -> float:
    """∫ values dt in hours, each sample holding until the next (the last until `end_s`)."""
    total = 0.0
    for i, (t, v) in enumerate(zip(t_s, values, strict=True)):
        nxt = t_s[i + 1] if i + 1 < len(t_s) else end_s
        total += v * max(0.0, min(nxt, end_s) - max(t, 0.0))
    return total / 3600.0


def live_result(config: DemoConfig, trace: Trace, run: LiveRun, specs: dict[str, Any]) -> dict[str, Any]:
    """The live run's metrics with the keys and definitions of `poolpilot.sim.run.Result.to_json`."""
    from poolpilot.sim.run import Result, window_attainment

    pool, node_pool = specs["pool"], specs["node_pool"]
    slo_ms = float(pool.slo.latency_target_ms)
    q = float(pool.slo.latency_quantile)
    recs = run.records
    arrival = np.array([r.intended_send_s for r in recs])
    lat = np.array([r.latency_ms for r in recs])
    ok = np.array([r.status == "success" for r in recs])
    duration = float(trace.duration_s)
    att_w, n_win = window_attainment(arrival, lat, ok, slo_ms, duration, q)
    tokens = trace.tokens[: len(recs)]
    ss = run.samples
    ts = [s.t_s for s in ss]
    gpus = node_pool.gpus_per_node
    node_h = _step_integral_h(ts, [float(s.nodes) for s in ss], duration)
    replica_h = _step_integral_h(ts, [float(s.ready_replicas) for s in ss], duration)
    cost = node_h * node_pool.price_per_node_hour_usd
    served_tokens = float(tokens[ok].sum()) if len(recs) else 0.0
    util = [s.gpu_utilization for s in ss if math.isfinite(s.gpu_utilization)]
    batching_keys = [
        tuple(sorted((k, str(v)) for k, v in s.batching.items() if k != "queuePolicy"))
        for s in ss
        if s.batching
    ]
    statuses = Counter(r.status for r in recs if r.status != "success")
    result = Result(
        policy="poolpilot",
        slo_ms=slo_ms,
        requests=len(recs),
        p99_ms=float(np.quantile(lat[ok], q)) if ok.any() else math.nan,
        slo_attainment_requests=float(np.sum(ok & (lat <= slo_ms)) / len(recs)) if len(recs) else 1.0,
        slo_attainment_windows=att_w,
        gpu_hours=node_h * gpus,
        cost_usd=cost,
        cost_per_1k_tokens_usd=cost / (served_tokens / 1000.0) if served_tokens > 0 else math.nan,
        mean_gpu_utilization=float(np.mean(util)) if util else math.nan,
        replica_changes=sum(1 for a, b in itertools.pairwise(ss) if a.replicas != b.replicas),
        batching_changes=sum(1 for a, b in itertools.pairwise(batching_keys) if a != b),
        rejected_requests=int(len(recs) - int(ok.sum())),
        peak_replicas=max((s.replicas for s in ss), default=0),
        replica_gpu_hours=replica_h * specs["gpus_per_replica"],
        node_hours=node_h,
        peak_nodes=max((s.nodes for s in ss), default=0),
        rejected_by_reason=dict(statuses),
        windows=n_win,
        duration_s=duration,
        trace=trace.description,
        sim_requests_per_s=len(recs) / run.load_s if run.load_s > 0 else math.nan,
        wall_s=run.load_s,
        series=live_series(run, config),
        decisions=[*run.decisions],
    )
    return result.to_json()


def live_series(run: LiveRun, config: DemoConfig) -> dict[str, list[float]]:
    """Per-sample series with the simulator's keys (`p99_ms`: the load generator's requests finished since
    the previous sample; `p99_signal_ms`: Prometheus' max per-pod Triton summary, what the operator reads)."""
    recs = run.records
    send = np.array([r.send_s + r.latency_ms / 1000.0 if r.status == "success" else math.inf for r in recs])
    lat = np.array([r.latency_ms for r in recs])
    intended = np.array([r.intended_send_s for r in recs])
    keys = (
        "t_s", "arrivals_per_s", "p99_ms", "p99_signal_ms", "replicas", "ready_replicas", "nodes",
        "ready_nodes", "queue_delay_ms", "gpu_utilization", "max_queue_delay_us", "max_batch_size",
        "instance_count", "rejected",
    )  # fmt: skip
    series: dict[str, list[float]] = {k: [] for k in keys}
    prev = 0.0
    for s in run.samples:
        done = (send > prev) & (send <= s.t_s)
        arrived = (intended > prev) & (intended <= s.t_s)
        dt = s.t_s - prev
        series["t_s"].append(s.t_s)
        series["arrivals_per_s"].append(float(arrived.sum()) / dt if dt > 0 else math.nan)
        series["p99_ms"].append(float(np.quantile(lat[done], 0.99)) if done.any() else math.nan)
        series["p99_signal_ms"].append(s.p99_signal_ms)
        series["replicas"].append(s.replicas)
        series["ready_replicas"].append(s.ready_replicas)
        series["nodes"].append(s.nodes)
        series["ready_nodes"].append(s.ready_nodes)
        series["queue_delay_ms"].append(math.nan)
        series["gpu_utilization"].append(s.gpu_utilization)
        series["max_queue_delay_us"].append(float(s.batching.get("maxQueueDelayMicroseconds", math.nan)))
        series["max_batch_size"].append(float(s.batching.get("maxBatchSize", math.nan)))
        series["instance_count"].append(float(s.batching.get("instanceCount", math.nan)))
        series["rejected"].append(
            float(sum(1 for r in recs if prev < r.intended_send_s <= s.t_s and r.status != "success"))
        )
        prev = s.t_s
    return series


# --- the same scenario simulated -------------------------------------------------------------------------


def parsed_specs(config: DemoConfig) -> dict[str, Any]:
    """The InferencePool and GPUNodePool the demo applies, parsed as the operator parses them."""
    from poolpilot.api.validation import parse_gpu_node_pool, parse_inference_pool

    docs = manifests(config, Path("/models"))
    pool, problems = parse_inference_pool(docs["40-inferencepool.yaml"])
    node_pool, node_problems = parse_gpu_node_pool(docs["10-gpunodepool.yaml"])
    if pool is None or node_pool is None:
        raise ValueError(f"docs/examples/sandbox does not parse: {[*problems, *node_problems]}")
    gpr = pool.node_pool.gpus_per_replica if pool.node_pool else 1
    return {"pool": pool, "node_pool": node_pool, "gpus_per_replica": gpr}


def initial_batching(config: DemoConfig) -> Any:
    """The batching of the example model's config.pbtxt, as the pods start with it."""
    from poolpilot.backends.batching import batching_of
    from poolpilot.triton.config import config_from_pbtxt

    text = (REPO / "executor_image" / "emulated_repository" / MODEL / "config.pbtxt").read_text()
    return batching_of(config_from_pbtxt(text, model_name=MODEL))


DEFAULT_RELOAD_S = 1.0
"""Reload time given to the simulation when the live run had no rollout (the emulated model loads in well
under a second)."""


def rollout_seconds(events: list[dict[str, Any]]) -> float:
    """Median time from each `BatchingRolloutStarted` to its end (rolled out or back), from the Events."""
    spans, started = [], None
    # Events carry whole seconds: a rollout that started and ended within one sorts start first.
    for e in sorted(events, key=lambda e: (e["time"], e["reason"] != "BatchingRolloutStarted")):
        if e["reason"] == "BatchingRolloutStarted":
            started = e["time"]
        elif e["reason"] in ("BatchingRolledOut", "BatchingRolledBack") and started is not None:
            spans.append(max(0.0, e["time"] - started))
            started = None
    finite = [x for x in spans if math.isfinite(x)]
    return float(np.median(finite)) if finite else DEFAULT_RELOAD_S


def sim_params(
    config: DemoConfig, specs: dict[str, Any], reload_s: float = DEFAULT_RELOAD_S, overhead_ms: float = 0.0
) -> Any:
    """SimParams of the demo scenario: the live run's curve, lead times, scrape interval, reload time
    (`rollout_seconds`) and serving overhead (`request_overhead_ms`) as measured live, specs and seed."""
    from poolpilot.sim.params import SimParams

    pool, node_pool = specs["pool"], specs["node_pool"]
    a, b = config.batch_latency_ms
    return SimParams(
        slo_ms=float(pool.slo.latency_target_ms),
        latency_quantile=float(pool.slo.latency_quantile),
        margin_ratio=float(pool.slo.margin_ratio),
        batch_latency_a_ms=a,
        batch_latency_b_ms=b,
        token_mode="max",
        token_ms_per_1k=DEFAULT_TOKEN_MS_PER_1K,
        token_ref=DEFAULT_TOKEN_REF,
        model_max_batch_size=pool.model.max_batch_size,
        gpus_per_node=node_pool.gpus_per_node,
        gpus_per_replica=specs["gpus_per_replica"],
        price_per_node_hour_usd=node_pool.price_per_node_hour_usd,
        node_provisioning_s=float(config.node_provisioning_s),
        min_nodes=node_pool.nodes.min,
        max_nodes=node_pool.nodes.max,
        pod_start_s=config.pod_start_s,
        min_replicas=pool.replicas.min,
        max_replicas=pool.replicas.max,
        initial_replicas=config.initial_replicas,
        scrape_interval_s=config.scrape_interval_s,
        reload_s=reload_s,
        request_overhead_ms=overhead_ms,
        p99_source="pod_summary_max",  # the operator's default latency source (Triton's per-pod summary)
        seed=config.seed,
    )


def simulate_demo(
    config: DemoConfig,
    trace: Trace,
    specs: dict[str, Any],
    reload_s: float = DEFAULT_RELOAD_S,
    overhead_ms: float = 0.0,
) -> Any:
    """The demo scenario through the simulator, with the operator's pool tick on the same specs."""
    from poolpilot.sim.controllers import PoolPilotController
    from poolpilot.sim.run import simulate

    batching = initial_batching(config)

    def factory(params: Any) -> PoolPilotController:
        return PoolPilotController(
            params,
            spec=specs["pool"],
            node_pool=specs["node_pool"],
            node_pool_name=NODE_POOL,
            initial_batching=batching,
        )

    return simulate(trace, factory, sim_params(config, specs, reload_s, overhead_ms))


# --- agreement ---------------------------------------------------------------------------------------------


def per_minute_p99(
    arrival_s: np.ndarray, latency_ms: np.ndarray, ok: np.ndarray, duration_s: float
) -> list[float]:
    """p99 of the served requests that arrived in each minute (NaN for a minute without any)."""
    out = []
    for m in range(max(1, math.ceil(duration_s / 60.0))):
        sel = ok & (arrival_s >= 60 * m) & (arrival_s < 60 * (m + 1))
        out.append(float(np.quantile(latency_ms[sel], 0.99)) if sel.any() else math.nan)
    return out


# A request the load generator sends this late was held up by the host's CPUs, not by a pod: on a
# machine shared with other work every process of the sandbox stalls at once (pods included).
HOST_STALL_MS = 20.0


def send_lateness_per_minute(
    intended_s: np.ndarray, send_s: np.ndarray, duration_s: float
) -> list[dict[str, float]]:
    """Per arrival minute: the load generator's worst send lateness (ms) and the seconds in which it sent
    a request at least `HOST_STALL_MS` late — how much the host, not the pods, shaped that minute's p99."""
    late_ms = (send_s - intended_s) * 1000.0
    out = []
    for m in range(max(1, math.ceil(duration_s / 60.0))):
        sel = (intended_s >= 60 * m) & (intended_s < 60 * (m + 1))
        stalled = np.unique(np.floor(intended_s[sel & (late_ms >= HOST_STALL_MS)]))
        out.append(
            {
                "worst_ms": float(late_ms[sel].max()) if sel.any() else 0.0,
                "stalled_seconds": float(len(stalled)),
            }
        )
    return out


def agreement(live_p99: list[float], sim_p99: list[float], live: dict[str, Any], sim: Any) -> dict[str, Any]:
    """The three figures of issue 11 (see the module docstring)."""
    errs = [
        abs(a - b) / b * 100.0
        for a, b in zip(live_p99, sim_p99, strict=False)
        if math.isfinite(a) and math.isfinite(b) and b > 0
    ]
    lt = np.asarray(live["series"]["t_s"], dtype=float)
    lr = np.asarray(live["series"]["replicas"], dtype=float)
    st = np.asarray(sim.series["t_s"], dtype=float)
    sr = np.asarray(sim.series["replicas"], dtype=float)
    within = []
    for t, r in zip(lt.tolist(), lr.tolist(), strict=True):
        i = int(np.searchsorted(st, t, side="right")) - 1
        if i >= 0:
            within.append(abs(r - sr[i]) <= 1)
    return {
        "p99_median_abs_error_pct": float(np.median(errs)) if errs else None,
        "gpu_hours_ratio": live["gpu_hours"] / sim.gpu_hours if sim.gpu_hours > 0 else None,
        "replicas_within_1_fraction": float(np.mean(within)) if within else None,
        "per_minute_p99_ms": {"live": live_p99, "simulated": sim_p99},
        "bounds": {
            "p99_median_abs_error_pct": 10.0,
            "gpu_hours_ratio": [0.9, 1.1],
            "replicas_within_1_fraction": 0.8,
        },
    }


def run_demo(config: DemoConfig, json_out: Path, report_dir: Path) -> dict[str, Any]:
    """The whole demo: live run, simulation, agreement, OUT and the report. Returns OUT's document."""
    from poolpilot.sandbox.report import write_report
    from poolpilot.sim.run import _json_safe

    began = time.monotonic()
    trace = build_trace(config)
    specs = parsed_specs(config)
    print(
        f"trace: {trace.description}; {len(trace)} requests, "
        f"peak {trace.peak_rate_per_s():.0f} req/s (1 min)",
        flush=True,
    )
    run = LiveRun()
    run_live(config, trace, run)
    live = live_result(config, trace, run, specs)
    reload_s = rollout_seconds(run.events)
    overhead = request_overhead_ms(
        [r.latency_ms for r in run.records if r.status == "success"], run.server_time_ms
    )
    sim = simulate_demo(config, trace, specs, reload_s, overhead)
    recs = run.records
    live_p99 = per_minute_p99(
        np.array([r.intended_send_s for r in recs]),
        np.array([r.latency_ms for r in recs]),
        np.array([r.status == "success" for r in recs]),
        trace.duration_s,
    )
    assert sim.output is not None
    sim_p99 = per_minute_p99(
        sim.output.arrival_s, sim.output.latency_ms, sim.output.status == 0, trace.duration_s
    )
    doc: dict[str, Any] = {
        "live": live,
        "simulated": sim.to_json(),
        "agreement": agreement(live_p99, sim_p99, live, sim),
        "_run": {
            "trace": trace.description,
            "requests": len(trace),
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
            "params": sim_params(config, specs, reload_s, overhead).as_dict(),
            "server_time_ms": run.server_time_ms,
            "send_lateness_per_minute": send_lateness_per_minute(
                np.array([r.intended_send_s for r in recs]),
                np.array([r.send_s for r in recs]),
                trace.duration_s,
            ),
            "started_wall": run.started_wall,
            "setup_s": run.setup_s,
            "load_s": run.load_s,
            "loadgen": run.loadgen_report,
            "events": run.events,
            "prometheus": run.prometheus,
        },
    }
    doc = _json_safe(doc)
    doc["_run"]["total_s"] = time.monotonic() - began
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=1, allow_nan=False))
    print(f"wrote {json_out}", flush=True)
    path = write_report(doc, report_dir)
    print(f"wrote {path}", flush=True)
    return doc


# --- CLI ---------------------------------------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    """The `sandbox demo` flags (the sandbox CLI adds this subparser)."""
    from poolpilot.sim.cli import parse_batch_latency

    d = DemoConfig(Path("."))
    parser.add_argument("--dir", type=Path, required=True, help="working folder (cluster, pods, logs)")
    parser.add_argument("--json", type=Path, required=True, metavar="OUT", help="live, simulated, agreement")
    parser.add_argument("--report", type=Path, required=True, metavar="REPORT_DIR", help="report.md and PNGs")
    parser.add_argument("--duration", type=float, default=d.duration_s, metavar="S", help="seconds of load")
    parser.add_argument(
        "--trace", type=Path, default=d.trace, help="Azure-format CSV (default: the shared trace)"
    )
    parser.add_argument(
        "--trace-start-s", type=float, default=d.trace_start_s, help="where the segment starts"
    )
    parser.add_argument(
        "--time-compress", type=float, default=d.time_compress, metavar="K",
        help="play duration x K seconds of trace in duration seconds (rate x K)",
    )  # fmt: skip
    parser.add_argument(
        "--rate-scale", type=float, default=d.rate_scale, metavar="X", help="clone requests x X"
    )
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--node-provisioning-seconds", type=int, default=d.node_provisioning_s)
    parser.add_argument("--pod-start-seconds", type=float, default=d.pod_start_s)
    parser.add_argument("--scrape-interval-seconds", type=float, default=d.scrape_interval_s)
    parser.add_argument(
        "--batch-latency-ms", type=parse_batch_latency, default=d.batch_latency_ms, metavar="A,B",
        help="the emulated GPU: A + B x batch ms (executor and simulator)",
    )  # fmt: skip
    parser.add_argument("--initial-replicas", type=int, default=d.initial_replicas)
    parser.add_argument(
        "--idle-before-seconds", type=float, default=d.idle_before_s, metavar="S",
        help="the pool is handed to the operator this long before the load (live and simulated)",
    )  # fmt: skip
    parser.add_argument(
        "--scale-down-stabilization-seconds", type=int, default=None, metavar="S",
        help="the pool's scale-in window (default: 300 s / --time-compress)",
    )  # fmt: skip


def main(args: Any) -> int:
    try:
        config = DemoConfig(
            work_dir=args.dir.resolve(),
            duration_s=args.duration,
            trace=args.trace,
            trace_start_s=args.trace_start_s,
            time_compress=args.time_compress,
            rate_scale=args.rate_scale,
            seed=args.seed,
            node_provisioning_s=args.node_provisioning_seconds,
            pod_start_s=args.pod_start_seconds,
            scrape_interval_s=args.scrape_interval_seconds,
            batch_latency_ms=args.batch_latency_ms,
            initial_replicas=args.initial_replicas,
            idle_before_s=args.idle_before_seconds,
            scale_down_stabilization_s=args.scale_down_stabilization_seconds,
        )
        build_trace(config)  # bad trace flags fail here, before a cluster starts
    except ValueError as exc:
        print(f"poolpilot sandbox demo: error: {exc}", file=sys.stderr)
        return 2
    doc = run_demo(config, args.json, args.report)
    agree = doc["agreement"]
    print(
        f"live: p99 {doc['live']['p99_ms']:.0f} ms, windows {doc['live']['slo_attainment_windows']:.0%}, "
        f"GPU-h {doc['live']['gpu_hours']:.3f}; simulated: p99 {doc['simulated']['p99_ms']:.0f} ms, "
        f"GPU-h {doc['simulated']['gpu_hours']:.3f}; agreement: p99 error "
        f"{agree['p99_median_abs_error_pct']}, GPU-h ratio {agree['gpu_hours_ratio']}, "
        f"replicas ±1 {agree['replicas_within_1_fraction']}",
        flush=True,
    )
    return 0
