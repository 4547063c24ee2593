"""The pure pieces behind `poolpilot sandbox demo`: the trace segment, the manifests it applies, the
per-minute p99, and the pod-CIDR claim that keeps two sandboxes on one machine apart."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from poolpilot import loads
from poolpilot.loads import LoadError, Trace
from poolpilot.sandbox.controlplane import PodCidrClaim
from poolpilot.sandbox.demo import DemoConfig, manifests, parsed_specs, per_minute_p99, sim_params


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


def test_bad_flags_name_the_flag() -> None:
    with pytest.raises(ValueError, match="--node-provisioning-seconds"):
        DemoConfig(Path("."), node_provisioning_s=5)
    with pytest.raises(ValueError, match="--rate-scale"):
        DemoConfig(Path("."), rate_scale=0.0)


def test_per_minute_p99_uses_served_requests_by_arrival_minute() -> None:
    arrival = np.array([1.0, 2.0, 61.0, 62.0, 130.0])
    latency = np.array([10.0, 20.0, 30.0, 999.0, 5.0])
    ok = np.array([True, True, True, False, True])
    out = per_minute_p99(arrival, latency, ok, 240.0)
    assert out[0] == pytest.approx(np.quantile([10.0, 20.0], 0.99))
    assert out[1] == 30.0 and out[2] == 5.0 and math.isnan(out[3])


def test_two_claims_get_two_ranges_and_a_released_one_is_reused(tmp_path: Path) -> None:
    first, second = PodCidrClaim(tmp_path), PodCidrClaim(tmp_path)
    assert first.cidr != second.cidr and {first.cidr, second.cidr} == {"127.2.0.1/16", "127.3.0.1/16"}
    first.release()
    third = PodCidrClaim(tmp_path)
    assert third.cidr == "127.2.0.1/16"
    second.release()
    third.release()
