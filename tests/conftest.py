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
from pathlib import Path

import pytest

from poolpilot.sandbox.controlplane import Binaries, ControlPlane, ControlPlaneError, find_binaries
from poolpilot.sandbox.executor import ExecutorProcess
from poolpilot.sandbox.prometheus import INSTALL_HINT, PrometheusServer, find_binary


class _Prepared:
    """Outcome of the pre-test binary lookup (module state: one per pytest process)."""

    binaries: Binaries | None = None
    error: ControlPlaneError | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Find (or build) the binaries before any test runs, so a first-time build is not charged to
    one test's timeout; a failure is stored and re-raised by the fixture, so the tests FAIL."""
    if session.config.option.collectonly:
        return
    if any("control_plane" in getattr(item, "fixturenames", ()) for item in session.items):
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
