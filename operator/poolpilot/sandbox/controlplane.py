"""A real, process-based Kubernetes control plane for tests and the local sandbox.

Starts etcd, kube-apiserver and kube-controller-manager as plain child processes (no Docker, no
mock), the way controller-runtime's envtest does, plus the controller-manager so that Deployments
get ReplicaSets, namespaces get their `default` ServiceAccount and garbage collection runs.

Binaries are discovered in this order, each candidate checked for version skew against the
apiserver (a stray Debian kubectl 1.20 on PATH must not be used against a 1.36 server):
``$POOLPILOT_BIN_DIR``, ``$KUBEBUILDER_ASSETS`` (envtest layout), ``PATH``, the build cache
(``$POOLPILOT_CACHE`` or ``$XDG_CACHE_HOME/poolpilot`` or ``~/.cache/poolpilot``, then
``k8s-<version>/bin``), and finally ``hack/build-control-plane.sh`` which fills that cache.

CLI::

    python -m poolpilot.sandbox.controlplane up [--dir D]   # foreground until SIGINT/SIGTERM
    python -m poolpilot.sandbox.controlplane build          # only ensure the binaries
"""

from __future__ import annotations

import argparse
import atexit
import base64
import collections
import contextlib
import datetime as dt
import ipaddress
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from poolpilot.sandbox.processes import free_port, spawn

if TYPE_CHECKING:  # imported lazily at run time: `build` and `up` need no kubernetes client
    import kubernetes.client

K8S_VERSION = "v1.36.3"
"""The Kubernetes release hack/build-control-plane.sh builds (override with $K8S_VERSION, as the script)."""

REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
MIN_ETCD_VERSION = (3, 5)  # --unsafe-no-fsync and the /readyz endpoints kube-apiserver >= 1.31 expects
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
CERT_VALIDITY = dt.timedelta(hours=168)  # as envtest's TinyCA

_REPO_ROOT = Path(__file__).resolve().parents[3]  # operator/poolpilot/sandbox/controlplane.py
BUILD_SCRIPT = _REPO_ROOT / "hack" / "build-control-plane.sh"


class ControlPlaneError(RuntimeError):
    """The control plane could not be found, built, started or stopped; the message says why."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose message carries kubectl's stderr (CalledProcessError's does not)."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {(self.stderr or '').strip()}"


# --------------------------------------------------------------------------------------------------
# Binary discovery
# --------------------------------------------------------------------------------------------------


def k8s_version() -> str:
    """The Kubernetes version to use: $K8S_VERSION (as the build script) or the pinned default."""
    return os.environ.get("K8S_VERSION") or K8S_VERSION


def cache_bin_dir() -> Path:
    """Where hack/build-control-plane.sh puts the binaries (same rules as the script)."""
    explicit = os.environ.get("POOLPILOT_BIN_DIR")
    if explicit:
        return Path(explicit)
    return cache_root() / f"k8s-{k8s_version()}" / "bin"


def cache_root() -> Path:
    """The project's binary cache, as hack/*.sh find it: $POOLPILOT_CACHE, else XDG's cache/poolpilot."""
    root = os.environ.get("POOLPILOT_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "poolpilot"


@dataclass(frozen=True)
class Binaries:
    """Resolved absolute paths of the four binaries, and where each came from."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    origins: Mapping[str, str] = field(default_factory=dict)

    @property
    def bin_dir(self) -> Path:
        """The directory of kube-apiserver (the one that decides the cluster's version)."""
        return self.kube_apiserver.parent


_Version = tuple[int, int, int]
_VERSION_CACHE: dict[tuple[str, float], _Version | None] = {}


def _probe_version(path: Path, name: str) -> _Version | None:
    """Ask a binary for its version; None if it does not say (unstamped builds) or cannot run."""
    key = (str(path), path.stat().st_mtime)
    if key in _VERSION_CACHE:
        return _VERSION_CACHE[key]
    if name == "kubectl":
        cmd = [str(path), "version", "--client", "-o", "json"]
        pattern = r'"gitVersion":\s*"v(\d+)\.(\d+)\.(\d+)'
    elif name == "etcd":
        cmd, pattern = [str(path), "--version"], r"etcd Version:\s*(\d+)\.(\d+)\.(\d+)"
    else:
        cmd, pattern = [str(path), "--version"], r"Kubernetes v(\d+)\.(\d+)\.(\d+)"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        m = re.search(pattern, out.stdout + out.stderr)
        version: _Version | None = (int(m[1]), int(m[2]), int(m[3])) if m else None
    except (OSError, subprocess.TimeoutExpired):
        version = None
    _VERSION_CACHE[key] = version
    return version


def _candidate_sources() -> list[tuple[str, Callable[[str], Path | None]]]:
    """The ordered places to look, each a function from binary name to an executable path (or None)."""

    def in_dir(directory: Path) -> Callable[[str], Path | None]:
        def find(name: str) -> Path | None:
            p = directory / name
            return p.resolve() if p.is_file() and os.access(p, os.X_OK) else None

        return find

    def on_path(name: str) -> Path | None:
        found = shutil.which(name)
        return Path(found).resolve() if found else None

    sources: list[tuple[str, Callable[[str], Path | None]]] = []
    if os.environ.get("POOLPILOT_BIN_DIR"):
        sources.append(("$POOLPILOT_BIN_DIR", in_dir(Path(os.environ["POOLPILOT_BIN_DIR"]))))
    if os.environ.get("KUBEBUILDER_ASSETS"):
        sources.append(("$KUBEBUILDER_ASSETS", in_dir(Path(os.environ["KUBEBUILDER_ASSETS"]))))
    sources.append(("PATH", on_path))
    cache = cache_bin_dir()
    if not os.environ.get("POOLPILOT_BIN_DIR"):  # else the cache *is* $POOLPILOT_BIN_DIR, already listed
        sources.append((f"cache {cache}", in_dir(cache)))
    return sources


def _fmt(v: _Version | None) -> str:
    return "unknown" if v is None else ".".join(map(str, v))


def _resolve(notes: list[str]) -> Binaries | None:
    """Pick each binary from the first source that has a version-compatible one; None if any is missing."""
    sources = _candidate_sources()
    chosen: dict[str, tuple[Path, str]] = {}
    api_version: _Version | None = None

    def acceptable(name: str, version: _Version | None) -> str | None:
        """Why a candidate is rejected, or None if it fits."""
        if name == "etcd":
            if version is None or version[:2] < MIN_ETCD_VERSION:
                return f"etcd {_fmt(version)} is older than {_fmt((*MIN_ETCD_VERSION, 0))}"
            return None
        if name == "kube-apiserver" or api_version is None:
            return None
        if version is None:
            return f"{name} does not report a version"
        skew = api_version[1] - version[1]
        if version[0] != api_version[0]:
            return f"{name} {_fmt(version)} has another major version than kube-apiserver {_fmt(api_version)}"
        if name == "kubectl" and abs(skew) > 1:
            return f"kubectl {_fmt(version)} is outside ±1 minor of kube-apiserver {_fmt(api_version)}"
        if name == "kube-controller-manager" and skew not in (0, 1):
            return f"kube-controller-manager {_fmt(version)} must be 0-1 minors older than the apiserver"
        return None

    for name in ("kube-apiserver", "etcd", "kube-controller-manager", "kubectl"):
        for origin, find in sources:
            path = find(name)
            if path is None:
                continue
            version = _probe_version(path, name)
            reason = acceptable(name, version)
            if reason:
                notes.append(f"skipped {path} (from {origin}): {reason}")
                continue
            chosen[name] = (path, origin)
            if name == "kube-apiserver":
                api_version = version
            break
        else:
            notes.append(f"{name}: not found in {', '.join(o for o, _ in sources)}")
    if len(chosen) != len(REQUIRED_BINARIES):
        return None
    return Binaries(
        etcd=chosen["etcd"][0],
        kube_apiserver=chosen["kube-apiserver"][0],
        kube_controller_manager=chosen["kube-controller-manager"][0],
        kubectl=chosen["kubectl"][0],
        origins={n: o for n, (_, o) in chosen.items()},
    )


def run_build_script(script: Path | None = None) -> None:
    """Run hack/build-control-plane.sh, echoing its output to stderr; raise with its tail on failure."""
    script = script or BUILD_SCRIPT
    if not script.is_file():
        raise ControlPlaneError(
            f"the control-plane binaries are missing and the build script {script} does not exist; "
            "set POOLPILOT_BIN_DIR (or KUBEBUILDER_ASSETS plus a kube-controller-manager on PATH) "
            f"to a directory holding {', '.join(REQUIRED_BINARIES)}"
        )
    tail: collections.deque[str] = collections.deque(maxlen=40)
    env = {**os.environ, "K8S_VERSION": k8s_version()}
    with subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            tail.append(line)
        rc = proc.wait()
    if rc != 0:
        raise ControlPlaneError(f"{script} failed with exit code {rc}; last output:\n{''.join(tail)}")


def find_binaries(build: bool = True) -> Binaries:
    """Locate (and, if allowed and needed, build) the control-plane binaries. Never falls back to a mock."""
    notes: list[str] = []
    found = _resolve(notes)
    if found is None and build:
        run_build_script()
        notes.append(f"ran {BUILD_SCRIPT}; still incomplete")
        found = _resolve(notes)
    if found is None:
        raise ControlPlaneError(
            "cannot find usable control-plane binaries "
            f"({', '.join(REQUIRED_BINARIES)}):\n  " + "\n  ".join(notes)
        )
    return found


# --------------------------------------------------------------------------------------------------
# PKI (like envtest's TinyCA: ECDSA P-256, short-lived)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files the components and clients use."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki(directory: Path) -> Pki:
    """Mint a CA, the apiserver serving cert, an admin client cert (system:masters) and the SA key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate small clock differences
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "poolpilot-test-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name, usage: x509.ObjectIdentifier, sans: Sequence[x509.GeneralName] = ()
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + CERT_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    service_ip = next(ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE).hosts())  # the `kubernetes` Service
    serving = leaf(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(service_ip),
        ],
    )
    admin = leaf(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    d = directory
    return Pki(
        ca_cert=_write(d / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        ca_key=_write(d / "ca.key", _key_pem(ca_key), private=True),
        serving_cert=_write(d / "apiserver.crt", serving[0]),
        serving_key=_write(d / "apiserver.key", serving[1], private=True),
        admin_cert=_write(d / "admin.crt", admin[0]),
        admin_key=_write(d / "admin.key", admin[1], private=True),
        sa_key=_write(d / "sa.key", _key_pem(sa_key), private=True),
        sa_pub=_write(
            d / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        ),
    )


def write_kubeconfig(path: Path, server: str, pki: Pki, name: str = "poolpilot-test") -> Path:
    """A self-contained kubeconfig (certs embedded) authenticating as admin via client certificate."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)}}
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin", "namespace": "default"}}],
        "current-context": name,
    }
    _write(path, json.dumps(config, indent=2).encode(), private=True)  # JSON is valid kubeconfig YAML
    return path


# --------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------


KWOK_VERSION = "v0.8.0"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_POD_CIDR = "127.1.0.1/16"
"""kwok's pod CIDR before a sandbox claims its own (`PodCidrClaim`: the first free one from 127.2.0.0/16)."""


KWOK_CONFIGURATION = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 1
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
  manageAllNodes: false
"""
"""kwok's own options, written beside the stages into its `--config` (the command-line flags still win).

kwok applies its defaults only when `--config` has no KwokConfiguration, so every option it defaults is given
here with kwok v0.8.0's default value (`SetObjectDefaults_KwokConfiguration`), except one: a single pod stage
worker, not 4. kwok creates the IP pool of a pod CIDR on first use with a load-then-store that is not atomic
(`PodController.ipPool` in pkg/kwok/controllers/pod_controller.go), so two pods whose first stages render at
once on a fresh kwok can each get a new pool and the same first address. Seen in CI: two pods of one
Deployment at 127.2.0.2, the second executor unable to bind, the pool short of a replica. Pod stages are one
status patch each; the sandbox's tens of pods do not need 4 workers."""


class PodCidrClaim:
    """A loopback /16 for one sandbox's pod IPs, held by an exclusive lock for the control plane's life.

    Why: pods serve at their pod IPs with their container ports (8000, 8002), so two sandboxes on one machine
    (two developers' runs, a test beside the demo) handing out the same pod IPs would bind — or worse, send
    traffic to — each other's executors. The lock (`flock` on a file per /16 in the temp folder) is released
    by the kernel when its holder dies, so a crashed sandbox never leaks its range. Claims start at 127.2:
    127.0/16 is the host's own loopback and 127.1/16 what sandboxes used before this claim, unlocked."""

    def __init__(self, lock_dir: Path | None = None) -> None:
        import fcntl
        import tempfile

        folder = lock_dir or Path(tempfile.gettempdir()) / "poolpilot-pod-cidrs"
        folder.mkdir(parents=True, exist_ok=True)
        for second in range(2, 255):
            fh = (folder / f"127.{second}.lock").open("w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self._fh = fh
            self.cidr = f"127.{second}.0.1/16"
            return
        raise ControlPlaneError(f"no free loopback /16 for pod IPs: 253 sandboxes hold locks in {folder}")

    def release(self) -> None:
        self._fh.close()


def kwok_files() -> tuple[Path, list[Path]]:
    """kwok's binary and stage files, built by hack/build-kwok.sh into the project cache."""
    root = cache_root() / f"kwok-{KWOK_VERSION}"
    binary, stages = root / "bin" / "kwok", sorted((root / "stages").glob("*.yaml"))
    if not binary.exists() or not stages:
        raise ControlPlaneError(f"kwok not found under {root}: run `bash hack/build-kwok.sh` (setup.sh does)")
    return binary, stages


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]


_NOT_STARTED = Path("/nonexistent/poolpilot-control-plane-not-started")
_RUNNING: set[ControlPlane] = set()
_RUNNING_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    """Guard against leaked children when a caller forgets stop() (the context manager is preferred)."""
    with _RUNNING_LOCK:
        planes = list(_RUNNING)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager as child processes, with an admin kubeconfig.

    Use as a context manager (or call start()/stop()). `work_dir=None` makes a temporary directory
    that stop() removes; a caller-given directory is kept (logs stay for inspection) but its
    previous state is wiped on start, because a fresh PKI cannot read an old etcd's secrets.
    """

    def __init__(
        self,
        work_dir: Path | str | None = None,
        *,
        binaries: Binaries | None = None,
        build: bool = True,
        start_timeout_s: float = 120.0,
        stop_grace_s: float = 10.0,
        audit: bool = False,
        scheduler: bool = False,
        kwok: bool = False,
    ) -> None:
        self.scheduler = scheduler or kwok
        """Also run kube-scheduler (pods get bound to nodes)."""
        self.kwok = kwok
        """Also run kwok: Nodes annotated `kwok.x-k8s.io/node: fake` become Ready and their pods Running, with
        pod IPs in `pod_cidr` (loopback: a process on this machine can serve at a pod's IP)."""
        self.pod_cidr = KWOK_POD_CIDR
        """The pod IPs' range, claimed at start (`PodCidrClaim`): no two sandboxes share one."""
        self._cidr_claim: PodCidrClaim | None = None
        self.audit = audit
        """Write the apiserver's audit log (every request at Metadata level: who, verb, resource), so a
        benchmark can count the API calls each client makes (`audit_events`)."""
        self._given_dir = Path(work_dir).resolve() if work_dir is not None else None
        self._binaries = binaries
        self._build = build
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self._procs: list[_Proc] = []
        self._started = False
        self.work_dir: Path = self._given_dir or _NOT_STARTED
        self.kubeconfig: Path = self.work_dir / "kubeconfig"
        self.server: str = ""
        self.ports: dict[str, int] = {}
        self.pki: Pki | None = None
        self.startup_s: float | None = None
        self.phase_s: dict[str, float] = {}  # seconds from launch until each component was healthy

    # -- public API -------------------------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        """Directory of the kube-apiserver in use (resolves the binaries if not done yet)."""
        return self.binaries.bin_dir

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = find_binaries(build=self._build)
        return self._binaries

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.popen.pid for p in self._procs}

    def log_path(self, component: str) -> Path:
        return self.work_dir / "logs" / f"{component}.log"

    def start(self) -> ControlPlane:
        """Start all components and wait until they are healthy; on failure clean up and raise."""
        if self._started:
            return self
        binaries = self.binaries  # may build; outside the startup timer on purpose
        began = time.monotonic()
        attempts = 3  # free_port() can race with another process grabbing the port
        for attempt in range(1, attempts + 1):
            self._prepare_dir()
            with _RUNNING_LOCK:
                _RUNNING.add(self)
            try:
                self._launch(binaries)
            except ControlPlaneError as exc:
                port_race = "address already in use" in str(exc).lower()
                self._terminate_all()
                if port_race and attempt < attempts:
                    continue
                self._cleanup_dir(failed=True)
                with _RUNNING_LOCK:
                    _RUNNING.discard(self)
                raise
            except BaseException:
                self.stop()
                raise
            break
        self._started = True
        self.startup_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Terminate children (SIGTERM, SIGKILL after the grace), close logs, remove an owned temp dir."""
        self._terminate_all()
        self._cleanup_dir(failed=False)
        self._started = False
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG pointing at this control plane (for subprocesses: kopf, helm…)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the matching kubectl against this control plane; raise KubectlError (with stderr) if check."""
        cmd = [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout_s, check=False, env=self.env()
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def api_client(self) -> kubernetes.client.ApiClient:
        """A kubernetes.client.ApiClient authenticated as admin (close it, or use it as a context manager)."""
        import kubernetes.client

        if self.pki is None:
            raise ControlPlaneError("the control plane is not started")
        cfg = kubernetes.client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.pki.ca_cert)
        cfg.cert_file = str(self.pki.admin_cert)
        cfg.key_file = str(self.pki.admin_key)
        cfg.verify_ssl = True
        return kubernetes.client.ApiClient(configuration=cfg)

    @property
    def audit_log(self) -> Path:
        return self.work_dir / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (ControlPlane(audit=True) only), oldest first."""
        if not self.audit:
            raise ControlPlaneError("audit events need ControlPlane(audit=True)")
        if not self.audit_log.exists():
            return []
        lines = self.audit_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def _audit_flags(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.work_dir / "audit-policy.yaml"
        policy.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
            "rules:\n  - level: Metadata\n"
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    def check_alive(self) -> None:
        """Raise if any component has exited (for long-running foreground use)."""
        for p in self._procs:
            rc = p.popen.poll()
            if rc is not None:
                raise ControlPlaneError(
                    f"{p.name} exited with code {rc}; last lines of {p.log_path}:\n{_tail(p.log_path)}"
                )

    # -- internals --------------------------------------------------------------------------------

    def _prepare_dir(self) -> None:
        if self._given_dir is None:
            if not self.work_dir.exists() or self.work_dir == _NOT_STARTED:
                self.work_dir = Path(tempfile.mkdtemp(prefix="poolpilot-cp-"))
        else:
            self.work_dir = self._given_dir
            self.work_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("etcd-data", "pki", "logs", "kcm-certs"):
            shutil.rmtree(self.work_dir / sub, ignore_errors=True)
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.kubeconfig.unlink(missing_ok=True)
        (self.work_dir / "logs").mkdir()

    def _cleanup_dir(self, failed: bool) -> None:
        if self._given_dir is not None:  # keep logs, pki and kubeconfig for inspection; drop the data
            shutil.rmtree(self._given_dir / "etcd-data", ignore_errors=True)
            return
        if self.work_dir != _NOT_STARTED:
            if failed and os.environ.get("POOLPILOT_KEEP_CP_DIR"):
                sys.stderr.write(f"control plane: keeping {self.work_dir} (POOLPILOT_KEEP_CP_DIR)\n")
                return
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _spawn(self, name: str, args: Sequence[str]) -> _Proc:
        log_path = self.log_path(name)
        log_file = log_path.open("ab")
        popen = spawn(  # SIGTERM if we die without stopping them (pytest or `sandbox up` killed -9)
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop them in order
        )
        proc = _Proc(name, popen, log_path, log_file)
        self._procs.append(proc)
        return proc

    def _wait(self, phase: str, proc: _Proc, what: str, probe: Callable[[], bool], deadline: float) -> None:
        """Poll `probe` until true; fail early with the log tail if the process dies or time runs out."""
        while True:
            rc = proc.popen.poll()
            if rc is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with code {rc} before {what}; "
                    f"last lines of {proc.log_path}:\n{_tail(proc.log_path)}"
                )
            if probe():
                self.phase_s[phase] = time.monotonic() - (deadline - self.start_timeout_s)
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self.start_timeout_s:.0f} s waiting for {what}; "
                    f"last lines of {proc.log_path}:\n{_tail(proc.log_path)}"
                )
            time.sleep(0.2)

    def _launch(self, b: Binaries) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pki = self.pki = make_pki(self.work_dir / "pki")
        etcd_port, peer_port, api_port, kcm_port = (free_port() for _ in range(4))
        self.ports = {"etcd": etcd_port, "etcd-peer": peer_port, "kube-apiserver": api_port, "kcm": kcm_port}
        self.server = f"https://127.0.0.1:{api_port}"
        write_kubeconfig(self.kubeconfig, self.server, pki)

        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(b.etcd),
                "--name=default",
                f"--data-dir={self.work_dir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(
            "etcd", etcd, f"etcd health at {etcd_url}/health", lambda: _etcd_healthy(etcd_url), deadline
        )

        api = self._spawn(
            "kube-apiserver",
            [
                str(b.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--cert-dir={self.work_dir / 'pki'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.server}/",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                # 127.0.0.1 is not a valid Endpoints address; the lease reconciler would log errors forever.
                "--endpoint-reconciler-type=none",
                *self._audit_flags(),
            ],
        )
        api_ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        api_ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        readyz = f"{self.server}/readyz"
        self._wait(
            "kube-apiserver", api, f"kube-apiserver {readyz}", lambda: _https_ok(readyz, api_ctx), deadline
        )

        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(b.kube_controller_manager),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.work_dir / 'kcm-certs'}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--use-service-account-credentials=true",
                "--controllers=*",
            ],
        )
        kcm_ctx = ssl.create_default_context()
        kcm_ctx.check_hostname = False
        kcm_ctx.verify_mode = ssl.CERT_NONE  # KCM serves a self-signed cert; we only ask "are you healthy"
        kcm_url = f"https://127.0.0.1:{kcm_port}/healthz"
        self._wait(
            "kube-controller-manager",
            kcm,
            f"kube-controller-manager {kcm_url}",
            lambda: _https_ok(kcm_url, kcm_ctx),
            deadline,
        )
        self._launch_nodes(b, deadline)
        # The ServiceAccount admission plugin stays on: pods need the `default` SA the KCM creates.
        sa_url = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(
            "default-serviceaccount",
            kcm,
            "the `default` ServiceAccount (KCM's serviceaccount controller)",
            lambda: _https_ok(sa_url, api_ctx),
            deadline,
        )

    def _launch_nodes(self, b: Binaries, deadline: float) -> None:
        """kube-scheduler and kwok (the node/pod lifecycle without kubelets), when asked for."""
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving certs; we only ask "are you healthy"
        if self.scheduler:
            port = free_port()
            self.ports["kube-scheduler"] = port
            sched = self._spawn(
                "kube-scheduler",
                [
                    str(b.bin_dir / "kube-scheduler"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                ],
            )
            url = f"https://127.0.0.1:{port}/healthz"
            ok = lambda: _https_ok(url, insecure)  # noqa: E731
            self._wait("kube-scheduler", sched, f"kube-scheduler {url}", ok, deadline)
        if self.kwok:
            binary, stages = kwok_files()
            self._cidr_claim = PodCidrClaim()
            self.pod_cidr = self._cidr_claim.cidr
            config = self.work_dir / "kwok-stages.yaml"
            from poolpilot.sandbox.podrunner import runner_stages

            config.write_text(runner_stages(stages) + "---\n" + KWOK_CONFIGURATION)
            port = free_port()
            self.ports["kwok"] = port
            kwok = self._spawn(
                "kwok",
                [
                    str(binary),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--config={config}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                    f"--cidr={self.pod_cidr}",
                    "--node-ip=127.0.0.1",
                    # Node leases, renewed by kwok as a kubelet would: without them the node lifecycle
                    # controller marks every node NotReady after its grace period, and their pods with it.
                    "--node-lease-duration-seconds=40",
                    f"--server-address=127.0.0.1:{port}",
                ],
            )
            url = f"http://127.0.0.1:{port}/healthz"
            self._wait("kwok", kwok, f"kwok {url}", lambda: _http_ok(url), deadline)

    def _terminate_all(self) -> None:
        if self._cidr_claim is not None:  # kwok is stopped below; its pod IPs go free with it
            self._cidr_claim.release()
            self._cidr_claim = None
        procs, self._procs = self._procs, []
        for p in reversed(procs):  # KCM, then apiserver, then etcd
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.popen.terminate()
                try:
                    p.popen.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        p.popen.kill()
                    p.popen.wait(timeout=30)
            p.log_file.close()


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _etcd_healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=5) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (urllib.error.URLError, OSError, ValueError):
        return False


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


class _Stopped(Exception):
    """Raised in the main thread by SIGINT/SIGTERM so startup and the foreground wait both unwind."""


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn the first SIGINT/SIGTERM into _Stopped, then ignore further ones so teardown completes."""

    def handler(signum: int, _frame: object) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise _Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m poolpilot.sandbox.controlplane",
        description="A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd, kube-apiserver, kube-controller-manager; stay in foreground")
    up.add_argument("--dir", type=Path, default=None, help="work dir (kubeconfig, pki, logs); kept on exit")
    up.add_argument("--timeout", type=float, default=120.0, help="startup timeout in seconds")
    sub.add_parser("build", help="only ensure the binaries (runs hack/build-control-plane.sh if needed)")
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            b = find_binaries(build=True)
            for name in REQUIRED_BINARIES:
                path = getattr(b, name.replace("-", "_"))
                print(f"{name}: {path} ({b.origins[name]})")
            return 0
        plane = ControlPlane(args.dir, start_timeout_s=args.timeout)
        try:
            with _stop_on_signals(), plane:
                print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
                sys.stderr.write(
                    f"control plane up in {plane.startup_s:.1f} s: {plane.server} "
                    f"(binaries {plane.bin_dir}, logs {plane.work_dir / 'logs'}); Ctrl-C to stop\n"
                )
                while True:
                    time.sleep(1.0)
                    plane.check_alive()
        except _Stopped as sig:
            sys.stderr.write(f"control plane stopped ({sig})\n")
        return 0
    except ControlPlaneError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
