"""The operator as the Helm chart installs it, on a test cluster: the chart rendered by helm, its
ServiceAccount, (Cluster)Roles and bindings applied, a kubeconfig that authenticates as that ServiceAccount
(a bound token from the TokenRequest API, as a pod's projected token would be), and the container's own
arguments — so an end-to-end test exercises the chart's RBAC, never admin.

Why not the rendered Deployment itself: there is no kubelet or image here; the operator runs as a local
process with exactly the Deployment's arguments and the ServiceAccount's identity.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from poolpilot.sandbox.controlplane import ControlPlane, cache_root
from poolpilot.sandbox.processes import spawn

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "poolpilot"
RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})


def helm_binary() -> Path:
    """helm built by hack/build-helm.sh (or on PATH); an error that says how to get it otherwise."""
    candidates = sorted(cache_root().glob("helm-*/bin/helm"))
    found = str(candidates[-1]) if candidates else shutil.which("helm")
    if not found:
        raise FileNotFoundError("helm not found: run `bash hack/build-helm.sh` (hack/setup.sh does)")
    return Path(found)


def render(release: str, namespace: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`helm template` of the chart with `values`, as a list of objects."""
    values_json = json.dumps(values)
    result = subprocess.run(
        [str(helm_binary()), "template", release, str(CHART), "-n", namespace, "-f", "-"],
        input=values_json,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@dataclass(frozen=True)
class InstalledOperator:
    """What a test needs to start the operator as the chart would run it."""

    kubeconfig: Path
    args: tuple[str, ...]
    service_account: str
    namespace: str

    def command(self, python: str) -> list[str]:
        return [python, "-m", "poolpilot.cli", *self.args]


def install(
    cp: ControlPlane,
    work_dir: Path,
    *,
    release: str = "poolpilot",
    namespace: str = "poolpilot",
    values: Mapping[str, Any] | None = None,
    token_seconds: int = 7200,
) -> InstalledOperator:
    """Apply the chart's RBAC (and peering CRDs when rendered) and return how to run the operator under it."""
    docs = render(release, namespace, values or {})
    cp.kubectl("create", "namespace", namespace, check=False)
    peering_crds = [
        d for d in docs if d["kind"] == "CustomResourceDefinition" and "kopf" in d["metadata"]["name"]
    ]
    _apply(cp, peering_crds)
    _apply(cp, [d for d in docs if d["kind"] in RBAC_KINDS])
    deployment = _one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = cp.kubectl("create", "token", sa, "-n", namespace, f"--duration={token_seconds}s").stdout.strip()
    kubeconfig = write_token_kubeconfig(work_dir / f"kubeconfig-{sa}", cp, token, f"{namespace}:{sa}")
    return InstalledOperator(kubeconfig, tuple(container.get("args", ())), sa, namespace)


def write_token_kubeconfig(path: Path, cp: ControlPlane, token: str, user: str) -> Path:
    """A kubeconfig for the same server and CA as the admin one, authenticating with a bearer token."""
    admin = json.loads(cp.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def override_args(args: Sequence[str], **flags: str) -> list[str]:
    """The chart's args with some `--flag=value` replaced (ports and URLs that differ on a test machine)."""
    out = [a for a in args if a.split("=", 1)[0].removeprefix("--").replace("-", "_") not in flags]
    out += [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    return out


def _one(docs: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        raise RuntimeError(f"expected one {kind} in the rendered chart, found {len(found)}")
    return found[0]


def _apply(cp: ControlPlane, docs: Sequence[dict[str, Any]]) -> None:
    if docs:
        cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))


class OperatorProcess:
    """`poolpilot run` as a child process with its log, liveness and own metrics (for end-to-end tests)."""

    def __init__(
        self, cmd: Sequence[str], env: Mapping[str, str], log: Path, liveness_port: int, metrics_port: int
    ):
        self.log = log
        self.liveness_port = liveness_port
        self.metrics_port = metrics_port
        self._cmd, self._env = list(cmd), dict(env)
        with log.open("wb") as out:
            self.proc = spawn(self._cmd, env=self._env, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, as a node loss or an OOM kill ends a pod: no graceful exit, nothing flushed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        """Start the same command again once the process is gone (a restarted pod); the log is appended."""
        assert self.proc.poll() is not None, "restart: the operator is still running"
        with self.log.open("ab") as out:
            self.proc = spawn(self._cmd, env=self._env, stdout=out, stderr=subprocess.STDOUT)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def own_metrics(self) -> dict[str, float]:
        """The operator's /metrics page as {`name{k=v,...}`: value}."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}"] = sample.value
        return out

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"operator exited with {self.proc.returncode}:\n{self.tail()}"

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (kopf's graceful exit: it withdraws from peering), SIGKILL if it hangs."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
