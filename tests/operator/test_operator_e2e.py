"""The operator as a user runs it (`python -m poolpilot.cli run ...`) against a real control plane.

Everything goes through kubectl, like a user would; every wait is a poll with a deadline. The
operator is pointed at a Prometheus URL nobody listens on at first, so it must report
MetricsAvailable=False with a clear message and keep running; the last test then starts a real
Prometheus on that very port, scraping a real executor under load, and the operator must pick the
signals up (the recovery path) without a restart.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import kube
from tests.kube import apply, condition, get_json

from poolpilot import loadgen
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.sandbox import chart
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.processes import free_port

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
POOL_POD_LABELS = {"app": "chat-triton", "poolpilot.io/pool": "chat"}


class Operator(chart.OperatorProcess):
    """The operator under test, with where its Prometheus is (or will be)."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path, prometheus_port: int, **ports: int):
        super().__init__(cmd, env, log, **ports)
        self.prometheus_port = prometheus_port
        self.prometheus_url = f"http://127.0.0.1:{prometheus_port}"


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "-f", str(REPO / "crds"))
    deadline = time.monotonic() + 60
    for crd in ("inferencepools.poolpilot.io", "gpunodepools.poolpilot.io"):
        # Polled rather than `kubectl wait`, which errors while status.conditions is still absent.
        while (
            not (c := condition(get_json(control_plane, "crd", crd), "Established")) or c["status"] != "True"
        ):
            assert time.monotonic() < deadline, f"CRD {crd} not Established after 60 s"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def operator(
    control_plane: ControlPlane, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    prometheus_port = free_port()  # nothing listens there until the last test starts Prometheus
    prometheus_url = f"http://127.0.0.1:{prometheus_port}"
    liveness_port = free_port()
    metrics_port = free_port()
    # The operator as the chart runs it: the Deployment's own args, under the chart's ServiceAccount and RBAC.
    installed = chart.install(
        control_plane,
        tmp_path_factory.mktemp("chart"),
        values={
            "settings": {
                "prometheusURL": prometheus_url,
                "livenessPort": liveness_port,
                "metricsPort": metrics_port,
                "logFormat": "json",
            }
        },
    )
    cmd = installed.command(sys.executable)
    env = {**control_plane.env(), "KUBECONFIG": str(installed.kubeconfig)}
    op = Operator(cmd, env, log, prometheus_port, liveness_port=liveness_port, metrics_port=metrics_port)
    try:
        kube.wait_for(op.healthy, "operator liveness endpoint", watch=op, timeout_s=60)
        yield op
    finally:
        op.stop()


def node_pool(name: str, match_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "poolpilot.io/v1alpha1",
        "kind": "GPUNodePool",
        "metadata": {"name": name},
        "spec": {
            "provider": {"fake": {"nodes": 1}},
            "gpusPerNode": 8,
            "nodes": {"min": 0, "max": 4},
            "pricePerNodeHourUSD": 29.4,
            "namespaceSelector": {"matchLabels": match_labels},
        },
    }


def inference_pool(
    namespace: str, node_pool_name: str, mode: str = "Auto", tick_s: int = 15, model: str = "llama"
) -> dict[str, Any]:
    return {
        "apiVersion": "poolpilot.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "chat", "namespace": namespace},
        "spec": {
            "mode": mode,
            "targetRef": {"kind": "Deployment", "name": "chat-triton"},
            "model": {"name": model, "maxBatchSize": 64},
            "nodePool": {"name": node_pool_name},
            "tickSeconds": tick_s,
        },
    }


@pytest.fixture
def tenant(control_plane: ControlPlane, namespace: str, operator: Operator) -> Iterator[tuple[str, str]]:
    """A namespace labelled gpu-tier=<ns>, a GPUNodePool admitting it and the target Deployment."""
    control_plane.kubectl("label", "namespace", namespace, f"gpu-tier={namespace}")
    pool_name = f"gpus-{namespace}"
    apply(control_plane, node_pool(pool_name, {"gpu-tier": namespace}))
    apply(control_plane, kube.deployment(namespace, labels=POOL_POD_LABELS))
    yield namespace, pool_name
    control_plane.kubectl("delete", "gpunodepool", pool_name, "--wait=false", check=False)
    operator.assert_alive()


def test_valid_pool_becomes_ready_and_reports_metrics_unavailable(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, pool_name = tenant
    apply(control_plane, inference_pool(ns, pool_name))

    def ready() -> dict[str, Any] | None:
        obj = get_json(control_plane, "inferencepool", "chat", "-n", ns)
        c = condition(obj, "Ready")
        return obj if c and c["status"] == "True" and condition(obj, "MetricsAvailable") else None

    obj = kube.wait_for(ready, "InferencePool Ready=True", watch=operator)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["mode"] == "Auto"
    assert status["replicas"] == 2
    metrics = condition(obj, "MetricsAvailable")
    assert metrics is not None
    assert (metrics["status"], metrics["reason"]) == ("False", "MetricsUnreachable")
    assert operator.prometheus_url in metrics["message"]
    # No signals: an Auto pool holds (touches nothing) and says why.
    assert status["lastDecision"]["action"] == "Hold"
    assert any("metrics unavailable" in r for r in status["lastDecision"]["reasons"])
    kube.wait_for(
        lambda: (
            "poolpilot.io/finalizer"
            in ((get_json(control_plane, "inferencepool", "chat", "-n", ns) or {}).get("metadata") or {}).get(
                "finalizers", []
            )
        ),
        "PoolPilot's finalizer on the ticking pool",
        watch=operator,
    )

    ready_series = f"poolpilot_pool_ready{{namespace={ns},pool=chat}}"

    def own_ready() -> dict[str, float] | None:
        m = operator.own_metrics()
        return m if m.get(ready_series) == 1.0 else None

    own = kube.wait_for(own_ready, "the pool's gauges", watch=operator)
    assert own["poolpilot_ticks_total{kind=InferencePool,outcome=ok}"] >= 1
    assert own["poolpilot_metric_fetches_total{outcome=unavailable}"] >= 1

    def node_pool_reported() -> dict[str, Any] | None:
        o = get_json(control_plane, "gpunodepool", pool_name)
        return o if o and (o.get("status") or {}).get("nodes") is not None else None

    node_pool_obj = kube.wait_for(node_pool_reported, "GPUNodePool status", watch=operator)
    assert node_pool_obj["status"]["provider"] == "fake"
    assert node_pool_obj["status"]["nodes"] == 1


def test_missing_node_pool_is_reported_with_a_warning_event(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, _ = tenant
    apply(control_plane, inference_pool(ns, "no-such-pool"))

    def not_found() -> dict[str, Any] | None:
        c = condition(get_json(control_plane, "inferencepool", "chat", "-n", ns), "Ready")
        return c if c and c["reason"] == "NodePoolNotFound" else None

    ready = kube.wait_for(not_found, "Ready=False NodePoolNotFound", watch=operator)
    assert ready["status"] == "False"
    assert "spec.nodePool.name" in ready["message"]

    def warning_event() -> list[dict[str, Any]] | None:
        events = get_json(
            control_plane, "events", "-n", ns, "--field-selector", "involvedObject.name=chat,type=Warning"
        )
        items = [e for e in (events or {}).get("items", []) if e["reason"] == "NodePoolNotFound"]
        return items or None

    events = kube.wait_for(warning_event, "a Warning Event NodePoolNotFound", watch=operator)
    assert events[0]["involvedObject"]["kind"] == "InferencePool"


def test_namespace_not_admitted_by_the_node_pool(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, pool_name = tenant
    control_plane.kubectl("label", "namespace", ns, "gpu-tier=other", "--overwrite")
    apply(control_plane, inference_pool(ns, pool_name))

    def forbidden() -> dict[str, Any] | None:
        c = condition(get_json(control_plane, "inferencepool", "chat", "-n", ns), "Ready")
        return c if c and c["reason"] == "NamespaceNotAdmitted" else None

    ready = kube.wait_for(forbidden, "Ready=False NamespaceNotAdmitted", watch=operator)
    assert ready["status"] == "False"
    assert ns in ready["message"]


def test_an_hpa_on_the_target_is_named_and_not_fought(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, pool_name = tenant
    apply(
        control_plane,
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "chat-hpa", "namespace": ns},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-triton"},
                "minReplicas": 1,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 60},
                        },
                    }
                ],
            },
        },
    )
    apply(control_plane, inference_pool(ns, pool_name, tick_s=5))

    def refused() -> dict[str, Any] | None:
        c = condition(get_json(control_plane, "inferencepool", "chat", "-n", ns), "Active")
        return c if c and c["reason"] == "ConflictingAutoscaler" else None

    active = kube.wait_for(refused, "Active=False ConflictingAutoscaler", watch=operator)
    assert active["status"] == "False"
    assert "HorizontalPodAutoscaler chat-hpa" in active["message"]

    def warning() -> list[dict[str, Any]] | None:
        events = get_json(
            control_plane, "events", "-n", ns, "--field-selector", "involvedObject.name=chat,type=Warning"
        )
        items = [e for e in (events or {}).get("items", []) if e["reason"] == "ConflictingAutoscaler"]
        return items or None

    event = kube.wait_for(warning, "a Warning Event ConflictingAutoscaler", watch=operator)[0]
    assert "chat-hpa" in event["message"]
    target = get_json(control_plane, "deployment", "chat-triton", "-n", ns)
    assert target is not None
    assert target["metadata"]["generation"] == 1  # PoolPilot never touched the HPA's workload


def test_off_mode_and_a_spec_change_is_reported_without_waiting_for_the_tick(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, pool_name = tenant
    # A long tick: only the update handler waking the daemon can make the change show up quickly.
    apply(control_plane, inference_pool(ns, pool_name, mode="Auto", tick_s=600))
    kube.wait_for(
        lambda: (
            (c := condition(get_json(control_plane, "inferencepool", "chat", "-n", ns), "Active"))
            and c["status"] == "True"
        ),
        "Active=True in Auto",
        watch=operator,
    )

    changed_at = time.monotonic()
    apply(control_plane, inference_pool(ns, pool_name, mode="Off", tick_s=600))

    def off() -> dict[str, Any] | None:
        obj = get_json(control_plane, "inferencepool", "chat", "-n", ns)
        c = condition(obj, "Active")
        return obj if c and c["reason"] == "ModeOff" else None

    obj = kube.wait_for(off, "Active=False ModeOff after the spec change", watch=operator, timeout_s=60)
    print(f"spec change reported {time.monotonic() - changed_at:.2f} s after kubectl apply (tickSeconds 600)")
    assert condition(obj, "Active")["status"] == "False"  # type: ignore[index]
    assert obj["status"]["mode"] == "Off"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 2


def test_deleting_a_pool_leaves_no_finalizer_behind(
    control_plane: ControlPlane, operator: Operator, tenant: tuple[str, str]
) -> None:
    ns, pool_name = tenant
    apply(control_plane, inference_pool(ns, pool_name))
    kube.wait_for(
        lambda: (
            "poolpilot.io/finalizer"
            in ((get_json(control_plane, "inferencepool", "chat", "-n", ns) or {}).get("metadata") or {}).get(
                "finalizers", []
            )
        ),
        "the operator's finalizer while the pool ticks",
        watch=operator,
    )

    control_plane.kubectl("delete", "inferencepool", "chat", "-n", ns, "--wait=false")

    kube.wait_for(
        lambda: get_json(control_plane, "inferencepool", "chat", "-n", ns) is None,
        "the InferencePool to disappear",
        watch=operator,
        timeout_s=60,
    )


async def test_operator_picks_up_real_signals_once_prometheus_appears(
    control_plane: ControlPlane,
    operator: Operator,
    tenant: tuple[str, str],
    tmp_path: Path,
    executor_process: Any,
    labelled_prometheus: Any,
) -> None:
    ns, pool_name = tenant
    apply(control_plane, inference_pool(ns, pool_name, tick_s=5, model="emu"))
    kube.wait_for(
        lambda: (
            (c := condition(get_json(control_plane, "inferencepool", "chat", "-n", ns), "MetricsAvailable"))
            and c["reason"] == "MetricsUnreachable"
        ),
        "MetricsUnreachable before Prometheus exists",
        watch=operator,
    )

    repo = tmp_path / "models"
    write_emulated_model(repo, "emu", latency_ms=(3.0, 0.5), max_batch_size=16, max_queue_delay_us=4000)
    executor: ExecutorProcess = executor_process(repo, ["emu"])
    prom = labelled_prometheus(
        {"triton": [executor.metrics_target]},
        labels={"namespace": ns, "pool": "chat"},
        port=operator.prometheus_port,
    )
    prom.wait_for_targets_up()
    schedule = loadgen_schedule.synthetic("constant", base_rps=150, duration_s=5.0, seed=5)
    report = await loadgen.run(loadgen.LoadgenConfig(urls=(executor.url,), model="emu"), schedule)
    assert report.succeeded == len(schedule)
    await prom.await_scrapes(2)
    loaded_at = time.monotonic()

    def metrics_present() -> dict[str, Any] | None:
        obj = get_json(control_plane, "inferencepool", "chat", "-n", ns)
        c = condition(obj, "MetricsAvailable")
        return obj if c and c["status"] == "True" else None

    obj = kube.wait_for(
        metrics_present, "MetricsAvailable=True from the real Prometheus", watch=operator, timeout_s=60
    )
    print(f"MetricsAvailable=True {time.monotonic() - loaded_at:.1f} s after the load (tickSeconds 5)")
    signals = obj["status"]["signals"]
    assert 3.0 <= signals["p99Ms"] <= report.latency_p99_ms * 1.1
    assert signals["avgBatchSize"] > 1.0
    assert signals["requestRatePerSecond"] > 0
    # The Deployment's pods never run here (no scheduler): the decision says so instead of scaling in.
    reasons = obj["status"]["lastDecision"]["reasons"]
    assert any(r.startswith("lost capacity: 0/2 replicas ready") for r in reasons), reasons
    latency_series = f"poolpilot_pool_latency_seconds{{namespace={ns},pool=chat}}"

    def own_latency() -> dict[str, float] | None:
        m = operator.own_metrics()
        return m if m.get(latency_series, 0) > 0 else None

    own = kube.wait_for(own_latency, "the pool's latency gauge", watch=operator)
    assert own[latency_series] >= 0.003  # base units: seconds
