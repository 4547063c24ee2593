"""What the operator must not do, on a real local cluster (`poolpilot.sandbox`): kube-scheduler and kwok GPU
nodes, Triton pods running as executors at their pod IPs, the real Prometheus discovering them, the operator
under the chart's RBAC.

- A `Recommend` pool under load: the recommendation is in the status and in Events; the workload, the pods'
  model configs (read back with tritonclient) and the nodes are untouched.
- A reload that fails on one pod (its model repository is gone, Triton's own failure): the pods changed so
  far are rolled back, a condition and a Warning Event say so, and the setting is not tried again at once.
- The operator SIGKILLed mid-rollout (each reload takes seconds, as a real model's does): after a restart
  the rollout is finished or rolled back from its progress in the status; every pod runs one config.
- Metrics that do not describe the pool (the pods' pool label is wrong, so Prometheus has no series for
  it): the operator holds — no scale-in, no rollout — and says why; with the label fixed it acts again.
- Prometheus down: the same hold, with the reason; once it is back the pool scales in.

Each test has its own namespace and model repository; the sandbox is shared by the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as triton_http
from tests import kube

from poolpilot import loadgen
from poolpilot.backends.batching import batching_of
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.policy.types import BatchingConfig
from poolpilot.sandbox.cli import Sandbox
from poolpilot.sandbox.podrunner import REPOSITORY_ANNOTATION

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.sandbox(pod_start_s=2.0, scrape_interval_s=2.0),
]
REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "executor_image" / "emulated_repository"
MODEL = "llm_emulated"
TICK_S = 5
# The example model runs a 5000 µs queue delay: with these bounds a batching change is due at once.
OUT_OF_BOUNDS = {"maxQueueDelayMicroseconds": {"min": 0, "max": 2000}}
# Waits poll every second and pass logs=[box.operator_process]: on a timeout the operator's log tail is in
# the message (it may be restarting).
POLL_S = 1.0


@pytest.fixture(scope="module", autouse=True)
def _node_pool(sandbox: Sandbox) -> None:
    """The example GPUNodePool with a short lead time, shared by this module's pools."""
    node_pool = example("10-gpunodepool.yaml")
    node_pool["spec"]["provisioningSeconds"] = 10
    node_pool["spec"]["nodes"] = {"min": 1, "max": 4}
    kube.apply(sandbox.cluster, node_pool)


# ------------------------------------------------------------------------------------------- helpers

example = kube.sandbox_example


def ready_pods(box: Sandbox, ns: str) -> list[dict[str, Any]]:
    pods = kube.ready_pods(box.cluster, ns, "app=chat-triton")
    return sorted(pods, key=lambda p: str(p["metadata"]["name"]))


def model_config(pod: dict[str, Any]) -> dict[str, Any]:
    """The model config the pod's Triton runs, read back with tritonclient."""
    client = triton_http.InferenceServerClient(f"{pod['status']['podIP']}:8000", network_timeout=30.0)
    try:
        config: dict[str, Any] = client.get_model_config(MODEL)
        return config
    finally:
        client.close()


def batching(pod: dict[str, Any]) -> BatchingConfig:
    running = batching_of(model_config(pod))
    assert running is not None, pod["metadata"]["name"]
    return running


def key(b: BatchingConfig) -> tuple[int, int, int]:
    return (b.max_queue_delay_us, b.instance_count, b.max_batch_size)


def status_key(s: dict[str, Any]) -> tuple[int, int, int]:
    return (s.get("maxQueueDelayMicroseconds") or 0, s.get("instanceCount") or 1, s.get("maxBatchSize") or 0)


def pool_status(box: Sandbox, ns: str) -> dict[str, Any]:
    status: dict[str, Any] = kube.get(box.cluster, "inferencepool", "chat", "-n", ns).get("status") or {}
    return status


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in status.get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def pool_events(box: Sandbox, ns: str, reason: str | None = None) -> list[dict[str, Any]]:
    items = kube.get(box.cluster, "events", "-n", ns, "--field-selector", "involvedObject.name=chat")["items"]
    return [e for e in items if reason is None or e["reason"] == reason]


def model_repository(where: Path, *, load_s: float = 0.0) -> Path:
    """A copy of the emulated model repository (a pod's /models), optionally with a model that takes
    `load_s` seconds per instance to load."""
    repository = where / "models"
    shutil.copytree(MODELS, repository)
    if load_s:
        pbtxt = repository / MODEL / "config.pbtxt"
        param = f'key: "emulated_instance_load_s" value: {{ string_value: "{load_s}" }}'
        pbtxt.write_text(pbtxt.read_text() + f"parameters {{ {param} }}\n")
    return repository


def deploy(box: Sandbox, ns: str, *, replicas: int, repository: Path, pool_label: str = "chat") -> None:
    namespace = example("00-namespace.yaml")
    namespace["metadata"]["name"] = ns
    service = example("30-service.yaml")
    service["metadata"]["namespace"] = ns
    deployment = example("20-deployment.yaml")
    deployment["metadata"]["namespace"] = ns
    deployment["spec"]["replicas"] = replicas
    template = deployment["spec"]["template"]["metadata"]
    template["annotations"][REPOSITORY_ANNOTATION] = str(repository)
    template["labels"]["poolpilot.io/pool"] = pool_label
    for obj in (namespace, service, deployment):
        kube.apply(box.cluster, obj)
    kube.wait_for(
        lambda: len(ready_pods(box, ns)) == replicas,
        f"{replicas} Ready pods in {ns}",
        180,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )


def inference_pool(ns: str, *, node_pool: bool = True, **spec: Any) -> dict[str, Any]:
    """The example pool in `ns`. Without its node pool, no GPUs are "already paid for": an idle pool
    scales in (with one, it keeps the node's paid GPUs busy)."""
    pool = example("40-inferencepool.yaml")
    pool["metadata"]["namespace"] = ns
    pool["spec"]["tickSeconds"] = TICK_S
    pool["spec"].update(spec)
    if not node_pool:
        del pool["spec"]["nodePool"]
    return pool


def cleanup(box: Sandbox, ns: str) -> None:
    box.cluster.kubectl("delete", "namespace", ns, "--wait=false")
    kube.wait_for(
        lambda: not kube.get(box.cluster, "pods", "-n", ns)["items"] or None,
        f"the pods of {ns} gone",
        120,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )


def gpu_nodes(box: Sandbox) -> set[str]:
    items = kube.get(box.cluster, "nodes", "-l", "poolpilot.io/gpu-pool=sandbox-gpus")["items"]
    return {n["metadata"]["name"] for n in items}


def print_story(box: Sandbox, ns: str) -> None:
    """On failure: what happened, in order."""
    for e in kube.get(box.cluster, "events", "-n", ns)["items"]:
        print("event", e.get("lastTimestamp"), e["involvedObject"]["name"], e["reason"], e["message"][:300])
    print("status:", json.dumps(pool_status(box, ns))[:3000])


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(900)
def test_a_recommend_pool_under_load_reports_and_changes_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    box, ns = sandbox, "recommend"
    deploy(box, ns, replicas=2, repository=model_repository(tmp_path))
    before_dep = kube.get(box.cluster, "deployment", "chat-triton", "-n", ns)
    before_pods = {p["metadata"]["name"]: model_config(p) for p in ready_pods(box, ns)}
    before_nodes = gpu_nodes(box)
    kube.apply(
        box.cluster,
        inference_pool(
            ns,
            mode="Recommend",
            slo={"latencyTargetMs": 120, "marginRatio": 0.25},
            replicas={"min": 1, "max": 16, "scaleDownStabilizationSeconds": 30},
            batching=OUT_OF_BOUNDS,  # in Auto, a batching change would be rolled out at once
        ),
    )

    # The load the Auto pool of test_sandbox_e2e scales out for: 40/s, then 3x, through the Service.
    schedule = loadgen_schedule.synthetic("step", base_rps=40.0, duration_s=150.0, seed=11)
    config = loadgen.LoadgenConfig(
        urls=(), service=f"{ns}/chat-triton", kubeconfig=str(box.cluster.kubeconfig), model=MODEL
    )
    desired: list[int] = []
    actions: list[str] = []

    async def drive() -> loadgen.LoadgenReport:
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                status = await asyncio.to_thread(pool_status, box, ns)
                if "desiredReplicas" in status:
                    desired.append(status["desiredReplicas"])
                    actions.append(status["lastDecision"]["action"])
                await asyncio.sleep(2.0)

        watcher = asyncio.create_task(watch())
        try:
            return await loadgen.run(config, schedule)
        finally:
            stop.set()
            await watcher

    report = asyncio.run(drive())
    print_story(box, ns)
    print("desired replicas seen:", desired)
    print("actions seen:", actions)
    assert report.sent == len(schedule)

    # The recommendation: the whole decision in the status, and an Event.
    status = pool_status(box, ns)
    # Changes were recommended (in Auto they would have been made): replicas and batching.
    assert any(a.startswith("Recommend") for a in actions), actions
    assert any(d != 2 for d in desired), desired
    assert status["recommendedBatching"]["maxQueueDelayMicroseconds"] <= 2000
    for field in ("desiredReplicas", "recommendedBatching", "lastDecision", "signals", "nodeDemand"):
        assert field in status, field
    assert status["lastDecision"]["reasons"]
    assert condition(status, "Active")["reason"] == "ModeRecommend"
    assert pool_events(box, ns, "Recommendation")
    assert not [e for e in pool_events(box, ns) if e["reason"] in ("ScaledOut", "BatchingRolloutStarted")]

    # Nothing touched: the workload (not even a no-op write: same generation), each pod's model config
    # (read back from every pod with tritonclient), the pods themselves, and the nodes.
    after_dep = kube.get(box.cluster, "deployment", "chat-triton", "-n", ns)
    assert after_dep["metadata"]["generation"] == before_dep["metadata"]["generation"]
    assert after_dep["spec"]["replicas"] == 2
    after_pods = {p["metadata"]["name"]: model_config(p) for p in ready_pods(box, ns)}
    assert after_pods == before_pods
    assert gpu_nodes(box) == before_nodes
    assert status["nodeDemand"]["hold"] is True
    cleanup(box, ns)


@pytest.mark.timeout(900)
def test_a_reload_failing_on_one_pod_is_rolled_back_on_every_pod(sandbox: Sandbox, tmp_path: Path) -> None:
    box, ns = sandbox, "failing"
    deploy(box, ns, replicas=3, repository=model_repository(tmp_path / "shared"))
    pods = ready_pods(box, ns)
    original = {key(batching(p)) for p in pods}
    assert len(original) == 1

    # The last pod the rollout reaches (pods are rolled in name order) gets a model repository of its own,
    # through the pod's annotation and a container restart; then its repository loses the model, as a
    # volume that went away would. Triton keeps serving the loaded model, but cannot load it again.
    victim = pods[-1]["metadata"]["name"]
    own = model_repository(tmp_path / "victim")
    box.cluster.kubectl("annotate", "pod", victim, "-n", ns, f"{REPOSITORY_ANNOTATION}={own}", "--overwrite")
    old_pid = box.runner.pids()[f"{ns}/{victim}"]
    os.kill(old_pid, signal.SIGKILL)

    def restarted_on_own_repository() -> bool:
        pid = box.runner.pids().get(f"{ns}/{victim}")
        if pid is None or pid == old_pid:
            return False
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        return str(own) in cmdline and victim in {p["metadata"]["name"] for p in ready_pods(box, ns)}

    kube.wait_for(
        restarted_on_own_repository,
        f"{victim} restarted on its own repository",
        120,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    shutil.rmtree(own / MODEL)
    pods = ready_pods(box, ns)
    assert len(pods) == 3 and {key(batching(p)) for p in pods} == original

    # A spec bound the running queue delay is outside of: a batching change is due at once. Replicas are
    # pinned: only batching is in play.
    kube.apply(box.cluster, inference_pool(ns, replicas={"min": 3, "max": 3}, batching=OUT_OF_BOUNDS))
    rolled_back = kube.wait_for(
        lambda: pool_events(box, ns, "BatchingRolledBack"),
        "a BatchingRolledBack Event",
        180,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    kube.wait_for(
        lambda: "rollout" not in pool_status(box, ns),
        "the rollback to finish",
        120,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    print_story(box, ns)

    # Said: a Warning Event naming the pod and Triton's error, and a condition.
    warning = rolled_back[0]
    assert warning["type"] == "Warning"
    assert victim in warning["message"] and "failed to poll from model repository" in warning["message"]
    assert "rolling 2 pods back" in warning["message"]
    status = pool_status(box, ns)
    applied = condition(status, "BatchingApplied")
    assert (applied["status"], applied["reason"]) == ("False", "BatchingRolledBack"), applied

    # Done: every pod runs the previous setting again (read back from each pod), and the two pods that
    # had taken the new one really were reloaded twice (their executors' logs).
    pods = ready_pods(box, ns)
    assert len(pods) == 3
    assert {key(batching(p)) for p in pods} == original
    for pod in pods[:2]:
        log = (box.work_dir / "pods" / f"{ns}_{pod['metadata']['name']}.log").read_text()
        assert log.count("reloaded") >= 2, log[-2000:]

    # Remembered as failed: the setting is in the policy's tabu list, and nothing is rolled out again
    # while the pool keeps ticking through the rate limit (the reset the bounds force included).
    started = pool_events(box, ns, "BatchingRolloutStarted")
    assert len(started) == 1
    failed = status_key(rolled_out_target(started[0]))
    assert [e[:2] for e in _tabu_entries(status["policyState"])] == [[failed[0], failed[1]]]
    time.sleep(6 * TICK_S)
    assert len(pool_events(box, ns, "BatchingRolloutStarted")) == 1
    status = pool_status(box, ns)
    assert any(r.startswith("batching reset deferred") for r in status["lastDecision"]["reasons"])
    assert {key(batching(p)) for p in ready_pods(box, ns)} == original
    cleanup(box, ns)


def rolled_out_target(event: dict[str, Any]) -> dict[str, Any]:
    """The setting a BatchingRolloutStarted Event announced, from its words (`describe`)."""
    words = event["message"].split(":")[0]  # "queue delay 2000 µs, 1 instance, max batch 32"
    numbers = [int(w) for w in words.replace(",", " ").split() if w.isdigit()]
    return {"maxQueueDelayMicroseconds": numbers[0], "instanceCount": numbers[1], "maxBatchSize": numbers[2]}


def _tabu_entries(doc: Any) -> list[Any]:
    """Every entry of a `tabu` list anywhere in the policy state's wire form."""
    if isinstance(doc, dict):
        found = list(doc.get("tabu") or [])
        for value in doc.values():
            found += _tabu_entries(value)
        return found
    if isinstance(doc, list):
        return [x for item in doc for x in _tabu_entries(item)]
    return []


@pytest.mark.timeout(900)
def test_an_operator_killed_mid_rollout_finishes_it_after_a_restart(sandbox: Sandbox, tmp_path: Path) -> None:
    box, ns = sandbox, "killed"
    # Every reload takes 3 s per instance (a real model's load is seconds to minutes): a rollout over
    # 4 pods, one at a time, takes long enough to be cut in the middle.
    deploy(box, ns, replicas=4, repository=model_repository(tmp_path, load_s=3.0))
    original = {key(batching(p)) for p in ready_pods(box, ns)}
    assert len(original) == 1
    kube.apply(box.cluster, inference_pool(ns, replicas={"min": 4, "max": 4}, batching=OUT_OF_BOUNDS))

    def mid_rollout() -> dict[str, Any] | None:
        rollout = pool_status(box, ns).get("rollout") or {}
        done, total = rollout.get("updatedReplicas", 0), rollout.get("totalReplicas", 0)
        return rollout if rollout.get("phase") == "Progressing" and 1 <= done < total else None

    rollout = kube.wait_for(
        mid_rollout, "a rollout half-way", 180, interval_s=POLL_S, logs=[box.operator_process]
    )
    box.operator_process.kill()
    killed_at = time.monotonic()
    configs = [key(batching(p)) for p in ready_pods(box, ns)]
    print("rollout at the kill:", rollout, "pods:", configs)
    assert len(set(configs)) == 2, f"the kill should leave the pods on two configs: {configs}"
    target = status_key(rollout["target"])
    assert target in configs and original <= set(configs)

    box.operator_process.restart()
    kube.wait_for(
        box.operator_process.healthy,
        "the restarted operator healthy",
        60,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )

    def converged() -> set[tuple[int, int, int]] | None:
        status = pool_status(box, ns)
        if "rollout" in status or "batching" not in status:
            return None
        running = {key(batching(p)) for p in ready_pods(box, ns)}
        return running if running == {status_key(status["batching"])} else None

    final = kube.wait_for(
        converged,
        "every pod on the pool's setting after the restart",
        300,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    print(f"converged {time.monotonic() - killed_at:.0f} s after the kill on {final}")
    print_story(box, ns)
    assert final in ({target}, original)  # finished, or rolled back: never a third config

    # One tick later still one config on every pod, and the rollout was started once (resumed, not
    # decided again).
    time.sleep(2 * TICK_S)
    pods = ready_pods(box, ns)
    assert len(pods) == 4 and {key(batching(p)) for p in pods} == final
    started = pool_events(box, ns, "BatchingRolloutStarted")
    assert len(started) == 1, [e["message"] for e in started]
    assert pool_events(box, ns, "BatchingRolledOut") or pool_events(box, ns, "BatchingRolledBack")
    cleanup(box, ns)


@pytest.mark.timeout(900)
def test_metrics_that_do_not_describe_the_pool_hold_it(sandbox: Sandbox, tmp_path: Path) -> None:
    box, ns = sandbox, "blind"
    # The pods carry the wrong pool label: Prometheus scrapes them, but no series says pool="chat".
    deploy(box, ns, replicas=3, repository=model_repository(tmp_path), pool_label="chat-old")
    original = {key(batching(p)) for p in ready_pods(box, ns)}
    stabilisation_s = 20
    kube.apply(
        box.cluster,
        inference_pool(
            ns,
            node_pool=False,  # idle, on its metrics the pool would scale in
            replicas={"min": 1, "max": 3, "scaleDownStabilizationSeconds": stabilisation_s},
            batching=OUT_OF_BOUNDS,  # a change would be due
        ),
    )

    def held() -> dict[str, Any] | None:
        status = pool_status(box, ns)
        metrics = condition(status, "MetricsAvailable")
        return status if metrics.get("status") == "False" else None

    status = kube.wait_for(
        held, "MetricsAvailable=False", 120, interval_s=POLL_S, logs=[box.operator_process]
    )
    metrics = condition(status, "MetricsAvailable")
    assert metrics["reason"] == "MetricsMissing" and "pool='chat'" in metrics["message"], metrics
    assert status["lastDecision"]["action"] == "Hold"

    # Held for three stabilisation windows: no scale-in, no rollout, the pods' configs untouched.
    replicas_seen = set()
    deadline = time.monotonic() + 3 * stabilisation_s
    while time.monotonic() < deadline:
        replicas_seen.add(kube.get(box.cluster, "deployment", "chat-triton", "-n", ns)["spec"]["replicas"])
        time.sleep(TICK_S)
    print_story(box, ns)
    assert replicas_seen == {3}
    assert not [e for e in pool_events(box, ns) if e["reason"] in ("ScaledIn", "BatchingRolloutStarted")]
    assert {key(batching(p)) for p in ready_pods(box, ns)} == original
    status = pool_status(box, ns)
    assert status["lastDecision"]["action"] == "Hold"
    assert any("metrics" in r for r in status["lastDecision"]["reasons"]), status["lastDecision"]
    said = [e for e in pool_events(box, ns, "MetricsMissing") if e["type"] == "Warning"]
    assert said, [(e["type"], e["reason"]) for e in pool_events(box, ns)]

    # The control: with the label fixed, the same pool gets its metrics and acts (it was the metrics).
    box.cluster.kubectl(
        "patch",
        "deployment",
        "chat-triton",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"template": {"metadata": {"labels": {"poolpilot.io/pool": "chat"}}}}}),
    )
    kube.wait_for(
        lambda: condition(pool_status(box, ns), "MetricsAvailable").get("status") == "True",
        "MetricsAvailable=True once the label is fixed",
        180,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    kube.wait_for(
        lambda: [e for e in pool_events(box, ns) if e["reason"] in ("ScaledIn", "BatchingRolloutStarted")],
        "the pool acting once its metrics are there",
        300,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    cleanup(box, ns)


@pytest.mark.timeout(900)
def test_prometheus_down_holds_the_pool(sandbox: Sandbox, tmp_path: Path) -> None:
    box, ns = sandbox, "dark"
    deploy(box, ns, replicas=3, repository=model_repository(tmp_path))
    stabilisation_s = 20

    def unreachable() -> dict[str, Any] | None:
        status = pool_status(box, ns)
        reason = condition(status, "MetricsAvailable").get("reason")
        return status if reason == "MetricsUnreachable" else None

    # An idle pool that, on its metrics, scales in after the stabilisation window — Prometheus is down.
    box.prometheus.stop()
    try:
        kube.apply(
            box.cluster,
            inference_pool(
                ns,
                node_pool=False,
                replicas={"min": 1, "max": 3, "scaleDownStabilizationSeconds": stabilisation_s},
            ),
        )
        kube.wait_for(
            unreachable,
            "MetricsAvailable=False (unreachable)",
            60,
            interval_s=POLL_S,
            logs=[box.operator_process],
        )
        seen = set()
        deadline = time.monotonic() + 3 * stabilisation_s
        while time.monotonic() < deadline:
            seen.add(kube.get(box.cluster, "deployment", "chat-triton", "-n", ns)["spec"]["replicas"])
            time.sleep(TICK_S)
        status = pool_status(box, ns)
        print_story(box, ns)
        assert seen == {3}
        assert status["lastDecision"]["action"] == "Hold", status["lastDecision"]
        assert any("unreachable" in r for r in status["lastDecision"]["reasons"]), status["lastDecision"]
        assert not pool_events(box, ns, "ScaledIn")
        said = [e for e in pool_events(box, ns, "MetricsUnreachable") if e["type"] == "Warning"]
        assert said, [(e["type"], e["reason"]) for e in pool_events(box, ns)]
    finally:
        box.prometheus.start()

    # The control: with Prometheus back, the idle pool scales in (it was the outage that held it).
    kube.wait_for(
        lambda: pool_events(box, ns, "ScaledIn"),
        "a scale-in once Prometheus is back",
        300,
        interval_s=POLL_S,
        logs=[box.operator_process],
    )
    assert kube.get(box.cluster, "deployment", "chat-triton", "-n", ns)["spec"]["replicas"] < 3
    cleanup(box, ns)
