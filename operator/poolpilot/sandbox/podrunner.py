"""The pod runner: kubelet and container runtime for the sandbox's Triton pods, and the only stand-in.

kwok runs the node and pod lifecycle without kubelets, but nothing behind its pods. For every pod on a kwok
node that carries the annotation `sandbox.poolpilot.io/model-repository: <host folder>` (the mapping of the
container's model repository to a folder of this machine), the runner starts the container's `tritonserver`
command as `poolpilot-executor` (which mirrors its flags) bound to the pod's IP (loopback, from kwok's pod
CIDR) with the container's ports, and reports readiness from the executor's `/v2/health/ready` (through
tritonclient) in the pod's `Ready` condition — so EndpointSlices, the operator and Prometheus see what a
kubelet would report, not Ready while the models load. It stops the process when the pod goes, restarts it
when it exits (restartPolicy Always), keeps a log per pod, and can delay each start (a real Triton pod takes
about a minute to load its model).

Who owns what: kwok's stock `pod-ready` stage would mark every pod Ready at once; `runner_stages()` rewrites
it to leave runner pods alone and adds a `runner-pod-start` stage that gives them their IP and `Running`
phase with `Ready=False`. From then on only the runner writes their readiness.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from poolpilot.sandbox.processes import spawn, terminate

log = logging.getLogger(__name__)

REPOSITORY_ANNOTATION = "sandbox.poolpilot.io/model-repository"
_NOT_RUNNER = {"key": f'.metadata.annotations["{REPOSITORY_ANNOTATION}"]', "operator": "DoesNotExist"}
_IS_RUNNER = {"key": f'.metadata.annotations["{REPOSITORY_ANNOTATION}"]', "operator": "Exists"}

# Taken from kwok's stock pod-ready stage (hostIP, podIP from the node's CIDR, Running), but Ready=False.
_START_TEMPLATE = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def runner_stages(stock: Sequence[Path]) -> str:
    """kwok's stock stages with runner pods excluded from `pod-ready`, plus the runner's own start stage."""
    docs = []
    for path in stock:
        stage = yaml.safe_load(path.read_text())
        if stage["metadata"]["name"] == "pod-ready":
            stage["spec"]["selector"]["matchExpressions"].append(_NOT_RUNNER)
        docs.append(stage)
    docs.append(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "runner-pod-start"},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {
                    "matchExpressions": [
                        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                        {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                        {"key": ".spec.nodeName", "operator": "Exists"},
                        _IS_RUNNER,
                    ]
                },
                "next": {"statusTemplate": _START_TEMPLATE},
            },
        }
    )
    return yaml.safe_dump_all(docs, sort_keys=False)


def executor_command(pod: dict[str, Any], executable: str, repository_root: Path | None = None) -> list[str]:
    """The pod's first container's `tritonserver` command as `poolpilot-executor` at the pod's IP (pure)."""
    container = pod["spec"]["containers"][0]
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if not words or Path(words[0]).name != "tritonserver":
        raise ValueError(f"pod {pod['metadata']['name']}: the first container does not run tritonserver")
    repository = Path(pod["metadata"]["annotations"][REPOSITORY_ANNOTATION])
    if not repository.is_absolute() and repository_root is not None:
        repository = repository_root / repository
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    args: list[str] = []
    skip = False
    for word in words[1:]:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if flag in ("--model-repository", "--model-store", "--http-port", "--metrics-port", "--http-address"):
            skip = "=" not in word  # drop the flag and its separate value
            continue
        args.append(word)
    return [
        executable,
        *args,
        f"--model-repository={repository}",
        f"--http-address={pod['status']['podIP']}",
        f"--http-port={ports.get('http', 8000)}",
        f"--metrics-port={ports.get('metrics', 8002)}",
    ]


@dataclass
class _Running:
    uid: str
    url: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready: bool | None = None
    restarts: int = 0
    due_at: float = 0.0


@dataclass
class PodRunner:
    """Polls the API server (every `interval_s`) and keeps one executor process per runner pod."""

    api_client: Any
    log_dir: Path
    executable: str = "poolpilot-executor"
    repository_root: Path | None = None
    """Where relative `sandbox.poolpilot.io/model-repository` paths are resolved (manifests stay portable)."""
    start_delay_s: float = 0.0
    interval_s: float = 0.5
    _running: dict[tuple[str, str], _Running] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="pod-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for key in list(self._running):
            self._kill(key)

    def pids(self) -> dict[str, int]:
        return {f"{ns}/{name}": r.proc.pid for (ns, name), r in self._running.items() if r.proc is not None}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile_once()
            except Exception:  # the runner must outlive a failed API call, as a kubelet would
                log.exception("pod runner: reconcile failed; retrying")
            self._stop.wait(self.interval_s)

    def reconcile_once(self) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api_client)
        listed = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
        pods = [p for p in listed if REPOSITORY_ANNOTATION in (p["metadata"].get("annotations") or {})]
        alive = {}
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            ip = (pod.get("status") or {}).get("podIP")
            if pod["metadata"].get("deletionTimestamp") or not ip:
                continue
            alive[key] = pod
            run = self._running.get(key)
            if run is None or run.uid != pod["metadata"]["uid"]:
                if run is not None:
                    self._kill(key)
                container = pod["spec"]["containers"][0]
                ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
                run = _Running(pod["metadata"]["uid"], f"{ip}:{ports.get('http', 8000)}")
                run.due_at = time.monotonic() + self.start_delay_s
                self._running[key] = run
            self._drive(core, pod, run)
        for key in [k for k in self._running if k not in alive]:
            self._kill(key)

    def _drive(self, core: Any, pod: dict[str, Any], run: _Running) -> None:
        key = f"{pod['metadata']['namespace']}_{pod['metadata']['name']}"
        if run.proc is None and time.monotonic() >= run.due_at:
            cmd = executor_command(pod, self.executable, self.repository_root)
            with (self.log_dir / f"{key}.log").open("ab") as out:
                # From the runner's loop thread, which lives until stop(): SIGTERM when it ends.
                run.proc = spawn(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            run.started_at = time.monotonic()
        elif run.proc is not None and run.proc.poll() is not None:
            log.warning("pod runner: %s exited with %s; restarting", key, run.proc.returncode)
            run.proc, run.restarts = None, run.restarts + 1
            run.due_at = time.monotonic() + 1.0
        ready = run.proc is not None and run.proc.poll() is None and _server_ready(run.url)
        # Compared with what the pod says, not only with our last write: like a kubelet, the runner puts the
        # status back when someone else changed it (the node lifecycle controller marks pods NotReady).
        reported = any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []
        )
        if ready != reported or ready != run.ready:
            _set_ready(core, pod, ready, run.restarts)
            run.ready = ready

    def _kill(self, key: tuple[str, str]) -> None:
        run = self._running.pop(key, None)
        if run is None or run.proc is None:
            return
        terminate(run.proc)


def _server_ready(url: str) -> bool:
    import tritonclient.http as triton_http

    try:
        client = triton_http.InferenceServerClient(url, connection_timeout=1.0, network_timeout=1.0)
        try:
            return bool(client.is_server_ready())
        finally:
            client.close()
    except Exception:
        return False


def _set_ready(core: Any, pod: dict[str, Any], ready: bool, restarts: int) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = "True" if ready else "False"
    conditions = [
        c for c in pod["status"].get("conditions") or [] if c["type"] not in ("Ready", "ContainersReady")
    ]
    conditions += [
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
        {"type": "Ready", "status": status, "lastTransitionTime": now},
    ]
    statuses = [
        {**c, "ready": ready, "restartCount": restarts} for c in pod["status"].get("containerStatuses") or []
    ]
    body = {"status": {"conditions": conditions, "containerStatuses": statuses}}
    core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"], body)
