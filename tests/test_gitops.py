"""GitOps: Argo CD health checks (Lua, run by a real Lua interpreter) for both kinds, and a sync that does not
revert the replicas PoolPilot set — simulated on the real apiserver with server-side apply under Argo CD's and
Flux's own field managers, as they sync."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import LuaRuntime

from poolpilot.backends.kube import ObjectRef
from poolpilot.backends.workloads import KubernetesWorkloads
from poolpilot.sandbox.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[1]
GITOPS = REPO / "docs" / "examples" / "gitops"
T0 = "2026-12-04T03:00:00Z"


def health(script: str, obj: dict[str, Any]) -> tuple[str, str]:
    """Run an Argo CD health script as Argo CD does: `obj` global, the script's returned table."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(json.loads(json.dumps(obj)), recursive=True)
    hs = lua.execute((GITOPS / "argocd" / script).read_text())
    return str(hs["status"]), str(hs["message"])


def cond(type_: str, status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}


def pool(
    *conditions: dict[str, Any], mode: str = "Auto", generation: int = 1, seen: int = 1
) -> dict[str, Any]:
    status: dict[str, Any] = (
        {"observedGeneration": seen, "conditions": list(conditions)} if conditions else {}
    )
    return {"metadata": {"generation": generation}, "spec": {"mode": mode}, "status": status}


READY = cond("Ready", "True", "Reconciled", "spec valid")


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pool(), "Progressing"),
        (pool(READY, cond("MetricsAvailable", "True", "MetricsPresent")), "Healthy"),
        (pool(READY, generation=2, seen=1), "Progressing"),
        (pool(cond("Ready", "False", "TargetNotFound", "Deployment chat-triton not found")), "Degraded"),
        (pool(READY, cond("MetricsAvailable", "False", "MetricsUnreachable")), "Degraded"),
        (
            pool(READY, cond("Active", "False", "ConflictingAutoscaler", "HorizontalPodAutoscaler x")),
            "Degraded",
        ),
        (pool(READY, cond("BatchingApplied", "False", "BatchingRollingOut")), "Progressing"),
        (pool(READY, cond("BatchingApplied", "False", "BatchingRolledBack")), "Degraded"),
        (pool(READY, mode="Off"), "Suspended"),
    ],
)
def test_inferencepool_health(obj: dict[str, Any], expected: str) -> None:
    status, message = health("health-inferencepool.lua", obj)
    assert status == expected
    assert message


def test_health_message_carries_the_condition() -> None:
    obj = pool(cond("Ready", "False", "TargetNotFound", "Deployment chat-triton not found"))
    assert health("health-inferencepool.lua", obj) == (
        "Degraded",
        "TargetNotFound: Deployment chat-triton not found",
    )


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), "Progressing"),
        ((READY, cond("NodesReady", "True", "NodesProvisioned")), "Healthy"),
        ((READY, cond("NodesReady", "False", "Provisioning", "1/2 nodes Ready")), "Progressing"),
        ((READY, cond("NodesReady", "False", "ProvisioningTimedOut")), "Degraded"),
        ((cond("Ready", "False", "ProviderError", "MachineDeployment gone"),), "Degraded"),
    ],
)
def test_gpunodepool_health(conditions: tuple[dict[str, Any], ...], expected: str) -> None:
    obj = {"metadata": {"generation": 1}, "status": {"conditions": list(conditions)} if conditions else {}}
    assert health("health-gpunodepool.lua", obj)[0] == expected


def test_argocd_cm_embeds_the_scripts_verbatim() -> None:
    docs = [d for d in yaml.safe_load_all((GITOPS / "argocd" / "argocd-cm-health.yaml").read_text()) if d]
    data = docs[0]["data"]
    assert (
        data["resource.customizations.health.poolpilot.io_InferencePool"]
        == (GITOPS / "argocd" / "health-inferencepool.lua").read_text()
    )
    assert (
        data["resource.customizations.health.poolpilot.io_GPUNodePool"]
        == (GITOPS / "argocd" / "health-gpunodepool.lua").read_text()
    )


def test_argocd_application_ignores_replicas_and_respects_it_on_sync() -> None:
    app = yaml.safe_load((GITOPS / "argocd" / "application.yaml").read_text())
    ignored = app["spec"]["ignoreDifferences"][0]
    assert (ignored["kind"], ignored["jsonPointers"]) == ("Deployment", ["/spec/replicas"])
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]


def _replicas(cp: ControlPlane, namespace: str) -> int:
    out = cp.kubectl("get", "deployment", "chat-triton", "-n", namespace, "-o", "jsonpath={.spec.replicas}")
    return int(out.stdout)


def _sync(cp: ControlPlane, manifest: dict[str, Any], manager: str, *extra: str) -> None:
    cp.kubectl(
        "apply", "--server-side", f"--field-manager={manager}", *extra, "-f", "-", input=json.dumps(manifest)
    )


def _scale_as_poolpilot(cp: ControlPlane, namespace: str, replicas: int) -> None:
    async def scale() -> None:
        with cp.api_client() as client:
            ref = ObjectRef("apps/v1", "Deployment", "chat-triton", namespace)
            await KubernetesWorkloads(client).set_replicas(ref, replicas)

    asyncio.run(scale())


@pytest.mark.cluster
def test_a_sync_with_the_documented_settings_keeps_poolpilots_replicas(
    control_plane: ControlPlane, namespace: str
) -> None:
    git = yaml.safe_load((GITOPS / "flux" / "deployment.yaml").read_text())
    git["metadata"]["namespace"] = namespace
    argo = {**git, "spec": {**git["spec"], "replicas": 2}}  # Argo CD: replicas may stay in Git

    # Argo CD with ignoreDifferences + RespectIgnoreDifferences: the synced manifest lacks the ignored field.
    _sync(control_plane, argo, "argocd-controller")
    _scale_as_poolpilot(control_plane, namespace, 5)
    without_replicas = {**argo, "spec": {k: v for k, v in argo["spec"].items() if k != "replicas"}}
    _sync(control_plane, without_replicas, "argocd-controller")
    assert _replicas(control_plane, namespace) == 5
    got = control_plane.kubectl(
        "get", "deployment", "chat-triton", "-n", namespace, "-o", "json", "--show-managed-fields"
    ).stdout
    owners = [
        m["manager"] for m in json.loads(got)["metadata"]["managedFields"] if "replicas" in json.dumps(m)
    ]
    assert "poolpilot" in owners

    # Control: a sync forcing Git's replicas (no ignoreDifferences) reverts PoolPilot: what the docs prevent.
    _sync(control_plane, argo, "argocd-controller", "--force-conflicts")
    assert _replicas(control_plane, namespace) == 2

    # Flux: replicas left out of Git; Flux's server-side apply never touches them.
    control_plane.kubectl("delete", "deployment", "chat-triton", "-n", namespace)
    _sync(control_plane, git, "kustomize-controller")
    _scale_as_poolpilot(control_plane, namespace, 4)
    _sync(control_plane, git, "kustomize-controller")
    assert _replicas(control_plane, namespace) == 4
