"""Benchmark (not a test): the operator's own cost at many pools, on the real control plane and Prometheus.

    .venv/bin/python bench/operator_scale.py --pools 200 --measure-seconds 120

Sets up: etcd + kube-apiserver (with an audit log) + kube-controller-manager; the chart's RBAC and the
operator under its ServiceAccount with the chart's own args; N namespaces-worth of pools (one Deployment
and one InferencePool each, `tickSeconds` as given); a real Prometheus scraping one synthetic exporter that
serves Triton's metric families for every pool at a steady load (labels `namespace`, `pool`, `model`,
kept with honor_labels); a counting proxy between the operator and Prometheus.
After a warm-up it measures, over a steady window: PromQL requests per tick round (they must not grow
with N), API calls per pool per tick (from the apiserver's audit log, by the operator's user), status
writes, and the operator's CPU seconds per second and RSS. Prints the figures; `--json` writes them.
"""

from __future__ import annotations

import argparse
import collections
import http.server
import json
import math
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from poolpilot.sandbox import chart
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.processes import free_port
from poolpilot.sandbox.prometheus import PrometheusServer

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "pp-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class SyntheticTriton:
    """Triton's metric families for N pools at a steady load (counters advance with wall time)."""

    def __init__(self, pools: int, rps: float = 40.0, latency_ms: float = 60.0, batch: float = 4.0) -> None:
        self.pools, self.rps, self.latency_ms, self.batch = pools, rps, latency_ms, batch
        self.start = time.monotonic()

    def render(self) -> str:
        t = time.monotonic() - self.start
        n = self.rps * t
        lines = []
        for i in range(self.pools):
            lbl = f'namespace="{NAMESPACE}",pool="pool-{i}",model="llama",version="1"'
            lines += [
                f"nv_inference_request_success{{{lbl}}} {n:.0f}",
                f'nv_inference_request_failure{{{lbl},reason="REJECTED"}} 0',
                f"nv_inference_count{{{lbl}}} {n:.0f}",
                f"nv_inference_exec_count{{{lbl}}} {n / self.batch:.0f}",
                f"nv_inference_queue_duration_us{{{lbl}}} {n * 0.2 * self.latency_ms * 1000:.0f}",
                f"nv_inference_compute_infer_duration_us{{{lbl}}} {n * 0.8 * self.latency_ms * 1000:.0f}",
                f"nv_inference_request_duration_us{{{lbl}}} {n * self.latency_ms * 1000:.0f}",
                f"nv_inference_pending_request_count{{{lbl}}} 1",
                f'nv_gpu_utilization{{namespace="{NAMESPACE}",pool="pool-{i}",gpu_uuid="GPU-{i}"}} 0.5',
                f'nv_inference_request_summary_us{{{lbl},quantile="0.99"}} {self.latency_ms * 1500:.0f}',
                f"poolpilot_executor_tokens_total{{{lbl}}} {n * 300:.0f}",
            ]
        return "\n".join(lines) + "\n"

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, int]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        port = free_port()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, port


class CountingProxy:
    """Forwards to Prometheus and counts the PromQL requests the operator sends."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.count = 0
        self.lock = threading.Lock()

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, int]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self, body: bytes | None) -> None:
                if self.path.startswith("/api/v1/query"):
                    with owner.lock:
                        owner.count += 1
                req = urllib.request.Request(owner.upstream + self.path, data=body, method=self.command)
                if body is not None:
                    req.add_header("Content-Type", self.headers.get("Content-Type", ""))
                with urllib.request.urlopen(req, timeout=30) as resp:
                    data = resp.read()
                    self.send_response(resp.status)
                    self.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def log_message(self, *args: Any) -> None:
                pass

        port = free_port()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, port


class HonouredPrometheus(PrometheusServer):
    """The exporter's own `namespace`/`pool` labels kept (as a pod-discovery relabelling would set them)."""

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        for job in cfg["scrape_configs"]:
            job["honor_labels"] = True
        return cfg


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def objects(pools: int, tick_s: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "poolpilot.io/v1alpha1",
            "kind": "GPUNodePool",
            "metadata": {"name": "bench-gpus"},
            "spec": {
                "provider": {"fake": {"nodes": 1}},
                "gpusPerNode": 8,
                "nodes": {"min": 0, "max": 1000},
                "pricePerNodeHourUSD": 29.4,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            },
        }
    ]
    for i in range(pools):
        labels = {"app": f"triton-{i}", "poolpilot.io/pool": f"pool-{i}"}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"triton-{i}", "namespace": NAMESPACE},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "triton", "image": "registry.k8s.io/pause:3.10"}]},
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "poolpilot.io/v1alpha1",
                "kind": "InferencePool",
                "metadata": {"name": f"pool-{i}", "namespace": NAMESPACE},
                "spec": {
                    "mode": "Auto",
                    "targetRef": {"kind": "Deployment", "name": f"triton-{i}"},
                    "model": {"name": "llama", "maxBatchSize": 64},
                    "nodePool": {"name": "bench-gpus"},
                    "tickSeconds": tick_s,
                },
            }
        )
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    with ControlPlane(work / "cluster", audit=True) as cp:
        cp.kubectl("apply", "-f", str(REPO / "crds"))
        cp.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/inferencepools.poolpilot.io",
            "crd/gpunodepools.poolpilot.io",
        )
        cp.kubectl("create", "namespace", NAMESPACE)
        exporter, exporter_port = SyntheticTriton(args.pools).serve()
        (work / "prom").mkdir(exist_ok=True)
        with HonouredPrometheus({"triton": [f"127.0.0.1:{exporter_port}"]}, workdir=work / "prom") as prom:
            proxy = CountingProxy(prom.url)
            proxy_server, proxy_port = proxy.serve()
            liveness, metrics = free_port(), free_port()
            installed = chart.install(
                cp,
                work / "chart",
                values={
                    "settings": {
                        "prometheusURL": f"http://127.0.0.1:{proxy_port}",
                        "livenessPort": liveness,
                        "metricsPort": metrics,
                    }
                },
            )
            manifest = "\n---\n".join(json.dumps(o) for o in objects(args.pools, args.tick_seconds))
            cp.kubectl("apply", "-f", "-", input=manifest, timeout_s=600)
            env = {**os.environ, "KUBECONFIG": str(installed.kubeconfig)}
            op = chart.OperatorProcess(
                installed.command(sys.executable), env, work / "operator.log", liveness, metrics
            )
            try:
                return _steady_window(args, cp, op, proxy, installed)
            finally:
                op.stop()
                proxy_server.shutdown()
                exporter.shutdown()


def _steady_window(
    args: argparse.Namespace,
    cp: ControlPlane,
    op: chart.OperatorProcess,
    proxy: CountingProxy,
    installed: chart.InstalledOperator,
) -> dict[str, Any]:
    user = f"system:serviceaccount:{installed.namespace}:{installed.service_account}"
    print(f"warm-up {args.warmup_seconds} s with {args.pools} pools …", flush=True)
    time.sleep(args.warmup_seconds)
    op.assert_alive()
    before_events = len(cp.audit_events())
    before_cpu, before_queries = proc_cpu_s(op.proc.pid), proxy.count
    before_own = op.own_metrics()
    t0 = time.monotonic()
    rss = []
    while time.monotonic() - t0 < args.measure_seconds:
        time.sleep(5)
        op.assert_alive()
        rss.append(proc_rss_mib(op.proc.pid))
    elapsed = time.monotonic() - t0
    cpu = proc_cpu_s(op.proc.pid) - before_cpu
    queries = proxy.count - before_queries
    after_own = op.own_metrics()
    events = [e for e in cp.audit_events()[before_events:] if e.get("user", {}).get("username") == user]
    by_call = collections.Counter(
        f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}"
        + (f"/{e['objectRef']['subresource']}" if e.get("objectRef", {}).get("subresource") else "")
        for e in events
    )

    def delta(prefix: str) -> float:
        keys = {k for k in after_own if k.startswith(prefix)}
        return sum(after_own[k] - before_own.get(k, 0.0) for k in keys)

    ticks = delta("poolpilot_ticks_total{kind=InferencePool")
    tick_p50_s, tick_p99_s = (
        _histogram_quantile(before_own, after_own, "poolpilot_tick_duration_seconds", "kind=InferencePool", q)
        for q in (0.5, 0.99)
    )
    fetches = delta("poolpilot_metric_fetches_total")
    writes = delta("poolpilot_status_writes_total{kind=InferencePool")
    return {
        "pools": args.pools,
        "tick_seconds": args.tick_seconds,
        "window_s": round(elapsed, 1),
        "pool_ticks": ticks,
        "metric_fetches": fetches,
        "promql_requests": queries,
        "promql_requests_per_fetch": queries / fetches if fetches else math.nan,
        "api_calls": len(events),
        "api_calls_per_pool_tick": len(events) / ticks if ticks else math.nan,
        "api_calls_by_verb_resource": dict(by_call.most_common()),
        "expected_pool_ticks": args.pools * elapsed / args.tick_seconds,
        "tick_duration_p50_s": tick_p50_s,
        "tick_duration_p99_s": tick_p99_s,
        "status_writes_per_pool_tick": writes / ticks if ticks else math.nan,
        "events_per_pool_tick": by_call.get("create events", 0) / ticks if ticks else math.nan,
        "operator_cpu_cores": cpu / elapsed,
        "operator_rss_mib_max": max(rss) if rss else math.nan,
    }


def _histogram_quantile(
    before: dict[str, float], after: dict[str, float], family: str, selector: str, q: float
) -> float:
    """Upper bound of the bucket holding the q-quantile of the observations made between two scrapes."""
    buckets = []
    for key, value in after.items():
        if key.startswith(f"{family}_bucket{{") and selector in key:
            le = key.split("le=", 1)[1].split(",")[0].rstrip("}")
            buckets.append((float(le), value - before.get(key, 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    for le, count in buckets:
        if total and count >= q * total:
            return le
    return math.nan


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pools", type=int, default=200)
    parser.add_argument("--tick-seconds", type=int, default=15)
    parser.add_argument("--warmup-seconds", type=int, default=120)
    parser.add_argument("--measure-seconds", type=int, default=120)
    parser.add_argument("--dir", default="out/operator-scale")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    result = measure(args)
    for key, value in result.items():
        print(f"{key:32s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
