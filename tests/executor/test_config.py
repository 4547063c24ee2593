"""Triton model-config handling (poolpilot.triton.config): what GET .../config shows, what load rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolpilot.triton import config as tc

REPO_ROOT = Path(__file__).resolve().parents[2]

PBTXT = """
# a comment
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 100  # trailing comment
  priority_levels: 2
  default_priority_level: 2
  priority_queue_policy { key: 1 value: { timeout_action: DELAY default_timeout_microseconds: 5 } }
}
parameters { key: "emulated_batch_latency_ms" value: { string_value: "1,2" } }
"""


def test_pbtxt_becomes_tritons_json_form() -> None:
    cfg = tc.config_from_pbtxt(PBTXT, model_name="m")
    dyn = cfg["dynamic_batching"]
    # 64-bit ints are JSON numbers, map keys are strings, enums are names.
    assert dyn["max_queue_delay_microseconds"] == 100
    assert dyn["priority_levels"] == 2
    assert dyn["priority_queue_policy"] == {
        "1": {
            "timeout_action": "DELAY",
            "default_timeout_microseconds": 5,
            "allow_timeout_override": False,
            "max_queue_size": 0,
        }
    }
    # Normalisation: preferred size filled with max_batch_size; primitives printed; unset messages omitted.
    assert dyn["preferred_batch_size"] == [8]
    assert dyn["preserve_ordering"] is False
    assert "default_queue_policy" not in dyn
    assert cfg["input"][0]["dims"] == [16]
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["parameters"]["emulated_batch_latency_ms"] == {"string_value": "1,2"}
    assert cfg["instance_group"] == [
        {
            "name": "m_0",
            "kind": "KIND_GPU",
            "count": 1,
            "gpus": [0],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}


def test_name_is_filled_from_directory_and_no_gpus_means_cpu() -> None:
    cfg = tc.config_from_pbtxt('backend: "python"', model_name="dir_name", gpu_ids=())
    assert cfg["name"] == "dir_name"
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert "dynamic_batching" not in cfg


def test_empty_dynamic_batching_block_enables_batcher_with_max_size_preferred() -> None:
    cfg = tc.config_from_pbtxt('backend: "python" max_batch_size: 4 dynamic_batching { }', model_name="m")
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 0


def test_pbtxt_syntax_error_is_reported() -> None:
    with pytest.raises(tc.ModelConfigError, match="failed to parse"):
        tc.parse_pbtxt("max_batch_size: [")
    with pytest.raises(tc.ModelConfigError, match="no_such_field"):
        tc.parse_pbtxt("no_such_field: 1")


def test_override_round_trips_what_get_returns() -> None:
    cfg = tc.config_from_pbtxt(PBTXT, model_name="m")
    assert tc.config_from_override(json.dumps(cfg), model_name="m") == cfg


def test_override_accepts_camel_case_int64_strings_and_any_enum_case() -> None:
    doc = {
        "backend": "python",
        "maxBatchSize": 8,
        "dynamicBatching": {
            "maxQueueDelayMicroseconds": "2500",
            "defaultQueuePolicy": {"timeoutAction": "delay"},
        },
        "instance_group": [{"kind": "kind_cpu", "count": 2}],
    }
    cfg = tc.config_from_override(json.dumps(doc), model_name="m")
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 2500
    assert cfg["dynamic_batching"]["default_queue_policy"]["timeout_action"] == "DELAY"
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["instance_group"][0]["count"] == 2


def test_override_replaces_rather_than_merges() -> None:
    cfg = tc.config_from_override(json.dumps({"backend": "python", "max_batch_size": 2}), model_name="m")
    assert "dynamic_batching" not in cfg
    assert cfg["input"] == []


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"backend": "python", "unknown_field": 1}, "Invalid config override: "),
        ({"backend": "python", "dynamic_batching": {"delay": 1}}, "Invalid config override: "),
        ({"backend": "python", "max_batch_size": "eight"}, "Invalid config override: "),
        (
            {"backend": "python", "max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [8]}},
            "dynamic batching preferred size must be <= max batch size",
        ),
        (
            {"backend": "python", "max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [0]}},
            "dynamic batching preferred size must be positive",
        ),
        (
            {"backend": "python", "max_batch_size": 4, "dynamic_batching": {"priority_levels": 2}},
            r"default priority level must be in range \[1, 2\]",
        ),
        (
            {
                "backend": "python",
                "max_batch_size": 4,
                "dynamic_batching": {
                    "priority_levels": 2,
                    "default_priority_level": 1,
                    "priority_queue_policy": {"3": {}},
                },
            },
            r"priority queue policy must have priority level in range \[1, 2\]",
        ),
        (
            {
                "backend": "python",
                "max_batch_size": 4,
                "dynamic_batching": {
                    "preserve_ordering": True,
                    "priority_levels": 2,
                    "default_priority_level": 1,
                },
            },
            "Only one priority level is allowed when 'preserve_ordering' is true",
        ),
        (
            {
                "backend": "python",
                "max_batch_size": 4,
                "dynamic_batching": {
                    "preserve_ordering": True,
                    "default_queue_policy": {"timeout_action": "DELAY", "default_timeout_microseconds": 10},
                },
            },
            "Queue policy can not have DELAY as timeout action",
        ),
        ({"backend": "python", "max_batch_size": -1}, "'max_batch_size' must be non-negative"),
        ({"name": "other", "backend": "python"}, "directory name must equal model name"),
        ({"max_batch_size": 1}, "unexpected platform type"),
    ],
)
def test_invalid_overrides_are_rejected_with_tritons_message(doc: dict[str, object], message: str) -> None:
    with pytest.raises(tc.ModelConfigError, match=message):
        tc.config_from_override(json.dumps(doc), model_name="m")


def test_lowering_max_batch_size_of_a_fetched_config_hits_the_documented_trap() -> None:
    fetched = tc.config_from_pbtxt(PBTXT, model_name="m")
    fetched["max_batch_size"] = 4  # preferred_batch_size still [8] from normalisation
    with pytest.raises(tc.ModelConfigError, match="preferred size must be <= max batch size"):
        tc.config_from_override(json.dumps(fetched), model_name="m")


def test_only_instance_group_changes_avoid_a_reload() -> None:
    base = tc.config_from_pbtxt(PBTXT, model_name="m")
    more_instances = json.loads(json.dumps(base))
    more_instances["instance_group"][0]["count"] = 3
    assert not tc.requires_reload(base, more_instances)
    new_delay = json.loads(json.dumps(base))
    new_delay["dynamic_batching"]["max_queue_delay_microseconds"] = 7
    assert tc.requires_reload(base, new_delay)


@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.glob("executor_image/*/*/config.pbtxt")),
)
def test_shipped_model_configs_are_valid(path: str) -> None:
    model_dir = (REPO_ROOT / path).parent
    cfg = tc.config_from_pbtxt((REPO_ROOT / path).read_text(), model_name=model_dir.name)
    assert cfg["name"] == model_dir.name
