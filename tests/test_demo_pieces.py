"""The pure pieces behind `poolpilot sandbox demo`: the trace segment, the manifests it applies, the
per-minute p99, and the pod-CIDR claim that keeps two sandboxes on one machine apart."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from poolpilot import loads
from poolpilot.loads import LoadError, Trace
from poolpilot.sandbox.controlplane import PodCidrClaim
from poolpilot.sandbox.demo import (
    DEFAULT_RELOAD_S,
    DemoConfig,
    build_trace,
    manifests,
    parsed_specs,
    per_minute_p99,
    request_overhead_ms,
    rollout_seconds,
    send_lateness_per_minute,
    server_time_promql,
    sim_params,
)
from poolpilot.sandbox.report import per_minute_table, seen


def _trace(times: list[float], duration_s: float) -> Trace:
    n = len(times)
    return Trace(
        np.asarray(times, dtype=np.float64),
        np.arange(n, dtype=np.int64),
        np.ones(n, dtype=np.int64),
        duration_s,
        "t",
        "test trace",
    )


def test_segment_keeps_the_window_shifted_to_zero_and_refuses_past_the_end() -> None:
    seg = loads.segment(_trace([0.5, 10.0, 19.9, 20.0, 35.0], 40.0), 10.0, 10.0)
    assert seg.arrival_s.tolist() == pytest.approx([0.0, 9.9])
    assert seg.context_tokens.tolist() == [1, 2] and seg.duration_s == 10.0
    with pytest.raises(LoadError, match="past the trace"):
        loads.segment(_trace([1.0], 40.0), 30.0, 20.0)
    with pytest.raises(LoadError, match="duration"):
        loads.segment(_trace([1.0], 40.0), 0.0, 0.0)


def test_the_demo_applies_the_examples_with_its_flags_and_simulates_the_same_specs() -> None:
    config = DemoConfig(Path("/unused"), node_provisioning_s=90, time_compress=3.0, initial_replicas=4)
    docs = manifests(config, Path("/models-here"))
    assert docs["10-gpunodepool.yaml"]["spec"]["provisioningSeconds"] == 90
    dep = docs["20-deployment.yaml"]
    assert dep["spec"]["replicas"] == 4
    assert dep["spec"]["template"]["metadata"]["annotations"]["sandbox.poolpilot.io/model-repository"] == (
        "/models-here"
    )
    assert docs["40-inferencepool.yaml"]["spec"]["replicas"]["scaleDownStabilizationSeconds"] == 100
    specs = parsed_specs(config)
    params = sim_params(config, specs)
    assert params.node_provisioning_s == 90 and params.initial_replicas == 4
    assert params.gpus_per_node == specs["node_pool"].gpus_per_node
    assert params.slo_ms == specs["pool"].slo.latency_target_ms
    assert params.batch_latency_ms == config.batch_latency_ms
    assert params.p99_source == "pod_summary_max"  # what the operator reads by default
    assert sim_params(config, specs, reload_s=2.5).reload_s == 2.5
    # The emulated GPU's profile is the pool's declared prior, so live and simulated policies start from it.
    declared = specs["pool"].model.batch_latency
    assert (declared.base_ms, declared.per_item_ms) == config.batch_latency_ms


def test_the_scenario_starts_with_the_idle_minute_before_the_load() -> None:
    config = DemoConfig(Path("/unused"), duration_s=120.0, idle_before_s=60.0)
    trace, without = build_trace(config), build_trace(replace(config, idle_before_s=0.0))
    assert trace.duration_s == without.duration_s + 60.0 == 180.0
    assert trace.arrival_s.min() >= 60.0 and len(trace) == len(without)
    assert trace.arrival_s.tolist() == pytest.approx((without.arrival_s + 60.0).tolist())


def test_the_simulation_reloads_as_long_as_the_live_rollouts_took() -> None:
    events = [
        {"time": 100.0, "reason": "BatchingRolloutStarted"},
        {"time": 103.0, "reason": "BatchingRolledOut"},
        {"time": 200.0, "reason": "ScaledOut"},
        {"time": 300.0, "reason": "BatchingRolloutStarted"},
        {"time": 305.0, "reason": "BatchingRolledBack"},
        {"time": 400.0, "reason": "BatchingRolloutStarted"},  # still running when the run ended
    ]
    assert rollout_seconds(events) == 4.0  # median of 3 s and 5 s
    same_second = [
        {"time": 7.0, "reason": "BatchingRolledOut"},
        {"time": 7.0, "reason": "BatchingRolloutStarted"},
    ]
    assert rollout_seconds(same_second) == 0.0


def test_the_serving_overhead_is_the_mean_latency_less_the_pods_queue_and_compute() -> None:
    assert request_overhead_ms([100.0, 110.0, 120.0], 104.0) == pytest.approx(6.0)
    assert request_overhead_ms([100.0], 130.0) == 0.0  # never negative
    assert request_overhead_ms([], 50.0) == 0.0 and request_overhead_ms([100.0], math.nan) == 0.0
    promql = server_time_promql(900.0)
    assert "[930s]" in promql and promql.count("increase(") == 5 and 'namespace="chat"' in promql
    assert rollout_seconds([]) == DEFAULT_RELOAD_S


def test_bad_flags_name_the_flag() -> None:
    with pytest.raises(ValueError, match="--node-provisioning-seconds"):
        DemoConfig(Path("."), node_provisioning_s=5)
    with pytest.raises(ValueError, match="--rate-scale"):
        DemoConfig(Path("."), rate_scale=0.0)
    with pytest.raises(ValueError, match="--idle-before-seconds"):
        DemoConfig(Path("."), idle_before_s=-1.0)


def test_per_minute_p99_uses_served_requests_by_arrival_minute() -> None:
    arrival = np.array([1.0, 2.0, 61.0, 62.0, 130.0])
    latency = np.array([10.0, 20.0, 30.0, 999.0, 5.0])
    ok = np.array([True, True, True, False, True])
    out = per_minute_p99(arrival, latency, ok, 240.0)
    assert out[0] == pytest.approx(np.quantile([10.0, 20.0], 0.99))
    assert out[1] == 30.0 and out[2] == 5.0 and math.isnan(out[3])


def test_send_lateness_counts_the_seconds_the_host_held_the_load_generator_up() -> None:
    intended = np.array([1.0, 1.5, 2.0, 61.0, 61.2, 62.9, 130.0])
    send = intended + np.array([0.001, 0.030, 0.025, 0.150, 0.002, 0.020, 0.0])
    out = send_lateness_per_minute(intended, send, 180.0)
    assert [m["stalled_seconds"] for m in out] == [2.0, 2.0, 0.0]  # seconds 1 and 2; 61 and 62
    assert [m["worst_ms"] for m in out] == pytest.approx([30.0, 150.0, 0.0])


def test_the_minute_table_marks_the_missed_minutes_and_the_host_stalls() -> None:
    doc = {
        "live": {"slo_ms": 150.0},
        "agreement": {"per_minute_p99_ms": {"live": [None, 120.0, 178.0], "simulated": [None, 118.0, 133.0]}},
        "_run": {
            "config": {"idle_before_s": 60.0},
            "params": {"node_provisioning_s": 0.0},
            "send_lateness_per_minute": [
                {"worst_ms": 0.0, "stalled_seconds": 0.0},
                {"worst_ms": 3.0, "stalled_seconds": 0.0},
                {"worst_ms": 140.0, "stalled_seconds": 4.0},
            ],
        },
    }
    rows = [line for line in per_minute_table(doc) if line.startswith("| ") and line[2].isdigit()]
    assert rows == [
        "| 0 | – | – | no |  | 0 | 0 |",
        "| 1 | 120.0 | 118.0 | yes | yes | 3 | 0 |",
        "| 2 | 178.0 | 133.0 | yes | **no** | 140 | 4 |",
    ]


def test_the_seen_actions_quote_the_rollout_that_carries_its_reason() -> None:
    """A rollout's end and start can share a second; the report quotes the start, which says why."""
    events = [
        {"time": 90.0, "reason": "NodesOrdered", "message": "grow node pool 0→1 (set-up)"},
        {"time": 109.0, "reason": "ScaledOut", "message": "replicas 3→8: fill"},
        {"time": 289.0, "reason": "BatchingRolledOut", "message": "every Ready pod runs 0 µs"},
        {"time": 289.0, "reason": "BatchingRolloutStarted", "message": "0 µs: saves 1 replica"},
        {"time": 403.0, "reason": "NodesOrdered", "message": "grow node pool 1→2"},
    ]
    out = seen({"_run": {"started_wall": 100.0, "events": events}})
    assert out == {
        "scale-out": "ScaledOut: replicas 3→8: fill",
        "batching rollout": "BatchingRolloutStarted: 0 µs: saves 1 replica",
        "node order": "NodesOrdered: grow node pool 1→2",
        "scale-in": "not seen",
    }


def test_two_claims_get_two_ranges_and_a_released_one_is_reused(tmp_path: Path) -> None:
    first, second = PodCidrClaim(tmp_path), PodCidrClaim(tmp_path)
    assert first.cidr != second.cidr and {first.cidr, second.cidr} == {"127.2.0.1/16", "127.3.0.1/16"}
    first.release()
    third = PodCidrClaim(tmp_path)
    assert third.cidr == "127.2.0.1/16"
    second.release()
    third.release()
