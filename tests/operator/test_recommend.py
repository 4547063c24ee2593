"""`poolpilot recommend`: the pool's recommendation as a patch a person can commit — read from the status on a
real apiserver, applied back as a GitOps tool would (server-side apply of the committed file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests import kube

from poolpilot.backends.batching import batching_of
from poolpilot.policy.types import BatchingConfig
from poolpilot.recommend import NoRecommendation, recommendation, render
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.triton.config import parse_pbtxt

REPO = Path(__file__).resolve().parents[2]
BATCHING = {
    "maxQueueDelayMicroseconds": 4000,
    "maxBatchSize": 32,
    "preferredBatchSize": [8, 16],
    "instanceCount": 2,
    "queueTimeoutMicroseconds": 120000,
    "maxQueueSize": 0,
}


def pool(status: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "poolpilot.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "mode": "Recommend",
            "targetRef": {"kind": "Deployment", "name": "chat-triton"},
            "model": {"name": "llama", "maxBatchSize": 64},
        },
    }
    if status is not None:
        body["status"] = status
    return body


STATUS = {
    "desiredReplicas": 7,
    "recommendedBatching": BATCHING,
    "predictedP99Ms": 131.0,
    "lastDecision": {"time": "2026-12-04T03:00:00Z", "action": "RecommendScaleOut", "reasons": ["p99 high"]},
}


def test_the_patch_and_the_config_fields_say_what_the_status_recommends() -> None:
    text = render(recommendation(pool(STATUS)))
    patch = yaml.safe_load(text)  # the comments are for the person; the YAML is the patch
    assert patch == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-triton", "namespace": "team-a"},
        "spec": {"replicas": 7},
    }
    pbtxt = "\n".join(
        line.removeprefix("#   ")
        for line in text.splitlines()
        if line.startswith("#   ") and "- " not in line[:6]
    )
    assert batching_of(parse_pbtxt(pbtxt)) == BatchingConfig(
        max_queue_delay_us=4000,
        max_batch_size=32,
        preferred_batch_sizes=(8, 16),
        instance_count=2,
        queue_timeout_us=120000,
        max_queue_size=0,
    )
    assert "#   - p99 high" in text and "predicted p99: 131 ms" in text


def test_no_recommendation_yet_is_a_clear_error() -> None:
    with pytest.raises(NoRecommendation, match=r"status\.desiredReplicas is unset"):
        recommendation(pool(None))


@pytest.mark.cluster
def test_recommend_reads_the_cluster_and_its_patch_applies(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    control_plane.kubectl("apply", "-f", str(REPO / "crds"))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/inferencepools.poolpilot.io")
    body = pool(None)
    body["metadata"]["namespace"] = namespace
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(body))
    deployment = kube.deployment(namespace, "chat-triton", 2, image=kube.TRITON_IMAGE)
    control_plane.kubectl(
        "apply", "--server-side", "--field-manager=gitops", "-f", "-", input=json.dumps(deployment)
    )

    def run() -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "poolpilot.cli", "recommend", "chat", "-n", namespace]
        return subprocess.run(
            [*cmd, "--kubeconfig", str(control_plane.kubeconfig)], capture_output=True, text=True
        )

    early = run()
    assert early.returncode == 1 and "no recommendation yet" in early.stderr
    control_plane.kubectl(
        "patch", "inferencepool", "chat", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": STATUS}),
    )  # fmt: skip
    done = run()
    assert done.returncode == 0, done.stderr
    committed = tmp_path / "replicas-patch.yaml"
    committed.write_text(done.stdout)
    # As a person would apply it (or keep it as a kustomize patch): a merge patch of the workload.
    target = ("deployment", "chat-triton", "-n", namespace)
    control_plane.kubectl("patch", *target, "--type=merge", "--patch-file", str(committed))
    replicas = control_plane.kubectl(
        "get", "deployment", "chat-triton", "-n", namespace, "-o", "jsonpath={.spec.replicas}"
    ).stdout
    assert replicas == "7"
