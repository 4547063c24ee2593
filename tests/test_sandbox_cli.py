"""`poolpilot sandbox up/down`: the cluster starts in the foreground, writes sandbox.env, and `down` leaves no
process and no listening port behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]


def _listening(url: str) -> bool:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_writes_its_env_and_down_leaves_nothing(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "poolpilot.cli", "sandbox"]
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [*cli, "up", "--dir", str(tmp_path), "--no-operator"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        env_file = tmp_path / "sandbox.env"
        deadline = time.monotonic() + 120
        while not env_file.exists():
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            assert time.monotonic() < deadline, "sandbox.env never written"
            time.sleep(0.5)
        time.sleep(1.0)
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        assert {"KUBECONFIG", "PROMETHEUS_URL", "KUBECTL"} <= env.keys()
        nodes = subprocess.run(
            [env["KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", "get", "--raw", "/readyz"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert nodes.stdout.strip() == "ok"
        assert _listening(env["PROMETHEUS_URL"])
        out = (tmp_path / "up.log").read_text()
        pids = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
        assert {"etcd", "kube-apiserver", "kube-scheduler", "kwok"} <= pids.keys()
        server = env["KUBECONFIG"]
        api_url = json.loads(Path(server).read_text())["clusters"][0]["cluster"]["server"]

        down = subprocess.run(
            [*cli, "down", "--dir", str(tmp_path)], capture_output=True, text=True, check=False
        )
        assert down.returncode == 0, down.stderr
        up.wait(timeout=60)
        assert up.returncode == 0
        assert not any(_alive(pid) for pid in pids.values()), pids
        assert not _listening(env["PROMETHEUS_URL"]) and not _listening(api_url)
        assert not env_file.exists()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
