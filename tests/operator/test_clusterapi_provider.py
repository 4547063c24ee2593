"""The clusterAPI node-pool provider against the real Cluster API CRDs (v1.12.0, from its Go module)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from poolpilot.api import types as api
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

CAPI_VERSION = "v1.12.0"


def _crd_dir() -> Path:
    root = Path(
        os.environ.get("POOLPILOT_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "poolpilot"
    )
    crds = root / f"cluster-api-{CAPI_VERSION}" / "crds"
    if not crds.is_dir():
        pytest.fail(f"{crds} missing: run `bash hack/fetch-capi-crds.sh` (hack/setup.sh does)")
    return crds


@pytest.fixture(scope="module")
def capi_crds(control_plane: ControlPlane) -> Path:
    crds = _crd_dir()
    control_plane.kubectl("apply", "--server-side", "-f", str(crds))
    for name in ("machinedeployments", "machinepools"):
        control_plane.kubectl(
            "wait", "--for=condition=Established", f"crd/{name}.cluster.x-k8s.io", "--timeout=60s"
        )
    return crds


@pytest.fixture
def api_client(control_plane: ControlPlane) -> Iterator[Any]:
    with control_plane.api_client() as client:
        yield client


def _machine_deployment(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    labels = {"cluster.x-k8s.io/deployment-name": name}
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": "gpu-cluster",
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": "gpu-cluster",
                    "bootstrap": {"dataSecretName": "gpu-bootstrap"},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "DockerMachineTemplate",
                        "name": "gpu-a100",
                    },
                },
            },
        },
    }


def _node_pool(namespace: str, **provider: str) -> api.GPUNodePoolSpec:
    return api.GPUNodePoolSpec.model_validate(
        {
            "provider": {"clusterAPI": {"namespace": namespace, **provider}},
            "gpusPerNode": 8,
            "nodes": {"min": 0, "max": 8},
            "pricePerNodeHourUSD": 29.4,
        }
    )


async def test_nodes_are_the_machine_deployment_replicas_through_scale(
    control_plane: ControlPlane, capi_crds: Path, namespace: str, api_client: Any
) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(_machine_deployment(namespace, "gpu-a100", 1)))
    provider = registry.build_provider(
        "a100", _node_pool(namespace, machineDeployment="gpu-a100"), ProviderContext(api_client=api_client)
    )
    assert await provider.get_nodes() == 1
    assert await provider.get_ready_nodes() == 0  # no machine controller runs here: nothing is ready yet

    await provider.set_nodes(3)

    out = control_plane.kubectl(
        "get", "machinedeployments.cluster.x-k8s.io", "gpu-a100", "-n", namespace, "-o", "json"
    )
    body = json.loads(out.stdout)
    assert body["spec"]["replicas"] == 3
    assert body["apiVersion"].startswith("cluster.x-k8s.io/")
    # What the Cluster API controller would report once two machines joined as Ready nodes.
    control_plane.kubectl(
        "patch",
        "machinedeployments.v1beta1.cluster.x-k8s.io",
        "gpu-a100",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"readyReplicas": 2, "replicas": 3}}),
    )
    assert await provider.get_nodes() == 3
    assert await provider.get_ready_nodes() == 2


async def test_a_missing_machine_deployment_is_a_provider_error_naming_it(
    capi_crds: Path, namespace: str, api_client: Any
) -> None:
    provider = registry.build_provider(
        "a100", _node_pool(namespace, machineDeployment="nope"), ProviderContext(api_client=api_client)
    )
    with pytest.raises(ProviderError, match="nope"):
        await provider.get_nodes()
