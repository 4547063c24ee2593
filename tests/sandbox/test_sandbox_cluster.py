"""What the sandbox must show a user (issue 9), on `poolpilot sandbox` with the operator running:

- the example GPUNodePool, Deployment (3 replicas) and Service applied → 3 pods Running and Ready, each
  answering Triton's protocol at its pod IP, and Prometheus scraping 3 pod targets labelled `pool` and
  `namespace`; scaled to 12 → 8 Ready and 4 Pending (no GPU left on the one node) until the GPUNodePool
  allows a second node, then 12 Ready;
- a node pre-empted (`poolpilot sandbox preempt NODE`) → its pods are replaced and Ready again elsewhere;
- `poolpilot loadgen --service` at 100 req/s for 60 s → Prometheus's
  `sum(rate(nv_inference_request_success[1m]))` over the window the load ran is within 5 % of the load
  generator's own success rate.

The tests share one sandbox and run in file order; each first brings the cluster to the state it starts
from, so one can also run alone. The InferencePool is not applied: nothing here is the operator's policy,
only the cluster it will act on (the operator keeps the GPUNodePool at `nodes.min`, through kwok).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton_http
from tests import kube

from poolpilot.backends.nodepools.kwok import POOL_LABEL
from poolpilot.sandbox.cli import Sandbox

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.sandbox(pod_start_s=2.0, scrape_interval_s=2.0),
]
NS = "chat"
PODS = "app=chat-triton"
NODE_POOL = "sandbox-gpus"
MODEL = "llm_emulated"
WAIT_S = 300  # generous: a shared 2-core machine starts a dozen executors slowly, never wrongly


def setup_examples(box: Sandbox, *, replicas: int = 3, min_nodes: int = 1) -> None:
    """The example manifests as a user applies them, with a short node lead time for the test."""
    node_pool = kube.sandbox_example("10-gpunodepool.yaml")
    node_pool["spec"]["provisioningSeconds"] = 5
    node_pool["spec"]["nodes"]["min"] = min_nodes
    deployment = kube.sandbox_example("20-deployment.yaml")
    deployment["spec"]["replicas"] = replicas
    examples = ("00-namespace.yaml", "30-service.yaml")
    kube.apply(box.cluster, *(kube.sandbox_example(n) for n in examples), node_pool, deployment)


def watch(box: Sandbox) -> Any:
    return getattr(box, "operator_process", None)


def ready(box: Sandbox) -> list[dict[str, Any]]:
    return kube.ready_pods(box.cluster, NS, PODS)


def wait_ready(box: Sandbox, count: int) -> list[dict[str, Any]]:
    """Wait until exactly `count` pods are Ready and return them."""
    return kube.wait_for(
        lambda: r if len(r := ready(box)) == count else None,
        f"{count} Ready pods",
        WAIT_S,
        interval_s=1,
        watch=watch(box),
    )


def pool_nodes(box: Sandbox) -> list[str]:
    nodes = kube.get(box.cluster, "nodes", "-l", f"{POOL_LABEL}={NODE_POOL}")["items"]
    return sorted(n["metadata"]["name"] for n in nodes if not n["metadata"].get("deletionTimestamp"))


def answers_triton(pod: dict[str, Any]) -> bool:
    """Triton's protocol at the pod's IP: server and model ready, and one inference answered."""
    client = triton_http.InferenceServerClient(f"{pod['status']['podIP']}:8000")
    try:
        if not (client.is_server_ready() and client.is_model_ready(MODEL)):
            return False
        data = triton_http.InferInput("INPUT0", [1, 16], "FP32")
        data.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
        tokens = triton_http.InferInput("TOKENS", [1, 1], "INT32")
        tokens.set_data_from_numpy(np.array([[256]], dtype=np.int32))
        result = client.infer(MODEL, [data, tokens])
        output = result.as_numpy("OUTPUT0")
        return output is not None and output.shape == (1, 16)
    finally:
        client.close()


def pod_targets(box: Sandbox) -> list[dict[str, Any]]:
    """Prometheus's active pod targets in the namespace that are up (targets API)."""
    active = box.prometheus.api("targets", state="active")["activeTargets"]
    return [t for t in active if t["labels"].get("namespace") == NS and t["health"] == "up"]


@pytest.mark.timeout(900)
def test_the_example_runs_three_triton_pods_then_twelve_on_a_second_node(sandbox: Sandbox) -> None:
    box = sandbox
    setup_examples(box, replicas=3, min_nodes=1)
    three = wait_ready(box, 3)
    assert all(p["status"]["phase"] == "Running" for p in three)
    assert all(p["status"]["podIP"].startswith("127.") for p in three)
    assert all(answers_triton(p) for p in three)

    def three_targets() -> list[dict[str, Any]] | None:
        found = pod_targets(box)
        ips = {p["status"]["podIP"] for p in ready(box)}
        hosts = {t["scrapeUrl"].split("//")[1].split(":")[0] for t in found}
        return found if len(found) == 3 and hosts == ips else None

    targets = kube.wait_for(three_targets, "Prometheus scraping the 3 pods", 120, interval_s=1)
    assert {t["labels"]["pool"] for t in targets} == {"chat"}
    assert {t["labels"]["namespace"] for t in targets} == {NS}
    assert all(t["scrapeUrl"].endswith(":8002/metrics") for t in targets)

    # 12 replicas on one 8-GPU node: 8 Ready, 4 Pending for want of nvidia.com/gpu.
    assert len(pool_nodes(box)) == 1
    box.cluster.kubectl("scale", "deployment", "chat-triton", "-n", NS, "--replicas=12")

    def eight_and_four() -> bool:
        return len(ready(box)) == 8 and kube.phases(box.cluster, NS, PODS).get("Pending") == 4

    kube.wait_for(eight_and_four, "8 Ready + 4 Pending (no GPU left)", WAIT_S, interval_s=1, watch=watch(box))
    pending = [p for p in kube.pods(box.cluster, NS, PODS) if p["status"]["phase"] == "Pending"]
    scheduled = [kube.condition(p, "PodScheduled") or {} for p in pending]
    assert all("nvidia.com/gpu" in c.get("message", "") for c in scheduled), scheduled
    assert len(pool_nodes(box)) == 1  # nodes.min is 1 and no InferencePool asks for more

    # The GPUNodePool allows (here: requires) a second node: the operator orders it through kwok.
    patch = json.dumps({"spec": {"nodes": {"min": 2}}})
    box.cluster.kubectl("patch", "gpunodepool", NODE_POOL, "--type=merge", "-p", patch)
    twelve = wait_ready(box, 12)
    assert {p["spec"]["nodeName"] for p in twelve} == set(pool_nodes(box))
    assert len(pool_nodes(box)) == 2
    assert kube.phases(box.cluster, NS, PODS) == {"Running": 12}


@pytest.mark.timeout(900)
def test_a_preempted_nodes_pods_are_replaced_and_ready_elsewhere(sandbox: Sandbox) -> None:
    box = sandbox
    setup_examples(box, replicas=12, min_nodes=2)
    pods = kube.wait_for(
        lambda: r if len(r := ready(box)) == 12 and len(pool_nodes(box)) == 2 else None,
        "12 Ready pods on 2 nodes",
        WAIT_S,
        interval_s=1,
        watch=watch(box),
    )
    victim = min(pool_nodes(box), key=lambda n: sum(p["spec"]["nodeName"] == n for p in pods))
    lost = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == victim}
    assert lost, f"no pod on {victim}"

    cmd = [sys.executable, "-m", "poolpilot.cli", "sandbox", "preempt", victim, "--dir", str(box.work_dir)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr

    def replaced() -> list[dict[str, Any]] | None:
        now = ready(box)
        names = {p["metadata"]["name"] for p in kube.pods(box.cluster, NS, PODS)}
        on_victim = [p for p in now if p["spec"]["nodeName"] == victim]
        return now if len(now) == 12 and not (names & lost) and not on_victim else None

    after = kube.wait_for(
        replaced, f"the pods of {victim} replaced and Ready", WAIT_S, interval_s=1, watch=watch(box)
    )
    assert victim not in pool_nodes(box)
    assert len(pool_nodes(box)) == 2  # the operator ordered a replacement to stay at nodes.min
    fresh = [p for p in after if p["metadata"]["name"] not in {q["metadata"]["name"] for q in pods}]
    assert len(fresh) == len(lost)
    assert all(answers_triton(p) for p in fresh)


@pytest.mark.timeout(900)
def test_prometheus_counts_what_the_load_generator_sent_through_the_service(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    box = sandbox
    kube.apply(box.cluster, kube.sandbox_example("00-namespace.yaml"))
    if not kube.get_json(box.cluster, "deployment", "chat-triton", "-n", NS):
        setup_examples(box, replicas=3, min_nodes=1)
    kube.wait_for(
        lambda: len(ready(box)) >= 3, "at least 3 Ready pods", WAIT_S, interval_s=1, watch=watch(box)
    )
    kube.wait_for(lambda: len(pod_targets(box)) >= 3, "Prometheus scraping the pods", 120, interval_s=1)

    out, rows = tmp_path / "loadgen.json", tmp_path / "loadgen.csv"
    cmd = [
        sys.executable, "-m", "poolpilot.cli", "loadgen", "--service", f"{NS}/chat-triton",
        "--kubeconfig", str(box.cluster.kubeconfig), "--model", MODEL, "--synthetic", "constant",
        "--rate", "100", "--duration", "60", "--json", str(out), "--csv", str(rows),
    ]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    exited = time.time()
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["sent"] == report["scheduled"] > 5000, report
    generator_rps = report["succeeded"] / report["span_s"]

    # The run's wall-clock start, from its last request's completion (times in the CSV are from the start).
    records = list(csv.DictReader(rows.open()))
    done_s = max(float(r["send_s"]) + float(r["latency_ms"] or 0) / 1000 for r in records)
    sends = [float(r["send_s"]) for r in records]
    load_end = exited - done_s + max(sends)  # the instant whose [1m] window is the load's 60 s
    kube.wait_for(lambda: time.time() > load_end + 3 * box.scrape_interval_s, "scrapes past the load", 60)
    prometheus_rps = box.prometheus.query_value("sum(rate(nv_inference_request_success[1m]))", at=load_end)
    print(f"load generator {generator_rps:.2f} req/s, Prometheus {prometheus_rps:.2f} req/s; {report}")
    assert report["succeeded"] > 0.95 * report["sent"], report
    assert abs(prometheus_rps - generator_rps) <= 0.05 * generator_rps, (prometheus_rps, generator_rps)
