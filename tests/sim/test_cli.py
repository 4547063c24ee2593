"""`poolpilot simulate` end to end, through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REQUIRED = (
    "policy",
    "slo_ms",
    "requests",
    "p99_ms",
    "slo_attainment_requests",
    "slo_attainment_windows",
    "gpu_hours",
    "cost_usd",
    "cost_per_1k_tokens_usd",
    "mean_gpu_utilization",
    "replica_changes",
    "batching_changes",
    "rejected_requests",
    "peak_replicas",
    "series",
)


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolpilot.cli", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_synthetic_run_writes_every_field_for_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    proc = simulate(
        "--synthetic", "flash", "--duration", "600", "--rate-scale", "10", "--seed", "3",
        "--slo-ms", "150", "--policy", "poolpilot", "static", "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc) == {"poolpilot", "static", "_run"}
    for name in ("poolpilot", "static"):
        obj = doc[name]
        missing = [k for k in REQUIRED if k not in obj]
        assert not missing, f"{name} lacks {missing}"
        assert obj["policy"] == name
        assert obj["slo_ms"] == 150.0
        assert obj["requests"] == doc["_run"]["requests"] > 0
        assert 0.0 <= obj["slo_attainment_requests"] <= 1.0
        assert 0.0 <= obj["slo_attainment_windows"] <= 1.0
        assert obj["gpu_hours"] > 0 and obj["cost_usd"] > 0
        assert len(obj["series"]["t_s"]) == 600 // 15
    assert "synthetic flash" in doc["_run"]["trace"]
    assert "poolpilot" in proc.stdout and "static" in proc.stdout


def test_same_seed_same_result(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        proc = simulate(
            "--synthetic", "step", "--duration", "300", "--rate-scale", "5", "--seed", "7",
            "--policy", "poolpilot", "--json", str(out), "--no-series",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        obj = json.loads(out.read_text())["poolpilot"]
        outs.append({k: obj[k] for k in REQUIRED if k != "series"})
    assert outs[0] == outs[1]


def test_bad_batch_latency_is_a_clear_error() -> None:
    proc = simulate("--synthetic", "step", "--batch-latency-ms", "50")
    assert proc.returncode == 2
    assert "--batch-latency-ms must be A,B" in proc.stderr
    proc = simulate("--synthetic", "step", "--batch-latency-ms", "0,2")
    assert proc.returncode == 2
    assert "A > 0" in proc.stderr


def test_unknown_policy_names_the_known_ones() -> None:
    proc = simulate("--synthetic", "step", "--duration", "60", "--policy", "vpa")
    assert proc.returncode == 2
    assert "unknown policy 'vpa'" in proc.stderr and "poolpilot" in proc.stderr


def test_margin_ratio_reaches_the_simulated_pool_and_bad_values_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    proc = simulate(
        "--synthetic", "step", "--duration", "300", "--rate-scale", "20", "--seed", "1",
        "--margin-ratio", "0.3", "--policy", "poolpilot", "--no-series", "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["_run"]["params"]["margin_ratio"] == 0.3
    bad = simulate(
        "--synthetic", "step", "--duration", "60", "--margin-ratio", "1.5", "--policy", "poolpilot"
    )
    assert bad.returncode == 2
    assert "margin_ratio must be in [0, 1), got 1.5" in bad.stderr


def test_the_simulated_pool_plans_for_the_margin_it_is_given() -> None:
    from poolpilot.sim.controllers import pool_spec
    from poolpilot.sim.params import SimParams

    assert pool_spec(SimParams()).slo.margin_ratio == 0.05  # the InferencePool default
    assert pool_spec(SimParams(margin_ratio=0.15)).slo.margin_ratio == 0.15
