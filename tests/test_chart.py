"""The Helm chart: its CRDs are the generated ones; it lints, renders, and the apiserver accepts it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from poolpilot.sandbox.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "poolpilot"


def helm_binary() -> str:
    """helm built by hack/build-helm.sh (or on PATH); the test fails, not skips, when it is missing."""
    cache = Path(os.environ.get("POOLPILOT_CACHE", Path.home() / ".cache" / "poolpilot"))
    candidates = sorted(cache.glob("helm-*/bin/helm"))
    found = str(candidates[-1]) if candidates else shutil.which("helm")
    assert found, "helm not found: run `bash hack/build-helm.sh` (hack/setup.sh does)"
    return found


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, check=False)


def test_chart_crds_are_the_generated_crds() -> None:
    top = {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_text() for p in (CHART / "files" / "crds").glob("*.yaml")}
    assert top, "crds/ is empty"
    assert chart == top, "charts/poolpilot/files/crds differs from crds/: run `bash hack/regen-api.sh`"
    assert not (CHART / "crds").exists(), (
        "a crds/ folder would be installed by Helm regardless of crds.install"
    )


def test_crds_follow_crds_install_and_survive_uninstall() -> None:
    rendered = [d for d in _render() if d["kind"] == "CustomResourceDefinition"]
    by_name = {d["metadata"]["name"]: d for d in rendered}  # type: ignore[index]
    top = {
        d["metadata"]["name"]: d
        for p in (REPO / "crds").glob("*.yaml")
        for d in [yaml.safe_load(p.read_text())]
    }
    assert set(by_name) == set(top)
    for name, crd in by_name.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # type: ignore[index]
        assert crd["spec"] == top[name]["spec"]  # the very schema of crds/, unchanged by templating
    assert not [d for d in _render("crds.install=false") if d["kind"] == "CustomResourceDefinition"]


def test_one_replica_recreates_and_may_be_evicted_several_keep_one() -> None:
    one = {d["kind"]: d for d in _render()}
    assert one["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}  # type: ignore[index]
    assert one["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1  # type: ignore[index]
    two = {d["kind"]: d for d in _render("replicaCount=2", "settings.peering=prod")}
    assert two["Deployment"]["spec"]["strategy"]["type"] == "RollingUpdate"  # type: ignore[index]
    assert two["PodDisruptionBudget"]["spec"]["minAvailable"] == 1  # type: ignore[index]


def test_service_monitor_keeps_the_pools_namespace_label() -> None:
    monitor = next(d for d in _render("serviceMonitor.enabled=true") if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True  # type: ignore[index]


def test_notes_warn_about_replicas_without_peering() -> None:
    result = helm("install", "pp", str(CHART), "--dry-run=client", "--set", "replicaCount=2")
    assert result.returncode == 0, result.stderr
    assert "without settings.peering" in result.stdout
    quiet = helm(
        "install", "pp", str(CHART), "--dry-run=client", "--set", "replicaCount=2,settings.peering=p"
    )
    assert "without settings.peering" not in quiet.stdout and "kubectl get inferencepools -A" in quiet.stdout


MODES = {
    "default": [],
    "namespaced": ["settings.namespaces={team-a,team-b}"],
    "monitoring": ["serviceMonitor.enabled=true", "prometheusRule.enabled=true", "dashboard.enabled=true"],
    "crds-off": ["crds.install=false"],
    "peering": ["replicaCount=2", "settings.peering=prod"],
    "providers": ["providers.clusterAPI.enabled=true", "providers.placeholder.enabled=true"],
}


@pytest.mark.parametrize("mode", MODES)
def test_chart_lints_strictly_and_renders_in_every_documented_mode(mode: str) -> None:
    sets = [arg for s in MODES[mode] for arg in ("--set", s)]
    result = helm("lint", "--strict", str(CHART), *sets)
    assert result.returncode == 0, result.stdout + result.stderr
    rendered = helm("template", "pp", str(CHART), *sets)
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("settings.logFormat=xml", "logFormat"),
        ("settings.latencySource=router", "latencySource"),
        ("settings.metricsWindowSeconds=5", "metricsWindowSeconds"),
        ("settings.latencyHistogramMetric=p99 latency", "latencyHistogramMetric"),
        ("settings.extraArgs={verbose}", "extraArgs"),
    ],
)
def test_values_schema_rejects_bad_settings(setting: str, field: str) -> None:
    result = helm("template", "pp", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert field in result.stderr


def _render(*sets: str) -> list[dict[str, object]]:
    args = ["template", "pp", str(CHART), "--namespace", "poolpilot-system"]
    for s in sets:
        args += ["--set", s]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_rendered_operator_args_follow_values() -> None:
    docs = _render("settings.namespaces={team-a,team-b}", "settings.peering=prod")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]  # type: ignore[index]
    assert args[0] == "run"
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args
    assert "--peering=prod" in args and "--standalone" not in args
    default_args = next(d for d in _render() if d["kind"] == "Deployment")["spec"]["template"]["spec"][  # type: ignore[index]
        "containers"
    ][0]["args"]
    assert "--all-namespaces" in default_args and "--standalone" in default_args


def test_operator_cli_accepts_the_chart_flags() -> None:
    """Every flag the chart passes must exist on `poolpilot run` and make valid settings (parsed, not
    executed), the metrics settings included: a platform team reading a router's histogram over 2 minutes
    sets it in the chart, not by patching the Deployment."""
    import argparse

    from poolpilot import runner
    from poolpilot.settings import LatencySource, OperatorSettings, PrometheusSettings

    def settings(*sets: str) -> OperatorSettings:
        deployment = next(d for d in _render("settings.peering=prod", *sets) if d["kind"] == "Deployment")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]  # type: ignore[index]
        parser = argparse.ArgumentParser()
        runner.add_arguments(parser)
        return runner.settings_from_args(parser.parse_args(args[1:]))  # SystemExit on an unknown flag

    # The chart's defaults are the operator's own.
    default = settings()
    assert default.prometheus == PrometheusSettings(url=default.prometheus.url)
    custom = settings(
        "settings.latencySource=histogram",
        "settings.latencyHistogramMetric=router_request_duration_seconds",
        "settings.metricsWindowSeconds=120",
        "settings.tokensMetric=",
        "settings.extraArgs={--batching-parallelism=2}",
    )
    assert custom.prometheus.latency_source is LatencySource.HISTOGRAM
    assert custom.prometheus.latency_histogram_metric == "router_request_duration_seconds"
    assert custom.prometheus.latency_histogram_unit_ms == 1000.0
    assert custom.prometheus.window_s == 120
    assert custom.prometheus.tokens_metric == ""
    assert custom.batching_parallelism == 2


@pytest.mark.cluster
def test_apiserver_accepts_rendered_chart(control_plane: ControlPlane) -> None:
    control_plane.kubectl("create", "namespace", "poolpilot-system", check=False)
    control_plane.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    rendered = helm("template", "pp", str(CHART), "--namespace", "poolpilot-system")
    assert rendered.returncode == 0, rendered.stderr
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=rendered.stdout, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deployment.apps/pp-poolpilot created (server dry run)" in result.stdout
    # And for real: every object the chart renders is accepted and stored.
    applied = control_plane.kubectl("apply", "--server-side", "-f", "-", input=rendered.stdout, check=False)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    stored = control_plane.kubectl(
        "get", "deployment,serviceaccount,poddisruptionbudget", "-n", "poolpilot-system"
    )
    assert "pp-poolpilot" in stored.stdout


def test_chart_readme_is_generated_from_the_values_comments() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart_readme.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `crds.install` | bool | `true` |" in readme
