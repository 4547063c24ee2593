"""The generated CRDs on a real kube-apiserver: install, examples, rejections, columns, explain, names.

Every invalid manifest in tests/api/invalid/ states in its first line which field it must be
rejected on (`# rejects: spec.replicas.min`); the apiserver's error must name that field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from poolpilot.api import crdgen, types, validation
from poolpilot.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yaml"))
INVALID = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))


def _expected_field(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# rejects: "), f"{path.name}: first line must be '# rejects: <field path>'"
    return first.removeprefix("# rejects: ").strip()


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """Both CRDs installed from crds/ and Established (left installed: other tests share them)."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    # Poll rather than `kubectl wait`: wait fails outright while status.conditions is still unset.
    deadline = time.monotonic() + 60
    for info in crdgen.KINDS:
        while _condition(_get_json(control_plane, "crd", info.crd_name), "Established") != "True":
            assert time.monotonic() < deadline, f"{info.crd_name} did not become Established"
            time.sleep(0.2)
    yield control_plane


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    conditions = obj.get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == type_), None)


def _get_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json").stdout)


def test_crds_are_established_with_status_subresource(crds: ControlPlane) -> None:
    for info in crdgen.KINDS:
        crd = _get_json(crds, "crd", info.crd_name)
        assert _condition(crd, "Established") == "True"
        assert _condition(crd, "NamesAccepted") == "True"
        assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
        assert crd["spec"]["scope"] == ("Namespaced" if info.namespaced else "Cluster")
        assert "infpool" not in crd["status"]["acceptedNames"].get("shortNames", [])


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_applies_and_server_defaults_match_the_models(
    crds: ControlPlane, namespace: str, example: Path
) -> None:
    local = yaml.safe_load(example.read_text())
    crds.kubectl("apply", "-n", namespace, "-f", str(example))
    kind = f"{local['kind'].lower()}s.{types.GROUP}"
    name = local["metadata"]["name"]
    scope = ["-n", namespace] if local["kind"] == types.INFERENCE_POOL_KIND else []
    try:
        stored = _get_json(crds, kind, name, *scope)
        parse = (
            validation.parse_inference_pool
            if local["kind"] == types.INFERENCE_POOL_KIND
            else validation.parse_gpu_node_pool
        )
        from_server, server_problems = parse(stored)
        from_file, file_problems = parse(local)
        assert server_problems == [] and file_problems == []
        # The apiserver applied the CRD's defaults; pydantic applied the models'. They must agree.
        assert from_server == from_file
    finally:
        if not scope:  # cluster-scoped: the namespace fixture will not clean it up
            crds.kubectl("delete", kind, name, "--ignore-not-found")


@pytest.mark.parametrize("manifest", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_manifest_is_rejected_by_the_apiserver_naming_the_field(
    crds: ControlPlane, namespace: str, manifest: Path
) -> None:
    field = _expected_field(manifest)
    result = crds.kubectl("apply", "-n", namespace, "-f", str(manifest), check=False)
    if result.returncode == 0:  # do not leave a cluster-scoped object behind for other tests
        crds.kubectl("delete", "-n", namespace, "-f", str(manifest), "--ignore-not-found", check=False)
    assert result.returncode != 0, f"apiserver accepted {manifest.name}: {result.stdout}"
    assert field in result.stderr, f"error does not name {field}: {result.stderr}"


def test_invalid_manifests_cover_at_least_twelve_rules() -> None:
    assert len({_expected_field(p) for p in INVALID}) >= 12


def test_printer_columns_show_spec_and_status(crds: ControlPlane, namespace: str) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(REPO / "docs/examples/inferencepool-auto.yaml"))
    status = types.InferencePoolStatus(
        observed_generation=1,
        mode=types.Mode.AUTO,
        replicas=3,
        desired_replicas=4,
        batching=types.StatusBatching(max_queue_delay_microseconds=12_000, max_batch_size=64),
        signals=types.StatusSignals(p99_ms=123.5, observed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        cost_per_1k_tokens_usd=0.08,
    )
    # The operator's own status model must be accepted by the status subresource as is.
    crds.kubectl(
        "patch", "inferencepools.poolpilot.io", "chat", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status.to_wire()}),
    )  # fmt: skip
    out = crds.kubectl("get", "inferencepools.poolpilot.io", "-n", namespace, "-o", "wide").stdout
    header, row = out.splitlines()[:2]
    assert " ".join(header.split()) == (
        "NAME MODE TARGET P99 OBSERVED P99 REPLICAS DESIRED QUEUE DELAY NODE POOL COST/1K TOKENS READY AGE"
    )
    for value in ("chat", "Auto", "150", "123.5", "3", "12000", "a100-on-demand"):
        assert value in row.split(), f"{value!r} missing from {row!r}"

    stored = _get_json(crds, "inferencepools.poolpilot.io", "chat", "-n", namespace)
    assert types.InferencePoolStatus.model_validate(stored["status"]) == status


def test_gpunodepool_columns(crds: ControlPlane) -> None:
    example = REPO / "docs/examples/gpunodepool-clusterapi.yaml"
    crds.kubectl("apply", "-f", str(example))
    try:
        status = types.GPUNodePoolStatus(
            provider="clusterAPI",
            nodes=2,
            ready_nodes=1,
            desired_nodes=3,
            gpus=16,
            pools=[types.PoolDemand(namespace="team-a", name="chat", gpus=20)],
            conditions=[
                types.Condition(
                    type="Ready",
                    status=types.ConditionStatus.TRUE,
                    reason="Reconciled",
                    message="ok",
                    last_transition_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                )
            ],
        )
        crds.kubectl(
            "patch", "gpunodepools.poolpilot.io", "a100-on-demand", "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status.to_wire()}),
        )  # fmt: skip
        header, row = crds.kubectl("get", "gpunp", "a100-on-demand").stdout.splitlines()[:2]
        assert " ".join(header.split()) == "NAME PROVIDER NODES READY NODES DESIRED GPUS READY AGE"
        assert row.split()[:7] == ["a100-on-demand", "clusterAPI", "2", "1", "3", "16", "True"]
    finally:
        crds.kubectl("delete", "-f", str(example), "--ignore-not-found")


def test_explain_shows_field_descriptions(crds: ControlPlane) -> None:
    out = " ".join(crds.kubectl("explain", "inferencepools.poolpilot.io.spec").stdout.split())  # unwrap
    spec_fields = types.InferencePoolSpec.model_fields
    for field in ("mode", "target_ref", "slo", "batching", "replicas", "node_pool"):
        info = spec_fields[field]
        assert info.alias is not None and info.alias in out
        assert info.description is not None and " ".join(info.description.split()[:6]) in out
    assert "Recommend: decide and report" in out
    nested = " ".join(
        crds.kubectl("explain", "gpunodepools.poolpilot.io.spec.namespaceSelector").stdout.split()
    )
    assert "admits NO namespace" in nested


def test_short_names_and_category(crds: ControlPlane, namespace: str) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(REPO / "docs/examples/inferencepool-recommend.yaml"))
    assert "embeddings" in crds.kubectl("get", "ppool", "-n", namespace).stdout
    assert "embeddings" in crds.kubectl("get", "poolpilot", "-n", namespace).stdout
    crds.kubectl("get", "gpunp")  # resolves (exit 0) even with no objects


def test_status_merge_patch_clears_a_signal_that_went_missing(crds: ControlPlane, namespace: str) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", str(REPO / "docs/examples/inferencepool-recommend.yaml"))

    def patch_status(status: types.InferencePoolStatus) -> dict[str, Any]:
        body = json.dumps({"status": status.to_merge_patch()})
        crds.kubectl(
            "patch", "inferencepools.poolpilot.io", "embeddings", "-n", namespace, "--subresource=status",
            "--type=merge", "-p", body,
        )  # fmt: skip
        stored: dict[str, Any] = _get_json(crds, "inferencepools.poolpilot.io", "embeddings", "-n", namespace)
        status_out: dict[str, Any] = stored["status"]
        return status_out

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ready = types.Condition(
        type="Ready", status=types.ConditionStatus.TRUE, reason="Reconciled", last_transition_time=now
    )
    first = patch_status(
        types.InferencePoolStatus(
            replicas=2, signals=types.StatusSignals(p99_ms=80.0, gpu_utilization=0.6), conditions=[ready]
        )
    )
    assert first["signals"] == {"p99Ms": 80.0, "gpuUtilization": 0.6}
    second = patch_status(
        types.InferencePoolStatus(
            replicas=2,
            signals=types.StatusSignals(p99_ms=float("nan"), gpu_utilization=0.5),
            conditions=[ready],
        )
    )
    assert second["signals"] == {"gpuUtilization": 0.5}  # the missing p99 is gone, not stale
    assert second["conditions"] == [ready.to_wire()]  # observedGeneration: null was pruned, not stored
