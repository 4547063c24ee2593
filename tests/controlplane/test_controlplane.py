"""The local control plane: real etcd + kube-apiserver + kube-controller-manager, and how it is found.

Tests marked `cluster` run against the real binaries; the discovery/error tests use tiny fake
executables (unit tests of the lookup rules only, never standing in for a cluster).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from tests import kube

from poolpilot.sandbox import controlplane
from poolpilot.sandbox.controlplane import Binaries, ControlPlane, ControlPlaneError, find_binaries


def deployment_manifest(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    # No kubelet or scheduler runs: pods stay Pending, which is all the KCM behaviour we check.
    return kube.deployment(namespace, name, replicas, image="registry.invalid/triton:none")


def owned_by(items: list[Any], uid: str) -> list[Any]:
    return [o for o in items if any(ref.uid == uid for ref in (o.metadata.owner_references or []))]


# --------------------------------------------------------------------------------------------------
# Against the real control plane
# --------------------------------------------------------------------------------------------------


@pytest.mark.cluster
def test_apiserver_reports_the_stamped_version(control_plane: ControlPlane) -> None:
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == controlplane.k8s_version()
    assert versions["clientVersion"]["gitVersion"] == controlplane.k8s_version()


@pytest.mark.cluster
def test_deployment_gets_a_replicaset_and_its_pods(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(deployment_manifest(namespace, "chat", 2))
    )
    with control_plane.api_client() as client:
        apps, core = kubernetes.client.AppsV1Api(client), kubernetes.client.CoreV1Api(client)
        uid = apps.read_namespaced_deployment("chat", namespace).metadata.uid
        rs = kube.wait_for(
            lambda: owned_by(apps.list_namespaced_replica_set(namespace).items, uid),
            "a ReplicaSet owned by the Deployment",
        )
        assert len(rs) == 1
        # Pods are admitted (ServiceAccount admission stays on; KCM created `default`).
        kube.wait_for(
            lambda: len(owned_by(core.list_namespaced_pod(namespace).items, rs[0].metadata.uid)) == 2,
            "2 pods owned by the ReplicaSet",
        )


@pytest.mark.cluster
def test_deleting_a_deployment_garbage_collects_its_replicaset(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(deployment_manifest(namespace, "gc", 1))
    )
    with control_plane.api_client() as client:
        apps, core = kubernetes.client.AppsV1Api(client), kubernetes.client.CoreV1Api(client)
        uid = apps.read_namespaced_deployment("gc", namespace).metadata.uid
        rs = kube.wait_for(
            lambda: owned_by(apps.list_namespaced_replica_set(namespace).items, uid), "the ReplicaSet"
        )
        rs_uid = rs[0].metadata.uid
        kube.wait_for(lambda: owned_by(core.list_namespaced_pod(namespace).items, rs_uid), "the pod")

        control_plane.kubectl("delete", "-n", namespace, "deployment", "gc", "--wait=false")
        kube.wait_for(
            lambda: not apps.list_namespaced_replica_set(namespace).items, "the ReplicaSet to be collected"
        )
        kube.wait_for(
            lambda: not owned_by(core.list_namespaced_pod(namespace).items, rs_uid), "its pod to be collected"
        )


@pytest.mark.cluster
def test_strict_field_validation_rejects_unknown_fields(control_plane: ControlPlane, namespace: str) -> None:
    typo = deployment_manifest(namespace, "typo", 1)
    typo["spec"]["replicaz"] = 3
    bad = json.dumps(typo)
    strict = control_plane.kubectl(
        "apply", "-n", namespace, "--validate=strict", "-f", "-", input=bad, check=False
    )
    assert strict.returncode != 0
    assert 'unknown field "spec.replicaz"' in strict.stderr
    # The same manifest is accepted when the server is told to ignore unknown fields.
    control_plane.kubectl("apply", "-n", namespace, "--validate=ignore", "-f", "-", input=bad)

    # The API itself (any client): a raw POST with ?fieldValidation=Strict is refused, nothing stored.
    body = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "dta": {"k": "v"}}
    )
    uri = f"/api/v1/namespaces/{namespace}/configmaps"
    raw = control_plane.kubectl(
        "create", "--raw", f"{uri}?fieldValidation=Strict", "-f", "-", input=body, check=False
    )
    assert raw.returncode != 0
    assert 'strict decoding error: unknown field "dta"' in raw.stderr
    stored = control_plane.kubectl("get", "-n", namespace, "configmap/cm", check=False)
    assert "NotFound" in stored.stderr


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.cluster
def test_teardown_leaves_no_process_no_port_no_directory(control_plane: ControlPlane) -> None:
    second = ControlPlane(binaries=control_plane.binaries).start()
    try:
        pids, ports, work_dir = second.pids, second.ports, second.work_dir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert all(_alive(pid) for pid in pids.values())
        assert {name: _listening(port) for name, port in ports.items()} == dict.fromkeys(ports, True)
        assert second.server != control_plane.server  # two planes side by side do not collide
        assert second.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    finally:
        second.stop()
    assert {name: _alive(pid) for name, pid in pids.items()} == dict.fromkeys(pids, False)
    assert {name: _listening(port) for name, port in ports.items()} == dict.fromkeys(ports, False)
    assert not work_dir.exists()
    # the first plane is untouched
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


# --------------------------------------------------------------------------------------------------
# Discovery and error reporting (fake executables; unit tests of the lookup rules)
# --------------------------------------------------------------------------------------------------


def fake_bin(directory: Path, name: str, version: str, run: str = "sleep 60") -> Path:
    """An executable that answers version probes like the real binary and otherwise runs `run`."""
    directory.mkdir(parents=True, exist_ok=True)
    if name == "kubectl":
        answer = f'echo \'{{"clientVersion": {{"gitVersion": "v{version}"}}}}\''
    elif name == "etcd":
        answer = f"echo 'etcd Version: {version}'"
    else:
        answer = f"echo 'Kubernetes v{version}'"
    path = directory / name
    path.write_text(f'#!/bin/sh\ncase "$1" in --version|version) {answer};; *) {run};; esac\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No real binaries reachable: empty PATH dir and cache, no POOLPILOT_BIN_DIR/KUBEBUILDER_ASSETS."""
    for var in ("POOLPILOT_BIN_DIR", "KUBEBUILDER_ASSETS", "K8S_VERSION", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("POOLPILOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    return tmp_path


def test_poolpilot_bin_dir_comes_before_envtest_assets_and_path(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for d in ("own", "envtest", "path"):
        for name in controlplane.REQUIRED_BINARIES:
            fake_bin(isolated_env / d, name, "3.6.8" if name == "etcd" else "1.36.3")
    monkeypatch.setenv("POOLPILOT_BIN_DIR", str(isolated_env / "own"))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(isolated_env / "envtest"))
    monkeypatch.setenv("PATH", str(isolated_env / "path"))
    assert find_binaries(build=False).bin_dir == isolated_env / "own"

    monkeypatch.delenv("POOLPILOT_BIN_DIR")
    found = find_binaries(build=False)
    assert found.bin_dir == isolated_env / "envtest"
    assert found.origins["kube-apiserver"] == "$KUBEBUILDER_ASSETS"


def test_envtest_assets_without_kcm_take_it_from_the_cache(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("etcd", "kube-apiserver", "kubectl"):  # envtest ships no kube-controller-manager
        fake_bin(isolated_env / "envtest", name, "3.6.8" if name == "etcd" else "1.36.3")
    kcm = fake_bin(controlplane.cache_bin_dir(), "kube-controller-manager", "1.36.3")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(isolated_env / "envtest"))
    found = find_binaries(build=False)
    assert found.kube_controller_manager == kcm
    assert found.kube_apiserver == isolated_env / "envtest" / "kube-apiserver"


def test_kubectl_outside_version_skew_is_skipped(isolated_env: Path) -> None:
    stale = fake_bin(isolated_env / "path", "kubectl", "1.20.5")  # like Debian's kubectl on PATH
    cache = controlplane.cache_bin_dir()
    for name in controlplane.REQUIRED_BINARIES:
        fake_bin(cache, name, "3.6.8" if name == "etcd" else "1.36.3")
    found = find_binaries(build=False)
    assert found.kubectl == cache / "kubectl"
    assert found.kubectl != stale


def test_missing_binaries_fail_with_the_names_when_the_build_script_is_absent(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin(isolated_env / "path", "etcd", "3.4.23")  # too old: must be reported, not used
    monkeypatch.setattr(controlplane, "BUILD_SCRIPT", isolated_env / "no-such-script.sh")
    with pytest.raises(ControlPlaneError, match=r"no-such-script\.sh does not exist"):
        find_binaries(build=True)
    with pytest.raises(ControlPlaneError) as err:
        find_binaries(build=False)
    message = str(err.value)
    assert "kube-controller-manager: not found" in message
    assert "etcd 3.4.23 is older than 3.5.0" in message


def test_a_component_that_dies_at_startup_is_reported_with_its_log(isolated_env: Path) -> None:
    d = isolated_env / "bins"
    binaries = Binaries(
        etcd=fake_bin(d, "etcd", "3.6.8", run="echo 'fake etcd: disk on fire' >&2; exit 3"),
        kube_apiserver=fake_bin(d, "kube-apiserver", "1.36.3"),
        kube_controller_manager=fake_bin(d, "kube-controller-manager", "1.36.3"),
        kubectl=fake_bin(d, "kubectl", "1.36.3"),
    )
    plane = ControlPlane(binaries=binaries, start_timeout_s=30)
    with pytest.raises(ControlPlaneError) as err:
        plane.start()
    assert "etcd exited with code 3" in str(err.value)
    assert "disk on fire" in str(err.value)
    assert not plane.work_dir.exists()
    assert plane.pids == {}
