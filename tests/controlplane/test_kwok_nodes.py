"""The control plane with kube-scheduler and kwok: GPU nodes that register and go Ready without a
kubelet, pods scheduled onto them by the real scheduler by their `nvidia.com/gpu` requests, Running at
loopback pod IPs; pods beyond the GPUs Pending until a node is added."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from poolpilot.testing.controlplane import KWOK_NODE_ANNOTATION, KWOK_POD_CIDR, ControlPlane

pytestmark = pytest.mark.cluster
T = TypeVar("T")
TOLERATE_KWOK = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    with ControlPlane(kwok=True) as cp:
        yield cp


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", "poolpilot.io/gpu-pool": "a100"},
        },
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def wait_for(fn: Callable[[], T | None], what: str, timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    out = cp.kubectl("get", "pods", "-n", namespace, "-l", "app=triton", "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def phases(cp: ControlPlane, namespace: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pods(cp, namespace):
        counts[p["status"].get("phase", "?")] = counts.get(p["status"].get("phase", "?"), 0) + 1
    return counts


def test_gpu_pods_are_scheduled_onto_kwok_nodes_at_loopback_ips(cluster: ControlPlane) -> None:
    cp = cluster
    ns = "gpu-sched"
    cp.kubectl("create", "namespace", ns)
    wait_for(lambda: cp.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0, "default SA")
    cp.kubectl("apply", "-f", "-", input=json.dumps(gpu_node("gpu-0")))
    wait_for(
        lambda: (
            "True"
            in cp.kubectl(
                "get", "node", "gpu-0", "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'
            ).stdout
        ),
        "node gpu-0 Ready (kwok)",
    )
    gpu = {"nvidia.com/gpu": "1"}
    resources = {"requests": gpu, "limits": gpu}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "triton", "namespace": ns},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "triton"}},
            "template": {
                "metadata": {"labels": {"app": "triton"}},
                "spec": {
                    "tolerations": [
                        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "nodeSelector": {"poolpilot.io/gpu-pool": "a100"},
                    "containers": [
                        {
                            "name": "triton",
                            "image": "tritonserver",
                            "resources": resources,
                        }
                    ],
                },
            },
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(deployment))
    wait_for(lambda: phases(cp, ns) == {"Running": 3}, "3 pods Running")
    cidr = ipaddress.ip_network(KWOK_POD_CIDR, strict=False)
    ips = {p["status"]["podIP"] for p in pods(cp, ns)}
    assert len(ips) == 3 and all(ipaddress.ip_address(ip) in cidr and ip.startswith("127.") for ip in ips)
    assert {p["spec"]["nodeName"] for p in pods(cp, ns)} == {"gpu-0"}

    cp.kubectl("scale", "deployment", "triton", "-n", ns, "--replicas=12")
    wait_for(lambda: phases(cp, ns) == {"Running": 8, "Pending": 4}, "8 Running + 4 Pending (no GPU left)")
    pending = [p for p in pods(cp, ns) if p["status"]["phase"] == "Pending"]
    reasons = [c.get("message", "") for p in pending for c in p["status"].get("conditions", [])]
    assert any("nvidia.com/gpu" in m for m in reasons), reasons

    cp.kubectl("apply", "-f", "-", input=json.dumps(gpu_node("gpu-1")))
    wait_for(lambda: phases(cp, ns) == {"Running": 12}, "12 Running once a second node is there")
    assert {p["spec"]["nodeName"] for p in pods(cp, ns)} == {"gpu-0", "gpu-1"}


async def test_kwok_provider_provisions_after_the_lead_time_and_drains_before_deleting(
    cluster: ControlPlane,
) -> None:
    from poolpilot.api import types as api
    from poolpilot.backends.nodepools import registry
    from poolpilot.backends.nodepools.base import ProviderContext

    spec = api.GPUNodePoolSpec.model_validate(
        {
            "provider": {"kwok": {"nodeLabels": {"gpu": "l4"}, "drainGraceSeconds": 600}},
            "gpusPerNode": 4,
            "provisioningSeconds": 3,
            "pricePerNodeHourUSD": 10,
        }
    )
    with cluster.api_client() as client:
        provider = registry.build_provider("l4", spec, ProviderContext(api_client=client))
        await provider.set_nodes(2)
        assert await provider.get_nodes() == 2
        assert await provider.get_ready_nodes() == 0  # asked for, not there yet: the node lead time
        labelled = cluster.kubectl("get", "nodes", "-l", "gpu=l4,poolpilot.io/gpunodepool=l4", "-o", "name")
        assert len(labelled.stdout.split()) == 2

        async def ready(n: int) -> bool:
            await provider.sync()
            return await provider.get_ready_nodes() == n

        deadline = time.monotonic() + 30
        while not await ready(2):
            assert time.monotonic() < deadline, "the nodes never became Ready after provisioningSeconds"
            await asyncio.sleep(0.5)

        # A busy node is cordoned, not deleted, while its pod runs (within drainGraceSeconds).
        busy = json.loads(cluster.kubectl("get", "nodes", "-l", "gpu=l4", "-o", "json").stdout)["items"]
        newest = max(busy, key=lambda n: n["metadata"]["creationTimestamp"])["metadata"]["name"]
        other = next(n["metadata"]["name"] for n in busy if n["metadata"]["name"] != newest)
        cluster.kubectl("create", "namespace", "kwok-drain")
        wait_for(
            lambda: cluster.kubectl("get", "sa", "default", "-n", "kwok-drain", check=False).returncode == 0,
            "default SA",
        )
        for node in (newest, other):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"on-{node}", "namespace": "kwok-drain"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "tritonserver"}]},
            }
            cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
        await provider.set_nodes(1)
        assert await provider.get_nodes() == 1
        assert await provider.get_ready_nodes() == 1  # the one being removed no longer counts
        spec_of = json.loads(cluster.kubectl("get", "node", newest, "-o", "json").stdout)["spec"]
        assert spec_of.get("unschedulable") is True  # the newest goes first, cordoned while busy

        cluster.kubectl("delete", "pod", f"on-{newest}", "-n", "kwok-drain", "--grace-period=0", "--force")
        await provider.sync()  # empty now: deleted
        gone = lambda: cluster.kubectl("get", "node", newest, check=False).returncode != 0  # noqa: E731
        wait_for(gone, "the drained node gone")
        assert cluster.kubectl("get", "node", other, check=False).returncode == 0
