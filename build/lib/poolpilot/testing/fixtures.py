"""pytest plugin with the project's shared fixtures (real control plane, real Prometheus).

tests/conftest.py loads this module through `pytest_plugins`. A harness registers its fixtures by
defining them in its own module and adding ONE import line below (pytest collects fixtures from
the plugin module's namespace), e.g.::

    from poolpilot.testing.prometheus_fixtures import prometheus  # noqa: F401

The control-plane fixtures live here because poolpilot.testing.controlplane must not need pytest
(the sandbox runs it as a CLI).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator

import pytest

from poolpilot.testing.controlplane import Binaries, ControlPlane, ControlPlaneError, find_binaries


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


# Real Prometheus and the executor subprocess (fixture factories).
from poolpilot.testing.prometheus import executor_process, prometheus  # noqa: E402, F401
