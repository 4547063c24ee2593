"""Unit tests of poolpilot.api: defaults, validation, selector admission, conditions, generated schema."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from poolpilot.api import conditions, crdgen, types, validation

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yaml"))
INVALID = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _pool(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "targetRef": {"name": "chat-triton"},
        "model": {"name": "llama", "maxBatchSize": 64},
    }
    return {
        "apiVersion": types.API_VERSION,
        "kind": "InferencePool",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {**base, **spec},
    }


def _node_pool(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"provider": {"fake": {}}, "pricePerNodeHourUSD": 2.0}
    return {
        "apiVersion": types.API_VERSION,
        "kind": "GPUNodePool",
        "metadata": {"name": "gpus"},
        "spec": {**base, **spec},
    }


# ------------------------------------------------------------------------------------------ defaults


def test_minimal_pool_gets_documented_defaults() -> None:
    spec, problems = validation.parse_inference_pool(_pool())
    assert problems == [] and spec is not None
    assert spec.mode is types.Mode.AUTO
    assert spec.target_ref.kind == "Deployment" and spec.target_ref.api_version == "apps/v1"
    assert (spec.slo.latency_quantile, spec.slo.latency_target_ms) == (0.99, 150.0)
    assert (spec.replicas.min, spec.replicas.max) == (1, 32)
    assert (
        spec.batching.max_queue_delay_microseconds.min,
        spec.batching.max_queue_delay_microseconds.max,
    ) == (
        0,
        50_000,
    )
    assert spec.batching.preferred_batch_sizes is None
    assert spec.node_pool is None
    assert spec.cost.max_cost_per_1k_tokens_usd is None


def test_wire_names_keep_acronyms_and_round_trip() -> None:
    spec, _ = validation.parse_inference_pool(
        _pool(slo={"targetGPUUtilization": 0.8}, cost={"maxCostPer1kTokensUSD": 0.1})
    )
    assert spec is not None
    wire = spec.to_wire()
    assert wire["slo"]["targetGPUUtilization"] == 0.8
    assert wire["cost"] == {"maxCostPer1kTokensUSD": 0.1}
    assert "nodePool" not in wire  # unset optionals are omitted, not null
    assert types.InferencePoolSpec.model_validate(wire) == spec

    node_pool, _ = validation.parse_gpu_node_pool(
        _node_pool(provider={"clusterAPI": {"namespace": "capi", "machinePool": "mp"}})
    )
    assert node_pool is not None
    assert set(node_pool.to_wire()) >= {"pricePerNodeHourUSD", "gpusPerNode", "provider"}
    assert node_pool.provider.name == "clusterAPI"


def test_specs_are_immutable() -> None:
    spec, _ = validation.parse_inference_pool(_pool())
    assert spec is not None
    with pytest.raises(ValidationError):
        spec.mode = types.Mode.OFF  # type: ignore[misc]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_parse_without_problems(example: Path) -> None:
    body = yaml.safe_load(example.read_text())
    parse = (
        validation.parse_inference_pool if body["kind"] == "InferencePool" else validation.parse_gpu_node_pool
    )
    spec, problems = parse(body)
    assert problems == [] and spec is not None


def test_examples_cover_every_mode_and_provider() -> None:
    bodies = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
    modes = {b["spec"]["mode"] for b in bodies if b["kind"] == "InferencePool"}
    providers = {next(iter(b["spec"]["provider"])) for b in bodies if b["kind"] == "GPUNodePool"}
    assert modes >= {"Auto", "Recommend", "Off"}
    assert providers >= {"clusterAPI", "placeholder"}


# ---------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("manifest", INVALID, ids=[p.stem for p in INVALID])
def test_python_rejects_what_the_apiserver_rejects_at_the_same_field(manifest: Path) -> None:
    """Same manifests as test_crds_apiserver: the models and the CRD must agree rule by rule."""
    text = manifest.read_text()
    field = text.splitlines()[0].removeprefix("# rejects: ").strip()
    body = yaml.safe_load(text)
    parse = (
        validation.parse_inference_pool if body["kind"] == "InferencePool" else validation.parse_gpu_node_pool
    )
    spec, problems = parse(body)
    assert spec is None
    assert any(p.field_path.startswith(field) for p in problems), problems


@pytest.mark.parametrize(
    "body",
    [None, "text", [1, 2], {"kind": "InferencePool"}, {"spec": "nope"}, {"spec": {"model": 3}}],
    ids=["none", "string", "list", "no-spec", "spec-not-mapping", "garbage-fields"],
)
def test_parse_never_raises_on_garbage(body: Any) -> None:
    spec, problems = validation.parse_inference_pool(body)
    assert spec is None and problems
    assert all(isinstance(p.field_path, str) and p.message for p in problems)


def test_parse_reports_every_bad_field_with_its_path() -> None:
    _, problems = validation.parse_inference_pool(_pool(tickSeconds=1, replicas={"max": 0}, mode="Sometimes"))
    paths = {p.field_path for p in problems}
    assert {"spec.tickSeconds", "spec.replicas.max", "spec.mode"} <= paths


def test_python_attribute_names_are_not_wire_names() -> None:
    body = _pool()
    body["spec"]["tick_seconds"] = 30
    _, problems = validation.parse_inference_pool(body)
    assert [p.field_path for p in problems] == ["spec.tick_seconds"]


def test_wrong_kind_or_group_is_a_problem() -> None:
    body = _pool()
    body["apiVersion"] = "inference.networking.k8s.io/v1"
    spec, problems = validation.parse_inference_pool(body)
    assert spec is None and [p.field_path for p in problems] == ["apiVersion"]


def test_nan_signals_become_absent_not_invalid_json() -> None:
    signals = types.StatusSignals(p99_ms=math.nan, gpu_utilization=0.5, queue_time_ms=math.inf)
    assert signals.to_wire() == {"gpuUtilization": 0.5}


@given(low=st.integers(0, 10**6), high=st.integers(0, 10**6))
def test_int_range_accepts_exactly_ordered_bounds(low: int, high: int) -> None:
    if low <= high:
        assert types.IntRange(min=low, max=high).max == high
    else:
        with pytest.raises(ValidationError, match="min must be less than or equal to max"):
            types.IntRange(min=low, max=high)


# ------------------------------------------------------------------------- cross-object validation

_TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat-triton"}}


def _check(pool: dict[str, Any], *, labels: dict[str, str], node_pool: dict[str, Any] | None) -> list[str]:
    return [
        str(p)
        for p in validation.check_inference_pool(
            pool, namespace_labels=labels, target=_TARGET, node_pool=node_pool
        )
    ]


def test_valid_pool_with_admitting_node_pool_has_no_problems() -> None:
    pool = _pool(nodePool={"name": "gpus", "gpusPerReplica": 2})
    assert (
        _check(
            pool,
            labels={"gpu": "yes"},
            node_pool=_node_pool(namespaceSelector={"matchLabels": {"gpu": "yes"}}),
        )
        == []
    )


def test_missing_target_and_missing_node_pool_are_reported() -> None:
    pool = _pool(nodePool={"name": "gpus"})
    problems = validation.check_inference_pool(pool, namespace_labels={}, target=None, node_pool=None)
    assert [p.field_path for p in problems] == ["spec.targetRef.name", "spec.nodePool.name"]
    assert "team-a/chat-triton not found" in problems[0].message
    assert "'gpus' not found" in problems[1].message


def test_target_of_another_kind_is_reported() -> None:
    problems = validation.check_inference_pool(
        _pool(), namespace_labels={}, target={**_TARGET, "kind": "StatefulSet"}, node_pool=None
    )
    assert [p.field_path for p in problems] == ["spec.targetRef.kind"]


def test_node_pool_without_selector_admits_no_namespace() -> None:
    problems = _check(_pool(nodePool={"name": "gpus"}), labels={"gpu": "yes"}, node_pool=_node_pool())
    assert len(problems) == 1
    assert problems[0].startswith("spec.nodePool.name:") and "admits no namespace" in problems[0]


def test_node_pool_with_non_matching_selector_is_reported() -> None:
    node_pool = _node_pool(namespaceSelector={"matchLabels": {"gpu": "yes"}})
    problems = _check(_pool(nodePool={"name": "gpus"}), labels={"gpu": "no"}, node_pool=node_pool)
    assert len(problems) == 1 and "does not match" in problems[0]


def test_replica_that_does_not_fit_a_node_is_reported() -> None:
    node_pool = _node_pool(namespaceSelector={}, gpusPerNode=4)
    problems = _check(_pool(nodePool={"name": "gpus", "gpusPerReplica": 8}), labels={}, node_pool=node_pool)
    assert len(problems) == 1 and problems[0].startswith("spec.nodePool.gpusPerReplica:")


def test_invalid_node_pool_is_reported_on_the_reference() -> None:
    broken = _node_pool(provider={})
    problems = _check(_pool(nodePool={"name": "gpus"}), labels={}, node_pool=broken)
    assert (
        len(problems) == 1
        and problems[0].startswith("spec.nodePool.name:")
        and "spec.provider" in problems[0]
    )


def test_invalid_pool_spec_stops_before_cross_object_checks() -> None:
    problems = validation.check_inference_pool(
        _pool(replicas={"min": 3, "max": 1}), namespace_labels={}, target=None, node_pool=None
    )
    assert [p.field_path for p in problems] == ["spec.replicas.min"]


# --------------------------------------------------------------------------------- selector semantics


def _selector(**kw: Any) -> types.LabelSelector:
    return types.LabelSelector.model_validate(kw)


@pytest.mark.parametrize(
    ("selector", "labels", "admitted"),
    [
        pytest.param(None, {"any": "thing"}, False, id="unset selector admits nothing"),
        pytest.param({}, {}, True, id="empty selector admits a namespace without labels"),
        pytest.param({}, {"team": "a"}, True, id="empty selector admits everything"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True, id="matchLabels subset"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "b"}, False, id="matchLabels wrong value"),
        pytest.param({"matchLabels": {"team": "a"}}, {}, False, id="matchLabels missing key"),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]},
            {"t": "b"},
            True,
            id="In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False, id="In absent"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]},
            {},
            True,
            id="NotIn absent",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]},
            {"t": "a"},
            False,
            id="NotIn hit",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True, id="Exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]},
            {"t": "x"},
            False,
            id="DoesNotExist",
        ),
        pytest.param(
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
            id="labels and expressions are ANDed",
        ),
    ],
)
def test_namespace_selector_admission(
    selector: dict[str, Any] | None, labels: dict[str, str], admitted: bool
) -> None:
    spec = types.GPUNodePoolSpec.model_validate(
        {
            "provider": {"fake": {}},
            "pricePerNodeHourUSD": 1,
            **({} if selector is None else {"namespaceSelector": selector}),
        }
    )
    assert spec.admits_namespace(labels) is admitted


# ------------------------------------------------------------------------------------------ conditions


def test_new_condition_is_appended_with_transition_now() -> None:
    conds = conditions.set_condition(
        (), type_=conditions.READY, status=True, reason="Reconciled", message="ok", now=T0
    )
    assert len(conds) == 1
    assert (conds[0].status, conds[0].last_transition_time) == (types.ConditionStatus.TRUE, T0)


def test_same_status_keeps_transition_time_but_updates_reason_and_message() -> None:
    first = conditions.set_condition((), type_="Ready", status=True, reason="Reconciled", message="a", now=T0)
    later = T0 + timedelta(minutes=5)
    second = conditions.set_condition(
        first,
        type_="Ready",
        status=True,
        reason="ModeRecommend",
        message="b",
        now=later,
        observed_generation=2,
    )
    assert second[0].last_transition_time == T0
    assert (second[0].reason, second[0].message, second[0].observed_generation) == ("ModeRecommend", "b", 2)


def test_status_flip_moves_transition_time_and_keeps_order() -> None:
    conds = conditions.set_condition((), type_="Ready", status=True, reason="Reconciled", message="", now=T0)
    conds = conditions.set_condition(
        conds, type_="MetricsAvailable", status=True, reason="MetricsPresent", message="", now=T0
    )
    later = T0 + timedelta(seconds=30)
    conds = conditions.set_condition(
        conds, type_="Ready", status=False, reason="TargetNotFound", message="", now=later
    )
    assert [c.type for c in conds] == ["Ready", "MetricsAvailable"]
    ready = conditions.get_condition(conds, "Ready")
    assert ready is not None and ready.last_transition_time == later
    assert not conditions.is_true(conds, "Ready") and conditions.is_true(conds, "MetricsAvailable")
    assert [c.type for c in conditions.remove_condition(conds, "Ready")] == ["MetricsAvailable"]


def test_condition_reason_must_be_camel_case_and_long_messages_are_cut() -> None:
    with pytest.raises(ValidationError, match="reason"):
        conditions.set_condition((), type_="Ready", status=True, reason="not ok!", message="", now=T0)
    conds = conditions.set_condition(
        (), type_="Ready", status=True, reason="Ok", message="x" * 40_000, now=T0
    )
    assert len(conds[0].message) == conditions.MESSAGE_MAX_CHARS


def test_condition_wire_shape_matches_metav1() -> None:
    cond = conditions.set_condition(
        (), type_="Ready", status=types.ConditionStatus.FALSE, reason="InvalidSpec", message="m", now=T0
    )[0]
    assert cond.to_wire() == {
        "type": "Ready",
        "status": "False",
        "reason": "InvalidSpec",
        "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


# ----------------------------------------------------------------------------------- generated schema


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, child in node.get("properties", {}).items():
            yield from _walk(child, f"{path}.{key}")
        if "items" in node:
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.fixture(params=crdgen.KINDS, ids=[k.kind for k in crdgen.KINDS])
def schema(request: pytest.FixtureRequest) -> dict[str, Any]:
    crd = crdgen.crd(request.param)
    root: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


def test_every_spec_and_status_field_has_a_description(schema: dict[str, Any]) -> None:
    missing = [
        path
        for part in ("spec", "status")
        for path, node in _walk(schema["properties"][part], part)
        if not path.endswith(("[]", "{}")) and not node.get("description")
    ]
    assert missing == []


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "$defs", "title"} & node.keys(), path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert node.get("additionalProperties") is not False, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            # The fake provider's free-form options, and the policy's own memory (its shape is the policy's,
            # versioned by persist.py, bounded by POLICY_STATE_MAX_BYTES).
            assert path in {".spec.provider.fake", ".status.policyState"}, (
                f"{path} preserves unknown fields without need"
            )


def test_every_cel_rule_has_a_message(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"] and rule["rule"], path


def test_required_cross_field_rules_are_in_the_crds() -> None:
    rules: dict[str, list[str]] = {}
    for info in crdgen.KINDS:
        root = crdgen.crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(root):
            for rule in node.get("x-kubernetes-validations", []):
                rules.setdefault(f"{info.kind}:{path}{rule.get('fieldPath', '')}", []).append(rule["rule"])
    for where in (
        "InferencePool:.spec.replicas.min",
        "InferencePool:.spec.batching.maxQueueDelayMicroseconds.min",
        "InferencePool:.spec.batching.maxQueueDelayMicroseconds.max",
        "InferencePool:.spec.batching.instanceCount.min",
        "InferencePool:.spec.batching.preferredBatchSizes",
        "GPUNodePool:.spec.nodes.min",
        "GPUNodePool:.spec.provider",
        "GPUNodePool:.spec.provider.clusterAPI",
    ):
        assert where in rules, f"no CEL rule reported at {where}; have {sorted(rules)}"


def test_names_avoid_gateway_api_inference_extension() -> None:
    for info in crdgen.KINDS:
        names = crdgen.crd(info)["spec"]["names"]
        assert "infpool" not in names["shortNames"]
        assert names["categories"] == ["poolpilot"]
    assert crdgen.crd(crdgen.KINDS[0])["spec"]["group"] == "poolpilot.io"
