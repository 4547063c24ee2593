"""Benchmark (not a test): what `poolpilot sandbox` costs on this machine, and that `down` leaves nothing.

    nice -n 5 .venv/bin/python bench/sandbox_footprint.py --pods 40 --nodes 5 --rate 200 [--json OUT]

Runs the real CLI as a user would: `poolpilot sandbox up --dir DIR` (the operator included), timed until it
is ready (`sandbox.env` written, every component healthy); applies docs/examples/sandbox/ with the
GPUNodePool held at `--nodes` nodes (`nodes.min`, 8 GPUs each) and the Deployment at `--pods` replicas (no
InferencePool: the fleet stays as asked); waits for every pod to be Ready. Then measures the sandbox's own
processes — `sandbox up` and all its descendants: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok, Prometheus, the operator, one executor per pod — over an idle window and over a
window of `poolpilot loadgen --service` at `--rate` req/s (the generator is not part of the sandbox: its
own CPU is printed apart). CPU is the processes' user+system ticks over the window (/proc), RSS the sum of
their resident sets (shared pages counted once per process, so an upper bound). Finally `sandbox down`, and
a check that no process of the sandbox is left and nothing listens on any port it had open.
Prints the figures; no timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples" / "sandbox"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
CLI = [sys.executable, "-m", "poolpilot.cli"]


# ---- the process tree, from /proc ---------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(name, ppid, cpu ticks, rss kB) of a process, or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is state (field 3): ppid is field 4, utime 14, stime 15, rss 24.
    return name, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE_KB


def tree(root: int) -> dict[int, tuple[str, int, int]]:
    """Every live descendant of `root` (and root): pid → (name, cpu ticks, rss kB)."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p))) is not None}
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (_, ppid, _, _) in stats.items():
        children[ppid].append(pid)
    out: dict[int, tuple[str, int, int]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            name, _, ticks, rss = stats[pid]
            out[pid] = (name, ticks, rss)
            todo.extend(children[pid])
    return out


def component(name: str, pid: int, root: int) -> str:
    if pid == root:
        return "sandbox (pod runner, pod discovery)"
    if name.startswith("poolpilot-execu"):
        return "executors"
    if name.startswith("python"):
        return "operator"
    return name


def measure(root: int, seconds: float) -> dict[str, Any]:
    """CPU (cores, over the window) and RSS (MB, mean of samples) of the tree, in total and per component."""
    before = tree(root)
    rss_samples: list[dict[str, float]] = []
    end = time.monotonic() + seconds
    began = time.monotonic()
    while time.monotonic() < end:
        time.sleep(min(5.0, max(0.0, end - time.monotonic())))
        per: dict[str, float] = defaultdict(float)
        for pid, (name, _, rss) in tree(root).items():
            per[component(name, pid, root)] += rss / 1024
        rss_samples.append(per)
    wall = time.monotonic() - began
    after = tree(root)
    cpu: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for pid, (name, ticks, _) in after.items():
        start = before[pid][1] if pid in before and before[pid][0] == name else 0
        cpu[component(name, pid, root)] += (ticks - start) / CLK_TCK / wall
        counts[component(name, pid, root)] += 1
    names = sorted(set(cpu) | {k for s in rss_samples for k in s})
    rss = {k: sum(s.get(k, 0.0) for s in rss_samples) / max(1, len(rss_samples)) for k in names}
    return {
        "seconds": round(wall, 1),
        "processes": len(after),
        "cpu_cores": round(sum(cpu.values()), 3),
        "rss_mb": round(sum(rss.values()), 1),
        "by_component": {
            k: {
                "processes": counts.get(k, 0),
                "cpu_cores": round(cpu.get(k, 0.0), 3),
                "rss_mb": round(rss[k], 1),
            }
            for k in names
        },
    }


def listening(pids: set[int]) -> set[str]:
    """The TCP addresses the given processes listen on (from `ss`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.add(line.split()[3])
    return found


# ---- the sandbox as a user drives it ------------------------------------------------------------------


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    cmd = [env["KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout


def ready_pods(env: dict[str, str]) -> int:
    items = json.loads(kubectl(env, "get", "pods", "-n", "chat", "-l", "app=chat-triton", "-o", "json"))[
        "items"
    ]
    return sum(
        1
        for p in items
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    )


def apply_fleet(env: dict[str, str], pods: int, nodes: int) -> None:
    docs = [yaml.safe_load((EXAMPLES / n).read_text()) for n in ("00-namespace.yaml", "30-service.yaml")]
    node_pool = yaml.safe_load((EXAMPLES / "10-gpunodepool.yaml").read_text())
    node_pool["spec"]["nodes"] = {"min": nodes, "max": nodes}
    node_pool["spec"]["provisioningSeconds"] = 5
    deployment = yaml.safe_load((EXAMPLES / "20-deployment.yaml").read_text())
    deployment["spec"]["replicas"] = pods
    for doc in [*docs, node_pool, deployment]:
        kubectl(env, "apply", "-f", "-", stdin=json.dumps(doc))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200.0, help="load generator rate, req/s")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--pod-start-seconds", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, default=None, help="sandbox folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="sandbox-footprint-"))
    env_file = work / "sandbox.env"
    figures: dict[str, Any] = {
        "pods": args.pods,
        "nodes": args.nodes,
        "rate_rps": args.rate,
        "cpus": os.cpu_count(),
    }
    work.mkdir(parents=True, exist_ok=True)
    log = (work / "up.log").open("w")
    began = time.monotonic()
    up_cmd = [*CLI, "sandbox", "up", "--dir", str(work), "--pod-start-seconds", str(args.pod_start_seconds)]
    up = subprocess.Popen(
        up_cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    seen: dict[int, str] = {}  # pid → name of every sandbox process seen
    ports: set[str] = set()
    try:
        while not env_file.exists():
            if up.poll() is not None:
                raise SystemExit(f"sandbox up exited ({up.returncode}):\n{(work / 'up.log').read_text()}")
            time.sleep(0.2)
        figures["up_ready_s"] = round(time.monotonic() - began, 1)
        print(f"sandbox up: ready {figures['up_ready_s']} s after the command", flush=True)
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)

        apply_fleet(env, args.pods, args.nodes)
        applied = time.monotonic()
        while ready_pods(env) < args.pods:
            if time.monotonic() - applied > 900:
                raise SystemExit(f"only {ready_pods(env)}/{args.pods} pods Ready after 900 s")
            time.sleep(2.0)
        figures["pods_ready_s"] = round(time.monotonic() - applied, 1)
        print(
            f"{args.pods} pods Ready on {args.nodes} nodes {figures['pods_ready_s']} s after apply",
            flush=True,
        )
        seen.update({pid: name for pid, (name, _, _) in tree(up.pid).items()})
        ports |= listening(set(seen))

        time.sleep(10.0)  # let the start-up settle before the idle window
        figures["idle"] = measure(up.pid, args.idle_seconds)
        print("idle:", json.dumps(figures["idle"]), flush=True)

        out = work / "loadgen.json"
        load_cmd = [
            *CLI, "loadgen", "--service", "chat/chat-triton", "--kubeconfig", env["KUBECONFIG"],
            "--model", "llm_emulated", "--synthetic", "constant", "--rate", str(args.rate),
            "--duration", str(args.load_seconds), "--json", str(out),
        ]  # fmt: skip
        load = subprocess.Popen(load_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(5.0)  # past the generator's start-up, into the steady load
        figures["load"] = measure(up.pid, max(10.0, args.load_seconds - 10.0))
        seen.update({pid: name for pid, (name, _, _) in tree(up.pid).items()})
        _, status, usage = os.wait4(load.pid, 0)
        load.returncode = os.waitstatus_to_exitcode(status)
        report = json.loads(out.read_text()) if out.exists() else {}
        figures["load"]["loadgen"] = {
            "exit": load.returncode,
            "cpu_cores": round((usage.ru_utime + usage.ru_stime) / max(report.get("span_s", 0.0), 1.0), 3),
            "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "report": report,
        }
        print("load:", json.dumps(figures["load"]), flush=True)
        ports |= listening(set(seen))
    finally:
        if env_file.exists():
            subprocess.run([*CLI, "sandbox", "down", "--dir", str(work)], check=False)
        try:
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        log.close()

    time.sleep(1.0)
    left = sorted(pid for pid, name in seen.items() if (st := _stat(pid)) is not None and st[0] == name)
    still = sorted(ports & listening_any())
    figures["down"] = {
        "processes_seen": len(seen),
        "processes_left": left,
        "ports_seen": len(ports),
        "ports_left": still,
    }
    print("down:", json.dumps(figures["down"]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not left and not still else 1


def listening_any() -> set[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in out.splitlines()}


if __name__ == "__main__":
    sys.exit(main())
