"""Kubernetes-facing backends against the real control plane: /scale, placeholder nodes, Events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from poolpilot.api import types as api
from poolpilot.backends.kube import KubernetesCluster, ObjectRef
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import ProviderContext
from poolpilot.backends.workloads import KubernetesWorkloads
from poolpilot.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


@pytest.fixture
def api_client(control_plane: ControlPlane) -> Iterator[Any]:
    with control_plane.api_client() as client:
        yield client


def _deployment(namespace: str, name: str, replicas: int) -> str:
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        }
    )


def _replicas(cp: ControlPlane, namespace: str, name: str) -> int:
    out = cp.kubectl("get", "deployment", name, "-n", namespace, "-o", "jsonpath={.spec.replicas}")
    return int(out.stdout)


async def test_workload_replicas_through_scale_subresource(
    control_plane: ControlPlane, namespace: str, api_client: Any
) -> None:
    control_plane.kubectl("apply", "-f", "-", input=_deployment(namespace, "triton", 2))
    workloads = KubernetesWorkloads(api_client)
    ref = ObjectRef("apps/v1", "Deployment", "triton", namespace)

    before = await workloads.get_scale(ref)
    await workloads.set_replicas(ref, 5)

    assert before is not None and before.spec_replicas == 2
    assert _replicas(control_plane, namespace, "triton") == 5
    after = await workloads.get_scale(ref)
    assert after is not None and after.spec_replicas == 5
    assert await workloads.get_scale(ObjectRef("apps/v1", "Deployment", "absent", namespace)) is None


async def test_placeholder_provider_creates_and_scales_its_deployment(
    control_plane: ControlPlane, namespace: str, api_client: Any
) -> None:
    spec = api.GPUNodePoolSpec.model_validate(
        {
            "provider": {"placeholder": {"namespace": namespace}},
            "gpusPerNode": 4,
            "pricePerNodeHourUSD": 10,
        }
    )
    provider = registry.build_provider("l4", spec, ProviderContext(api_client=api_client))

    assert await provider.get_nodes() == 0  # no placeholder Deployment yet
    await provider.set_nodes(2)

    assert await provider.get_nodes() == 2
    dep = json.loads(
        control_plane.kubectl(
            "get", "deployment", "poolpilot-placeholder-l4", "-n", namespace, "-o", "json"
        ).stdout
    )
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert pod["priorityClassName"] == "poolpilot-placeholder"
    assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "4"


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
