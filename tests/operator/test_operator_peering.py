"""Two operator replicas as the chart runs them with `settings.peering`: exactly one acts (kopf peering,
the peering CRDs and RBAC from the chart), and the standby takes over when the active one goes."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from poolpilot.sandbox import chart
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.processes import free_port

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_until(
    fn: Callable[[], T | None], what: str, ops: list[chart.OperatorProcess], timeout_s: float
) -> T:
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    logs = "\n\n".join(f"--- operator {i}\n{op.tail()}" for i, op in enumerate(ops))
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})\n{logs}")


def ticks(op: chart.OperatorProcess) -> float:
    """InferencePool ticks this operator ran (0 when it never ticked one)."""
    return sum(
        v
        for k, v in op.own_metrics().items()
        if k.startswith("poolpilot_ticks_total{") and "kind=InferencePool" in k
    )


@pytest.fixture
def operators(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[list[chart.OperatorProcess]]:
    control_plane.kubectl("apply", "-f", str(REPO / "crds"))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/inferencepools.poolpilot.io")
    ports = [(free_port(), free_port()) for _ in range(2)]
    started: list[chart.OperatorProcess] = []
    try:
        for i, (liveness, metrics) in enumerate(ports):
            installed = chart.install(
                control_plane,
                tmp_path / f"chart-{i}",
                release="pp-peer",
                namespace="poolpilot-peer",
                values={
                    "replicaCount": 2,
                    "settings": {
                        "peering": "poolpilot-e2e",
                        "prometheusURL": f"http://127.0.0.1:{free_port()}",
                        "livenessPort": liveness,
                        "metricsPort": metrics,
                    },
                },
            )
            env = {**control_plane.env(), "KUBECONFIG": str(installed.kubeconfig)}
            op = chart.OperatorProcess(
                installed.command(sys.executable), env, tmp_path / f"operator-{i}.log", liveness, metrics
            )
            started.append(op)
            wait_until(op.healthy, f"operator {i} liveness", started, 60)
        yield started
    finally:
        for op in started:
            op.stop()


def test_two_replicas_one_acts_and_the_standby_takes_over(
    control_plane: ControlPlane, namespace: str, operators: list[chart.OperatorProcess]
) -> None:
    pool = {
        "apiVersion": "poolpilot.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "chat", "namespace": namespace},
        "spec": {
            "mode": "Recommend",
            "targetRef": {"kind": "Deployment", "name": "chat-triton"},
            "model": {"name": "llama", "maxBatchSize": 64},
            "tickSeconds": 5,
        },
    }
    labels = {"app": "chat-triton"}
    target = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-triton", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "triton", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }
    for obj in (target, pool):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def status() -> dict[str, Any] | None:
        got = control_plane.kubectl("get", "inferencepool", "chat", "-n", namespace, "-o", "json")
        obj: dict[str, Any] = json.loads(got.stdout)
        return obj if (obj.get("status") or {}).get("conditions") else None

    wait_until(status, "the pool's status from the active operator", operators, 60)
    counts = wait_until(
        lambda: c if max(c := [ticks(op) for op in operators]) >= 2 else None,
        "two ticks of the pool",
        operators,
        60,
    )
    assert sorted(counts)[0] == 0, f"both operators ticked the pool: {counts}"
    active = counts.index(max(counts))
    standby = operators[1 - active]
    assert not any(namespace in k for k in standby.own_metrics()), "the standby reports the pool"

    operators[active].stop()
    wait_until(lambda: ticks(standby) >= 1, "the standby to take over", operators, 90)
    standby.assert_alive()
