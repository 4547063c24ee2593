"""The control plane with kube-scheduler and kwok: GPU nodes that register and go Ready without a
kubelet, pods scheduled onto them by the real scheduler by their `nvidia.com/gpu` requests, Running at
loopback pod IPs; pods beyond the GPUs Pending until a node is added."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import kube
from tests.kube import TOLERATE_KWOK

from poolpilot.sandbox.controlplane import KWOK_NODE_ANNOTATION, ControlPlane

pytestmark = pytest.mark.cluster


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


def pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return kube.pods(cp, namespace, "app=triton")


def phases(cp: ControlPlane, namespace: str) -> dict[str, int]:
    return kube.phases(cp, namespace, "app=triton")


def test_gpu_pods_are_scheduled_onto_kwok_nodes_at_loopback_ips(cluster: ControlPlane) -> None:
    cp = cluster
    ns = "gpu-sched"
    cp.kubectl("create", "namespace", ns)
    kube.wait_for_default_service_account(cp, ns)
    kube.apply(cp, gpu_node("gpu-0"))
    kube.wait_for(
        lambda: (
            "True"
            in cp.kubectl(
                "get", "node", "gpu-0", "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'
            ).stdout
        ),
        "node gpu-0 Ready (kwok)",
    )
    deployment = kube.deployment(
        ns, "triton", 3, image="tritonserver", gpus=1,
        tolerations=[TOLERATE_KWOK], nodeSelector={"poolpilot.io/gpu-pool": "a100"},
    )  # fmt: skip
    kube.apply(cp, deployment)
    kube.wait_for(lambda: phases(cp, ns) == {"Running": 3}, "3 pods Running")
    cidr = ipaddress.ip_network(cp.pod_cidr, strict=False)
    ips = {p["status"]["podIP"] for p in pods(cp, ns)}
    assert len(ips) == 3 and all(ipaddress.ip_address(ip) in cidr and ip.startswith("127.") for ip in ips)
    assert {p["spec"]["nodeName"] for p in pods(cp, ns)} == {"gpu-0"}

    cp.kubectl("scale", "deployment", "triton", "-n", ns, "--replicas=12")
    kube.wait_for(
        lambda: phases(cp, ns) == {"Running": 8, "Pending": 4}, "8 Running + 4 Pending (no GPU left)"
    )
    pending = [p for p in pods(cp, ns) if p["status"]["phase"] == "Pending"]
    reasons = [c.get("message", "") for p in pending for c in p["status"].get("conditions", [])]
    assert any("nvidia.com/gpu" in m for m in reasons), reasons

    kube.apply(cp, gpu_node("gpu-1"))
    kube.wait_for(lambda: phases(cp, ns) == {"Running": 12}, "12 Running once a second node is there")
    assert {p["spec"]["nodeName"] for p in pods(cp, ns)} == {"gpu-0", "gpu-1"}
    # Each pod its own address: an executor binds its pod IP, so a shared one leaves a pod unable to serve
    # (kwok's first IP handed out twice: `KWOK_CONFIGURATION`).
    ips_12 = [p["status"]["podIP"] for p in pods(cp, ns)]
    assert len(set(ips_12)) == 12, sorted(ips_12)


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
        kube.wait_for_default_service_account(cluster, "kwok-drain")
        for node in (newest, other):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"on-{node}", "namespace": "kwok-drain"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "tritonserver"}]},
            }
            kube.apply(cluster, pod)
        await provider.set_nodes(1)
        assert await provider.get_nodes() == 1
        assert await provider.get_ready_nodes() == 1  # the one being removed no longer counts
        spec_of = json.loads(cluster.kubectl("get", "node", newest, "-o", "json").stdout)["spec"]
        assert spec_of.get("unschedulable") is True  # the newest goes first, cordoned while busy

        cluster.kubectl("delete", "pod", f"on-{newest}", "-n", "kwok-drain", "--grace-period=0", "--force")
        await provider.sync()  # empty now: deleted
        gone = lambda: cluster.kubectl("get", "node", newest, check=False).returncode != 0  # noqa: E731
        kube.wait_for(gone, "the drained node gone")
        assert cluster.kubectl("get", "node", other, check=False).returncode == 0


def test_triton_pods_run_as_executors_at_their_pod_ips_and_report_readiness(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    import tritonclient.http as triton_http

    from poolpilot.sandbox.executor import write_emulated_model
    from poolpilot.sandbox.podrunner import REPOSITORY_ANNOTATION, PodRunner

    cp = cluster
    ns = "runner"
    cp.kubectl("create", "namespace", ns)
    kube.wait_for_default_service_account(cp, ns)
    kube.apply(cp, gpu_node("gpu-runner"))
    repo = tmp_path / "models"
    write_emulated_model(repo, "emu", latency_ms=(2.0, 0.5), max_batch_size=8, max_queue_delay_us=1000)
    deployment = kube.deployment(
        ns, "triton", 2, labels={"app": "triton", "poolpilot.io/pool": "chat"},
        annotations={REPOSITORY_ANNOTATION: str(repo)}, image=kube.TRITON_IMAGE,
        container=kube.triton_container("emu"), gpus=1,
        tolerations=[TOLERATE_KWOK], nodeSelector={"kubernetes.io/hostname": "gpu-runner"},
    )  # fmt: skip
    with cp.api_client() as client:
        runner = PodRunner(
            client, tmp_path / "pod-logs", executable=str(Path(sys.executable).parent / "poolpilot-executor"),
            start_delay_s=2.0,
        ).start()  # fmt: skip
        try:
            kube.apply(cp, deployment)

            def ready_states() -> list[str]:
                return [
                    next(
                        (c["status"] for c in p["status"].get("conditions", []) if c["type"] == "Ready"), "?"
                    )
                    for p in pods(cp, ns)
                ]

            kube.wait_for(
                lambda: len(ready_states()) == 2 and "True" not in ready_states(), "2 pods, not Ready yet"
            )
            kube.wait_for(
                lambda: ready_states() == ["True", "True"], "both pods Ready once their executors are", 90
            )
            for pod in pods(cp, ns):
                c = triton_http.InferenceServerClient(f"{pod['status']['podIP']}:8000")
                assert c.is_model_ready("emu")
                c.close()
            assert len(runner.pids()) == 2
            _prometheus_discovers_the_pods(cp, ns, tmp_path)

            victim = pods(cp, ns)[0]["metadata"]["name"]
            old_pid = runner.pids()[f"{ns}/{victim}"]
            cp.kubectl("delete", "pod", victim, "-n", ns, "--wait=false")
            kube.wait_for(lambda: f"{ns}/{victim}" not in runner.pids(), "the deleted pod's process stopped")
            kube.wait_for(lambda: not _alive(old_pid), "the old executor process gone")
            kube.wait_for(lambda: ready_states() == ["True", "True"], "a replacement pod Ready", 90)
        finally:
            runner.stop()
    assert runner.pids() == {}


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _prometheus_discovers_the_pods(cp: ControlPlane, ns: str, tmp_path: Path) -> None:
    """The real Prometheus, with the one pod scrape config (pod discovery from this apiserver, served over
    HTTP SD: Debian's build lacks Kubernetes SD), finds both pods and labels them `pool` and `namespace`."""
    from poolpilot import monitoring
    from poolpilot.sandbox.poddiscovery import PodDiscovery
    from poolpilot.sandbox.prometheus import PrometheusServer

    (tmp_path / "prom").mkdir()
    with cp.api_client() as client:
        discovery = PodDiscovery(client).start()
        try:
            job = monitoring.pod_scrape_config(http_sd_url=discovery.url, interval_s=1)
            with PrometheusServer({}, scrape_configs=[job], workdir=tmp_path / "prom") as prom:

                def targets() -> list[dict[str, Any]] | None:
                    active = prom.api("targets", state="active")["activeTargets"]
                    mine = [t for t in active if t["labels"].get("namespace") == ns and t["health"] == "up"]
                    return mine if len(mine) == 2 else None

                found = kube.wait_for(targets, "Prometheus to discover and scrape both pods", 60)
                _load_through_the_service(cp, ns, prom, tmp_path)
        finally:
            discovery.stop()
    assert {t["labels"]["pool"] for t in found} == {"chat"}
    ips = {p["status"]["podIP"] for p in pods(cp, ns)}
    assert {t["scrapeUrl"].split("//")[1].split(":")[0] for t in found} == ips


def _load_through_the_service(cp: ControlPlane, ns: str, prom: Any, tmp_path: Path) -> None:
    """`poolpilot loadgen --service` spreads requests over the Service's ready endpoints, and every success
    it counts is one Prometheus counts (scraped from the pods, summed over the pool)."""
    import subprocess

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "triton", "namespace": ns},
        "spec": {
            "selector": {"app": "triton"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
        },
    }
    kube.apply(cp, service)
    query = f'sum(nv_inference_request_success{{namespace="{ns}",pool="chat"}})'
    before = prom.query_value(query)
    out = tmp_path / "loadgen.json"
    csv = tmp_path / "loadgen.csv"
    cmd = [
        sys.executable, "-m", "poolpilot.cli", "loadgen", "--service", f"{ns}/triton",
        "--kubeconfig", str(cp.kubeconfig), "--model", "emu", "--synthetic", "constant", "--rate", "40",
        "--duration", "5", "--json", str(out), "--csv", str(csv),
    ]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["succeeded"] == report["sent"] > 150
    used = {line.split(",")[1] for line in csv.read_text().splitlines()[1:]}
    assert used == {f"{p['status']['podIP']}:8000" for p in pods(cp, ns)}  # both endpoints, round-robin
    kube.wait_for(
        lambda: prom.query_value(query) - before == report["succeeded"],
        "Prometheus to count exactly the load generator's successes",
        30,
    )
