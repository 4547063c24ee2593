"""`poolpilot sandbox`: a real local cluster with running Triton pods, for the demo, the benchmarks and users.

    poolpilot sandbox up --dir DIR [--no-operator] [--pod-start-seconds S]   (foreground; Ctrl-C stops it)
    poolpilot sandbox down --dir DIR
    poolpilot sandbox preempt NODE --dir DIR                                 (a spot loss)
    poolpilot sandbox demo --dir DIR --json OUT --report REPORT_DIR          (poolpilot.sandbox.demo)

What runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (GPU nodes without kubelets,
pod IPs on loopback) built from their Go modules; the pod runner (each Triton pod's `tritonserver` command as
`poolpilot-executor` at the pod's IP, readiness from `/v2/health/ready`); the real Prometheus discovering the
pods (HTTP SD with Kubernetes' pod metadata, the chart's relabelling) and scraping the operator; the operator
itself under the chart's RBAC. `DIR/sandbox.env` holds KUBECONFIG=, PROMETHEUS_URL=, KUBECTL=.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Sandbox:
    """Everything `sandbox up` starts, stopped in reverse by `stop` (no process, no port left)."""

    work_dir: Path
    operator: bool = True
    pod_start_s: float = 10.0
    scrape_interval_s: float = 5.0
    operator_args: tuple[str, ...] = ()
    _stack: list[Any] = field(default_factory=list)

    def start(self) -> Sandbox:
        from poolpilot import monitoring
        from poolpilot.sandbox import chart
        from poolpilot.sandbox.controlplane import ControlPlane
        from poolpilot.sandbox.poddiscovery import PodDiscovery
        from poolpilot.sandbox.podrunner import PodRunner
        from poolpilot.sandbox.processes import free_port
        from poolpilot.sandbox.prometheus import PrometheusServer

        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.cluster = ControlPlane(self.work_dir / "cluster", kwok=True).start()
            self._stack.append(self.cluster)
            self.cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            self.api_client = self.cluster.api_client()
            executable = shutil.which("poolpilot-executor") or str(
                Path(sys.executable).parent / "poolpilot-executor"
            )
            self.runner = PodRunner(
                self.api_client,
                self.work_dir / "pods",
                executable=executable,
                repository_root=REPO / "executor_image",
                start_delay_s=self.pod_start_s,
            ).start()
            self._stack.append(self.runner)
            self.discovery = PodDiscovery(self.api_client).start()
            self._stack.append(self.discovery)
            self.operator_ports = (free_port(), free_port())
            jobs = [
                monitoring.pod_scrape_config(
                    http_sd_url=self.discovery.url, interval_s=self.scrape_interval_s
                )
            ]
            targets = {"poolpilot-operator": [f"127.0.0.1:{self.operator_ports[1]}"]} if self.operator else {}
            (self.work_dir / "prometheus").mkdir(exist_ok=True)
            self.prometheus = PrometheusServer(
                targets,
                scrape_configs=jobs,
                scrape_interval_s=self.scrape_interval_s,
                workdir=self.work_dir / "prometheus",
            ).start()
            self._stack.append(self.prometheus)
            if self.operator:
                self._start_operator(chart)
            self._write_env()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_operator(self, chart: Any) -> None:
        liveness, metrics = self.operator_ports
        installed = chart.install(
            self.cluster,
            self.work_dir / "operator",
            values={
                "providers": {"kwok": {"enabled": True}},
                "settings": {
                    "prometheusURL": self.prometheus.url,
                    "livenessPort": liveness,
                    "metricsPort": metrics,
                    "logFormat": "plain",
                },
            },
        )
        env = {**os.environ, "KUBECONFIG": str(installed.kubeconfig)}
        cmd = [*installed.command(sys.executable), *self.operator_args]
        self.operator_process = chart.OperatorProcess(
            cmd, env, self.work_dir / "operator.log", liveness, metrics
        )
        self._stack.append(self.operator_process)
        deadline = time.monotonic() + 60
        while not self.operator_process.healthy():
            self.operator_process.assert_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not become healthy:\n{self.operator_process.tail()}")
            time.sleep(0.3)

    def _write_env(self) -> None:
        lines = [
            f"KUBECONFIG={self.cluster.kubeconfig}",
            f"PROMETHEUS_URL={self.prometheus.url}",
            f"KUBECTL={self.cluster.binaries.kubectl}",
            f"SANDBOX_PID={os.getpid()}",
        ]
        if self.operator:
            lines.append(f"OPERATOR_METRICS_URL=http://127.0.0.1:{self.operator_ports[1]}/metrics")
        (self.work_dir / "sandbox.env").write_text("\n".join(lines) + "\n")

    def pids(self) -> dict[str, int]:
        out = dict(self.cluster.pids) if hasattr(self, "cluster") else {}
        if hasattr(self, "runner"):
            out.update({f"pod {k}": v for k, v in self.runner.pids().items()})
        if hasattr(self, "operator_process"):
            out["operator"] = self.operator_process.proc.pid
        return out

    def stop(self) -> None:
        while self._stack:
            part = self._stack.pop()
            try:
                part.stop()
            except Exception as exc:  # keep stopping the rest
                print(f"sandbox: stopping {type(part).__name__}: {exc}", file=sys.stderr)
        client = getattr(self, "api_client", None)
        if client is not None:
            client.close()
        (self.work_dir / "sandbox.env").unlink(missing_ok=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sandbox_command", required=True)
    up = sub.add_parser("up", help="start the sandbox and stay in the foreground (Ctrl-C stops it)")
    up.add_argument("--dir", type=Path, required=True, help="working folder (logs, kubeconfig, sandbox.env)")
    up.add_argument("--no-operator", action="store_true", help="leave the operator out")
    up.add_argument("--pod-start-seconds", type=float, default=10.0, help="delay before a pod's model loads")
    up.add_argument("--scrape-interval-seconds", type=float, default=5.0)
    down = sub.add_parser("down", help="stop a sandbox started with `up --dir DIR`")
    down.add_argument("--dir", type=Path, required=True)
    preempt = sub.add_parser("preempt", help="delete a node at once, with its pods (a spot loss)")
    preempt.add_argument("node")
    preempt.add_argument("--dir", type=Path, required=True)
    from poolpilot.sandbox import demo

    demo.add_arguments(
        sub.add_parser("demo", help="a trace segment through a live sandbox and the simulator, a report")
    )


def _env(directory: Path) -> dict[str, str]:
    path = directory / "sandbox.env"
    if not path.exists():
        raise SystemExit(f"poolpilot sandbox: no sandbox running in {directory} ({path} missing)")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def main(args: argparse.Namespace) -> int:
    if args.sandbox_command == "demo":
        from poolpilot.sandbox import demo

        return demo.main(args)
    if args.sandbox_command == "down":
        pid = int(_env(args.dir)["SANDBOX_PID"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while (args.dir / "sandbox.env").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return 0 if not (args.dir / "sandbox.env").exists() else 1
    if args.sandbox_command == "preempt":
        import subprocess

        env = _env(args.dir)
        cmd = [
            env["KUBECTL"],
            f"--kubeconfig={env['KUBECONFIG']}",
            "delete",
            "node",
            args.node,
            "--wait=false",
        ]
        return subprocess.run(cmd, check=False).returncode
    return _up(args)


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    began = time.monotonic()
    box = Sandbox(
        args.dir.resolve(),
        operator=not args.no_operator,
        pod_start_s=args.pod_start_seconds,
        scrape_interval_s=args.scrape_interval_seconds,
    ).start()
    try:
        print(f"sandbox up in {time.monotonic() - began:.1f} s", flush=True)
        print((args.dir / "sandbox.env").read_text(), end="", flush=True)
        print(
            f"try: set -a; . {args.dir}/sandbox.env; $KUBECTL apply -f {REPO}/docs/examples/sandbox/",
            flush=True,
        )
        print(json.dumps(box.pids()), flush=True)
        while not stop.wait(1.0):
            box.cluster.check_alive()
    finally:
        box.stop()
        print("sandbox down", flush=True)
    return 0
