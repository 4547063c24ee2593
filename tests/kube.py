"""Shared helpers for tests against a real cluster: polling with a clear timeout message, kubectl
apply/get as a user would run them, the pods that count (Ready, not terminating), a test Deployment.

Every wait is a poll with a deadline (controllers are asynchronous, and the CPU is shared): generous
timeouts, and a failure that says what was awaited, the last value seen and the logs that explain it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from poolpilot.sandbox.controlplane import ControlPlane

T = TypeVar("T")
SANDBOX_EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "sandbox"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.08-py3"
TOLERATE_KWOK = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


class HasTail(Protocol):
    def tail(self) -> str: ...


class Watched(HasTail, Protocol):
    """A process a wait depends on (the operator): checked alive on every poll, its log shown on timeout."""

    def assert_alive(self) -> None: ...


def wait_for(
    fn: Callable[[], T | None],
    what: str,
    timeout_s: float = 60.0,
    *,
    interval_s: float = 0.25,
    watch: Watched | None = None,
    logs: Sequence[HasTail] = (),
) -> T:
    """Poll `fn` until it returns something truthy and return it; on timeout fail naming `what`, the
    last value seen and the tails of `watch` and `logs`. `watch` must stay alive while waiting."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        if watch is not None:
            watch.assert_alive()
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            break
        time.sleep(interval_s)
    tails = [t.tail() for t in ([watch] if watch is not None else []) + list(logs)]
    message = f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})"
    raise AssertionError("\n".join([message, *tails]))


def apply(cp: ControlPlane, *objects: Mapping[str, Any]) -> None:
    """`kubectl apply -f -` for each object, in order."""
    for obj in objects:
        cp.kubectl("apply", "-f", "-", input=json.dumps(obj))


def get(cp: ControlPlane, *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json`, parsed (an error when the object is missing)."""
    parsed: dict[str, Any] = json.loads(cp.kubectl("get", *args, "-o", "json").stdout)
    return parsed


def get_json(cp: ControlPlane, *args: str) -> dict[str, Any] | None:
    """`kubectl get ARGS -o json`, parsed, or None when the object is NotFound (any other error fails)."""
    result = cp.kubectl("get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The status condition of that type, or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (what EndpointSlices and `kubectl get pods` READY go by)."""
    c = condition(pod, "Ready")
    return c is not None and c["status"] == "True"


def pods(cp: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods matching `selector` that are not terminating."""
    items: list[dict[str, Any]] = get(cp, "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready_pods(cp: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods matching `selector` that are Ready and not terminating."""
    return [p for p in pods(cp, namespace, selector) if is_ready(p)]


def phases(cp: ControlPlane, namespace: str, selector: str) -> dict[str, int]:
    """How many non-terminating pods are in each phase, e.g. {"Running": 8, "Pending": 4}."""
    counts: dict[str, int] = {}
    for p in pods(cp, namespace, selector):
        phase = p["status"].get("phase", "?")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def wait_for_default_service_account(cp: ControlPlane, namespace: str, timeout_s: float = 60.0) -> None:
    """Pods are admitted only once KCM's serviceaccount controller has created `default`."""
    wait_for(
        lambda: cp.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
        f"the default ServiceAccount in {namespace}",
        timeout_s,
    )


def deployment(
    namespace: str,
    name: str = "chat-triton",
    replicas: int = 2,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    image: str = PAUSE_IMAGE,
    container: Mapping[str, Any] | None = None,
    gpus: int = 0,
    **pod_spec: Any,
) -> dict[str, Any]:
    """A Deployment whose selector is all of `labels` (default `app: NAME`) and whose one container
    (`triton`, `image`, plus `container` fields) requests `gpus` nvidia.com/gpu; `pod_spec` adds pod
    spec fields (nodeSelector, tolerations, ...)."""
    labels = dict(labels or {"app": name})
    body: dict[str, Any] = {"name": "triton", "image": image, **(container or {})}
    if gpus:
        gpu = {"nvidia.com/gpu": str(gpus)}
        body["resources"] = {"requests": gpu, "limits": gpu}
    template_meta: dict[str, Any] = {"labels": labels}
    if annotations:
        template_meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": template_meta, "spec": {**pod_spec, "containers": [body]}},
        },
    }


def triton_container(model: str, *extra_args: str) -> dict[str, Any]:
    """The production Triton container fields (the pod runner starts it as an executor at the pod's IP)."""
    return {
        "command": ["tritonserver"],
        "args": [
            "--model-repository=/models",
            "--model-control-mode=explicit",
            f"--load-model={model}",
            *extra_args,
        ],
        "ports": [{"name": "http", "containerPort": 8000}, {"name": "metrics", "containerPort": 8002}],
    }


def sandbox_example(name: str) -> dict[str, Any]:
    """One manifest of docs/examples/sandbox/ (one object per file), to adjust before applying."""
    loaded: dict[str, Any] = yaml.safe_load((SANDBOX_EXAMPLES / name).read_text())
    return loaded
