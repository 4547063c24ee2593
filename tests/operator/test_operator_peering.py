"""Two operator replicas as the chart runs them with `settings.peering`: exactly one acts (kopf peering,
the peering CRDs and RBAC from the chart), and the standby takes over when the active one goes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import kube
from tests.kube import wait_for

from poolpilot.sandbox import chart
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.processes import free_port

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


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
            wait_for(op.healthy, f"operator {i} liveness", 60, interval_s=0.5, logs=started)
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
    target = kube.deployment(namespace, "chat-triton", 2)
    for obj in (target, pool):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def status() -> dict[str, Any] | None:
        got = control_plane.kubectl("get", "inferencepool", "chat", "-n", namespace, "-o", "json")
        obj: dict[str, Any] = json.loads(got.stdout)
        return obj if (obj.get("status") or {}).get("conditions") else None

    wait_for(status, "the pool's status from the active operator", 60, interval_s=0.5, logs=operators)
    counts = wait_for(
        lambda: c if max(c := [ticks(op) for op in operators]) >= 2 else None,
        "two ticks of the pool",
        60,
        interval_s=0.5,
        logs=operators,
    )
    assert sorted(counts)[0] == 0, f"both operators ticked the pool: {counts}"
    active = counts.index(max(counts))
    standby = operators[1 - active]
    assert not any(namespace in k for k in standby.own_metrics()), "the standby reports the pool"

    operators[active].stop()
    wait_for(lambda: ticks(standby) >= 1, "the standby to take over", 90, interval_s=0.5, logs=operators)
    standby.assert_alive()
