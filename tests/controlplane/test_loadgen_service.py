"""`poolpilot loadgen --service`: routing from a Service's EndpointSlices, against the real control plane.

Two real executor processes serve an emulated model; the test writes the Service and one EndpointSlice per
executor (as the EndpointSlice controller would for two pods) and runs the CLI as a user would. Mid-run one
endpoint turns not-ready: from the router's next refresh on it must receive no request, and the other must
take all of them. The executors listen on this machine's non-loopback address because the API server
refuses loopback addresses in EndpointSlices ("may not be in the loopback range").
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tests import kube

from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.executor import ExecutorProcess, running_executor, write_emulated_model

pytestmark = pytest.mark.cluster

REFRESH_S = 2.0  # ServiceRouter's default re-read interval


def _local_address() -> str:
    """An IPv4 address of this machine outside 127.0.0.0/8, or skip (EndpointSlices refuse loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = str(s.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("no non-loopback IPv4 address to put in an EndpointSlice")
    return address


def _slice(ns: str, name: str, service: str, proc: ExecutorProcess, ready: bool) -> dict[str, object]:
    host, port = proc.url.rsplit(":", 1)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": int(port), "protocol": "TCP"}],
        "endpoints": [{"addresses": [host], "conditions": {"ready": ready}}],
    }


def _successes(proc: ExecutorProcess) -> int:
    client = httpclient.InferenceServerClient(proc.url)
    try:
        stats = client.get_inference_statistics("emu")["model_stats"][0]
        return int(stats["inference_stats"]["success"]["count"])
    finally:
        client.close()


def test_service_routing_follows_endpoint_readiness(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = control_plane, namespace
    repo = tmp_path / "models"
    write_emulated_model(repo, "emu", latency_ms=(5.0, 0.1), dynamic_batching={})
    host = _local_address()
    with running_executor(repo, host=host) as a, running_executor(repo, host=host) as b:
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "triton", "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 8000}]},  # no selector: the slices are ours
        }
        cp.kubectl("apply", "-f", "-", input=json.dumps(service))
        for name, proc in (("triton-a", a), ("triton-b", b)):
            cp.kubectl("apply", "-f", "-", input=json.dumps(_slice(ns, name, "triton", proc, ready=True)))

        out = tmp_path / "loadgen.json"
        cmd = [
            sys.executable, "-m", "poolpilot.cli", "loadgen", "--service", f"{ns}/triton",
            "--kubeconfig", str(cp.kubeconfig), "--model", "emu", "--synthetic", "constant", "--rate", "40",
            "--duration", "16", "--json", str(out),
        ]  # fmt: skip
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
            try:
                kube.wait_for(
                    lambda: _successes(a) > 20 and _successes(b) > 20,
                    "traffic on both endpoints",
                    60,
                    interval_s=0.2,
                )
                cp.kubectl(
                    "apply", "-f", "-", input=json.dumps(_slice(ns, "triton-b", "triton", b, ready=False))
                )
                time.sleep(2 * REFRESH_S + 1.0)  # the router's next refresh, plus in-flight requests ending
                b_after_refresh, a_after_refresh = _successes(b), _successes(a)
                stdout, stderr = run.communicate(timeout=120)
            finally:
                if run.poll() is None:
                    run.kill()
        assert run.returncode == 0, stderr
        b_final, a_final = _successes(b), _successes(a)

    report = json.loads(out.read_text())
    assert report["succeeded"] == report["sent"] > 400, stdout
    assert b_final == b_after_refresh  # the not-ready endpoint got nothing after the refresh
    assert a_final > a_after_refresh + 100  # the ready one took the rest of the run
    assert a_final + b_final == report["succeeded"]  # every request reached one of the two, once
