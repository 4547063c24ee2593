"""Kubernetes-facing backends against the real control plane: /scale, placeholder nodes, Events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests import kube

from poolpilot.api import types as api
from poolpilot.backends.kube import KubernetesCluster, ObjectRef
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import ProviderContext
from poolpilot.backends.workloads import KubernetesWorkloads
from poolpilot.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


@pytest.fixture
def api_client(control_plane: ControlPlane) -> Iterator[Any]:
    with control_plane.api_client() as client:
        yield client


def _replicas(cp: ControlPlane, namespace: str, name: str) -> int:
    out = cp.kubectl("get", "deployment", name, "-n", namespace, "-o", "jsonpath={.spec.replicas}")
    return int(out.stdout)


async def test_workload_replicas_through_scale_subresource(
    control_plane: ControlPlane, namespace: str, api_client: Any
) -> None:
    kube.apply(control_plane, kube.deployment(namespace, "triton", 2))
    workloads = KubernetesWorkloads(api_client)
    ref = ObjectRef("apps/v1", "Deployment", "triton", namespace)

    before = await workloads.get_scale(ref)
    await workloads.set_replicas(ref, 5)

    assert before is not None and before.spec_replicas == 2
    assert _replicas(control_plane, namespace, "triton") == 5
    after = await workloads.get_scale(ref)
    assert after is not None and after.spec_replicas == 5
    assert await workloads.get_scale(ObjectRef("apps/v1", "Deployment", "absent", namespace)) is None


TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _node(name: str, pool: str, gpus: int = 4) -> dict[str, Any]:
    """A Node object as a kubelet would register it (status set on create, as the apiserver allows)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpu-pool": pool}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "32", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
        },
    }


def _gpu_pod(namespace: str, name: str, node: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "triton", "image": "tritonserver", "resources": {"requests": gpu, "limits": gpu}}
            ],
        },
    }


async def test_placeholder_provider_holds_the_asked_nodes_minus_those_already_serving(
    control_plane: ControlPlane, namespace: str, api_client: Any
) -> None:
    tag = namespace[-8:]
    pool_nodes = [f"l4-{tag}-{i}" for i in range(3)]
    nodes = [_node(n, f"l4-{tag}") for n in pool_nodes] + [_node(f"other-{tag}", "a100")]
    try:
        for node in nodes:
            control_plane.kubectl("apply", "-f", "-", input=json.dumps(node))
        spec = api.GPUNodePoolSpec.model_validate(
            {
                "provider": {
                    "placeholder": {
                        "namespace": namespace,
                        "priorityClassName": f"pp-warm-{tag}",
                        "nodeSelector": {"gpu-pool": f"l4-{tag}"},
                        "tolerations": [TOLERATE_GPU],
                    }
                },
                "gpusPerNode": 4,
                "pricePerNodeHourUSD": 10,
            }
        )
        provider = registry.build_provider("l4", spec, ProviderContext(api_client=api_client))
        assert await provider.get_nodes() == 0  # nothing asked for yet
        assert await provider.get_ready_nodes() == 3  # the a100 node is not this pool's

        serving = _gpu_pod(namespace, "serving", pool_nodes[0])
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(serving))
        await provider.set_nodes(3)

        assert await provider.get_nodes() == 3
        dep = json.loads(
            control_plane.kubectl(
                "get", "deployment", "poolpilot-placeholder-l4", "-n", namespace, "-o", "json"
            ).stdout
        )
        assert dep["spec"]["replicas"] == 2  # one of the three nodes already holds a serving GPU pod
        pod = dep["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == f"pp-warm-{tag}"
        assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "4"
        assert pod["nodeSelector"] == {"gpu-pool": f"l4-{tag}"}
        assert pod["tolerations"] == [TOLERATE_GPU]
        pc = json.loads(control_plane.kubectl("get", "priorityclass", f"pp-warm-{tag}", "-o", "json").stdout)
        assert -10 <= pc["value"] < 0  # pre-empted first, yet not "expendable" to Cluster Autoscaler

        control_plane.kubectl("delete", "pod", "serving", "-n", namespace, "--grace-period=0", "--force")
        await provider.sync()  # the serving pod left: a placeholder must hold that node now
        jsonpath = "jsonpath={.spec.replicas}"
        replicas = control_plane.kubectl(
            "get", "deployment", "poolpilot-placeholder-l4", "-n", namespace, "-o", jsonpath
        ).stdout
        assert replicas == "3"

        control_plane.kubectl("cordon", pool_nodes[2])
        assert await provider.get_ready_nodes() == 2  # cordoned: not serving capacity
        rebuilt = registry.build_provider("l4", spec, ProviderContext(api_client=api_client))
        assert await rebuilt.get_nodes() == 3  # a restarted operator reads the asked-for count back
    finally:
        for node in nodes:
            control_plane.kubectl("delete", "node", node["metadata"]["name"], "--wait=false", check=False)
        control_plane.kubectl("delete", "priorityclass", f"pp-warm-{tag}", "--wait=false", check=False)


async def test_events_and_namespace_labels(
    control_plane: ControlPlane, namespace: str, api_client: Any
) -> None:
    control_plane.kubectl("label", "namespace", namespace, "gpu-tier=a100")
    cluster = KubernetesCluster(api_client)
    ref = ObjectRef(api.API_VERSION, api.INFERENCE_POOL_KIND, "chat", namespace, uid="u-1")

    labels = await cluster.get_namespace_labels(namespace)
    await cluster.emit_event(ref, type_="Warning", reason="NodePoolNotFound", message="spec.nodePool.name: x")

    assert labels is not None and labels["gpu-tier"] == "a100"
    assert await cluster.get_namespace_labels("no-such-namespace") is None
    events = json.loads(control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    mine = [e for e in events if e["reason"] == "NodePoolNotFound"]
    assert len(mine) == 1
    assert mine[0]["type"] == "Warning"
    assert mine[0]["involvedObject"]["kind"] == "InferencePool"
    assert mine[0]["message"] == "spec.nodePool.name: x"
