"""Shared fixtures: the real control plane, the real Prometheus and executor processes.

The harnesses themselves live in ``poolpilot.sandbox`` (no pytest there: the sandbox is a product
feature, ``poolpilot sandbox``); this is the pytest glue. Binaries are found (or built) before any
test runs, so a first-time build is not charged to one test's timeout.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from poolpilot.sandbox.cli import Sandbox
from poolpilot.sandbox.controlplane import Binaries, ControlPlane, ControlPlaneError, find_binaries
from poolpilot.sandbox.executor import ExecutorProcess
from poolpilot.sandbox.prometheus import INSTALL_HINT, PrometheusServer, find_binary

CLUSTER_FIXTURES = ("control_plane", "sandbox")


class _Prepared:
    """Outcome of the pre-test binary lookup (module state: one per pytest process)."""

    binaries: Binaries | None = None
    error: ControlPlaneError | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Find (or build) the binaries before any test runs, so a first-time build is not charged to
    one test's timeout; a failure is stored and re-raised by the fixture, so the tests FAIL."""
    if session.config.option.collectonly:
        return
    if any(name in getattr(item, "fixturenames", ()) for item in session.items for name in CLUSTER_FIXTURES):
        capture = session.config.pluginmanager.getplugin("capturemanager")
        # A first build takes minutes: let its progress reach the terminal instead of the capture.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            try:
                _Prepared.binaries = find_binaries(build=True)
            except ControlPlaneError as exc:
                _Prepared.error = exc


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """One real etcd + kube-apiserver + kube-controller-manager for the whole test session."""
    if _Prepared.error is not None:
        raise _Prepared.error
    with ControlPlane(binaries=_Prepared.binaries) as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace (random suffix) whose `default` ServiceAccount exists, deleted afterwards."""
    import kubernetes.client

    name = f"pp-test-{secrets.token_hex(4)}"
    with control_plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespace(
            kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name=name))
        )
        # Pods are admitted only once KCM's serviceaccount controller has created `default`.
        deadline = time.monotonic() + 30
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                break
            except kubernetes.client.ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            yield name
        finally:
            core.delete_namespace(name)


@pytest.fixture()
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory fixture: ``prometheus(targets, scrape_interval_s=1.0) -> PrometheusServer`` (started).

    Every server started through it is stopped at teardown. Without the binary the test is skipped
    with the install hint, except under CI (``CI`` set), where a missing binary is a failure.
    """
    if find_binary() is None:
        if os.environ.get("CI"):
            pytest.fail(f"prometheus binary not found; {INSTALL_HINT}")
        pytest.skip(f"prometheus binary not found; {INSTALL_HINT}")
    started: list[PrometheusServer] = []

    def start(targets: Mapping[str, Sequence[str]], *, scrape_interval_s: float = 1.0) -> PrometheusServer:
        server = PrometheusServer(
            targets, scrape_interval_s=scrape_interval_s, workdir=tmp_path_factory.mktemp("prometheus")
        )
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture()
def executor_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ExecutorProcess]]:
    """Factory fixture: ``executor_process(repository, models, extra_args=()) -> ExecutorProcess`` (ready).

    Latency summaries are on (the Prometheus tests read them); every process is stopped at teardown.
    """
    started: list[ExecutorProcess] = []

    def start(
        repository: str | Path, models: Sequence[str], *, extra_args: Sequence[str] = ()
    ) -> ExecutorProcess:
        log = tmp_path_factory.mktemp("executor-log") / "executor.log"
        args = ["--metrics-config", "summary_latencies=true", *extra_args]
        proc = ExecutorProcess(repository, models, extra_args=args, log_path=log)
        started.append(proc)
        return proc.start()

    yield start
    for proc in reversed(started):
        proc.stop()


# --------------------------------------------------------------------------------------------------
# The sandbox: scheduler, kwok GPU nodes, Triton pods as executors, Prometheus, the operator
# --------------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sandbox(operator=True, pod_start_s=2.0, scrape_interval_s=2.0, shared=False): options of the "
        "`sandbox` fixture for this module",
    )


@dataclass(frozen=True)
class SandboxOptions:
    """What a module asks of its sandbox (`pytest.mark.sandbox(...)` on the module).

    shared=True: the module leaves nothing behind that another module would trip over, so the next
    module asking for the same options may reuse this sandbox instead of starting a new one.
    """

    operator: bool = True
    pod_start_s: float = 2.0
    scrape_interval_s: float = 2.0
    shared: bool = False

    @classmethod
    def of(cls, node: pytest.Item | pytest.Collector) -> SandboxOptions:
        marker = node.get_closest_marker("sandbox")
        return cls(**marker.kwargs) if marker is not None else cls()

    def key(self) -> tuple[bool, float, float]:
        return (self.operator, self.pod_start_s, self.scrape_interval_s)


class _Sandboxes:
    """At most one sandbox alive at a time (each is a whole cluster: this machine has two cores)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.live: tuple[tuple[bool, float, float], Sandbox] | None = None

    def get(self, options: SandboxOptions) -> Sandbox:
        if self.live is not None and options.shared and self.live[0] == options.key():
            return self.live[1]
        self.close()
        if find_binary() is None:
            message = f"prometheus binary not found; {INSTALL_HINT}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        if _Prepared.error is not None:
            raise _Prepared.error
        box = Sandbox(
            self.factory.mktemp("sandbox"),
            operator=options.operator,
            pod_start_s=options.pod_start_s,
            scrape_interval_s=options.scrape_interval_s,
        ).start()
        self.live = (options.key(), box)
        return box

    def release(self, options: SandboxOptions) -> None:
        if not options.shared:
            self.close()

    def close(self) -> None:
        if self.live is not None:
            _, box = self.live
            self.live = None
            box.stop()


@pytest.fixture(scope="session")
def _sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Sandboxes]:
    sandboxes = _Sandboxes(tmp_path_factory)
    try:
        yield sandboxes
    finally:
        sandboxes.close()


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest, _sandboxes: _Sandboxes) -> Iterator[Sandbox]:
    """A running `poolpilot sandbox` (what `poolpilot sandbox up` starts) for this module's tests.

    Options come from the module's `pytest.mark.sandbox(operator=..., pod_start_s=..., scrape_interval_s=...,
    shared=...)`; by default the operator runs (under the chart's RBAC), pods load their model 2 s after they
    start and Prometheus scrapes every 2 s. Tests of one module share it (in file order); it is stopped after
    the module unless the module says `shared=True`, in which case the next module with the same options
    reuses it. `sandbox.cluster` is the control plane (`kubectl`, `kubeconfig`), `sandbox.prometheus` the
    Prometheus server, `sandbox.work_dir` holds `sandbox.env` (for `poolpilot sandbox preempt --dir`).
    """
    options = SandboxOptions.of(request.node)
    box = _sandboxes.get(options)
    try:
        yield box
    finally:
        _sandboxes.release(options)
