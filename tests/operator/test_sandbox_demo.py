"""`poolpilot sandbox demo` end to end, shortened: the real sandbox (control plane, kube-scheduler, kwok GPU
nodes, executor pods, Prometheus, the operator under the chart's RBAC), a few minutes of the Azure trace
through the Service, the same scenario simulated, and what a newcomer reads afterwards: OUT with the
simulator's keys for both runs and the agreement figures, a report with plots, and the operator's decisions
with their reasons. No speed or agreement thresholds: those are figures the demo prints and the README
records, not something a test on a shared machine can hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus, pytest.mark.slow]
OPERATOR_SRC = Path(__file__).resolve().parents[2] / "operator"

SIM_KEYS = {
    "policy", "slo_ms", "requests", "p99_ms", "slo_attainment_requests", "slo_attainment_windows",
    "gpu_hours", "cost_usd", "cost_per_1k_tokens_usd", "mean_gpu_utilization", "replica_changes",
    "batching_changes", "rejected_requests", "peak_replicas", "series", "decisions",
}  # fmt: skip


@pytest.mark.timeout(1200)
def test_a_short_demo_writes_the_json_the_report_and_the_decisions(tmp_path: Path) -> None:
    out, report = tmp_path / "demo.json", tmp_path / "report"
    cmd = [
        sys.executable, "-m", "poolpilot.cli", "sandbox", "demo", "--dir", str(tmp_path / "run"),
        "--json", str(out), "--report", str(report), "--duration", "150", "--node-provisioning-seconds", "30",
        "--idle-before-seconds", "15",
    ]  # fmt: skip
    # This checkout's package, whatever the venv has installed (a worktree, an editable install elsewhere).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(OPERATOR_SRC), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1150, check=False, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "replicas" in done.stdout and "/165 s]" in done.stdout, "no progress line (15 s idle + 150 s load)"

    doc = json.loads(out.read_text())
    assert {"live", "simulated", "agreement", "_run"} <= doc.keys()
    assert doc["live"].keys() >= SIM_KEYS
    assert doc["simulated"].keys() >= SIM_KEYS
    # Same scenario on both sides: the same requests.
    assert doc["live"]["requests"] == doc["simulated"]["requests"] == doc["_run"]["requests"] > 0
    assert doc["live"]["gpu_hours"] > 0 and doc["simulated"]["gpu_hours"] > 0
    agree = doc["agreement"]
    for key in ("p99_median_abs_error_pct", "gpu_hours_ratio", "replicas_within_1_fraction"):
        assert isinstance(agree[key], float), (key, agree[key])
    assert len(doc["live"]["series"]["t_s"]) >= 10
    # The simulation is given what the live run measured: its serving overhead and its rollouts' time.
    params = doc["_run"]["params"]
    assert 0 <= params["request_overhead_ms"] < 100 and 0 <= params["reload_s"] < 60, params

    text = (report / "report.md").read_text()
    for name in ("p99.png", "replicas.png", "nodes.png", "batching.png", "gpu_utilization.png"):
        png = report / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name
        assert f"]({name})" in text
    assert "GPU-hours" in text and "cost per 1k tokens" in text and "within the objective" in text

    # The operator acted, and the report says why: at least one Event and one decision with reasons.
    events = doc["_run"]["events"]
    assert any(e["reason"] == "ScaledOut" and e["message"] for e in events), [e["reason"] for e in events]
    assert any(e["message"] in text.replace("\\|", "|") for e in events if e["reason"] == "ScaledOut")
    assert any(d.get("reasons") for d in doc["live"]["decisions"])
