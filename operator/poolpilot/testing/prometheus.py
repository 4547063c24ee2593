"""A real Prometheus server for tests: the ``prometheus`` binary, a generated config, a query helper.

Why real: PoolPilot's signals are PromQL over Triton's counters (rates across scrapes, counter
continuity across model reloads); a fake would only echo our own assumptions. The harness starts
``/usr/bin/prometheus`` (Debian package ``prometheus``, v2.42) on a free loopback port with a temp
TSDB, scraping static loopback targets every ``scrape_interval_s``, waits for ``/-/ready``, and
stops it on teardown. Queries use the HTTP API through the standard library (no extra client).

It also holds the things Prometheus tests scrape: :class:`ExecutorProcess` (a ``poolpilot-executor``
subprocess on free loopback ports, readiness checked with ``tritonclient``), the ``executor_process``
fixture factory, and :func:`write_emulated_model` (an emulated-curve model repository entry).

Pytest: ``prometheus`` is a fixture *factory*::

    def test_x(prometheus):
        prom = prometheus({"executor": ["127.0.0.1:8002"]}, scrape_interval_s=1.0)
        prom.wait_for_targets_up()
        prom.query_value('sum(nv_inference_count)')
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

DEFAULT_BINARY: Final = "prometheus"
INSTALL_HINT: Final = "install it with `apt-get install -y prometheus` (only /usr/bin/prometheus is used)"


def terminate(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, grace_s: float = 10) -> None:
    """SIGTERM a child, SIGKILL it if it has not exited after `grace_s`; no-op if gone already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)


class PrometheusError(RuntimeError):
    """Prometheus did not start, or a query failed; the message carries the server's words."""


def free_port() -> int:
    """A TCP port free on loopback right now (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_binary(binary: str | None = None) -> str | None:
    """Path of the prometheus binary (``$POOLPILOT_PROMETHEUS`` overrides), or None."""
    return shutil.which(binary or os.environ.get("POOLPILOT_PROMETHEUS", DEFAULT_BINARY))


class PrometheusServer:
    """One Prometheus process scraping static targets; use as a context manager or start()/stop()."""

    def __init__(
        self,
        targets: Mapping[str, Sequence[str]],
        *,
        scrape_interval_s: float = 1.0,
        workdir: str | Path | None = None,
        binary: str | None = None,
        port: int | None = None,
        scrape_configs: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        if not targets and not scrape_configs:
            raise ValueError(
                "targets: at least one job with host:port targets (or a scrape config) is required"
            )
        self.scrape_configs = [dict(c) for c in scrape_configs]
        """Extra scrape jobs as written in prometheus.yml (e.g. Kubernetes pod discovery)."""
        for job, hosts in targets.items():
            for host in hosts:
                if "://" in host or ":" not in host:
                    raise ValueError(f"targets[{job!r}]: {host!r} must be host:port without a scheme")
        if not scrape_interval_s > 0:
            raise ValueError(f"scrape_interval_s must be > 0, got {scrape_interval_s}")
        path = find_binary(binary)
        if path is None:
            raise PrometheusError(f"prometheus binary not found; {INSTALL_HINT}")
        self.binary = path
        self.targets = {job: list(hosts) for job, hosts in targets.items()}
        self.scrape_interval_s = scrape_interval_s
        self._own_workdir = workdir is None
        self.workdir = (
            Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="poolpilot-prom-"))
        )
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path = self.workdir / "prometheus.log"

    # ---- lifecycle ------------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The prometheus.yml content: one static job per entry of ``targets``."""
        interval = _duration(self.scrape_interval_s)
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": job,
                    "scrape_interval": interval,
                    "scrape_timeout": _duration(min(self.scrape_interval_s, 10.0) * 0.9),
                    "static_configs": [{"targets": hosts}],
                }
                for job, hosts in self.targets.items()
            ]
            + self.scrape_configs,
        }

    def start(self, *, timeout_s: float = 30.0) -> PrometheusServer:
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        storage = self.workdir / "data"
        storage.mkdir(exist_ok=True)
        log = self._log_path.open("wb")
        self._proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={storage}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self._proc.returncode}:\n{self.log_tail()}")
            if self._get_status("/-/ready") == 200:
                return self
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"prometheus not ready after {timeout_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        terminate(proc)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # ---- HTTP API -------------------------------------------------------------------------------

    def _get_status(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as resp:
                status: int = resp.status
                return status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; raises PrometheusError on ``status: error``."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise PrometheusError(f"{path} {params}: HTTP {exc.code}: {body.get('error', body)}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the ``result`` list (vector samples with ``metric`` and ``value``)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_value(self, promql: str, *, at: float | None = None) -> float:
        """The single value of an instant query; NaN when it returns nothing; error if several series."""
        result = self.query(promql, at=at)
        if not result:
            return math.nan
        if len(result) > 1:
            raise PrometheusError(f"{promql!r} returned {len(result)} series; aggregate it (sum by ...)")
        return float(result[0]["value"][1])

    def query_range(self, promql: str, *, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """Range query; returns the ``result`` matrix (series with ``values``)."""
        data = self.api(
            "query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step_s:g}"
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    async def aquery_value(self, promql: str, *, at: float | None = None) -> float:
        """:meth:`query_value` off the event loop, for async tests that keep load running."""
        return await asyncio.to_thread(self.query_value, promql, at=at)

    def targets_health(self) -> dict[str, str]:
        """``{scrapeUrl: health}`` of the active targets (health is "up", "down" or "unknown")."""
        data = self.api("targets", state="active")
        return {t["scrapeUrl"]: t["health"] for t in data["activeTargets"]}

    def wait_for_targets_up(self, *, timeout_s: float = 30.0) -> None:
        """Block until every configured target has been scraped successfully."""
        expected = sum(len(h) for h in self.targets.values())
        self.wait_until(
            lambda: (
                (h := self.targets_health()) and len(h) == expected and all(v == "up" for v in h.values())
            ),
            timeout_s=timeout_s,
            what=lambda: f"targets up (now {self.targets_health()})",
        )

    def wait_for_scrapes(self, n: int = 2) -> None:
        """Sleep long enough for ``n`` more scrapes of every target (plus a little slack)."""
        time.sleep(n * self.scrape_interval_s + 0.5)

    async def await_scrapes(self, n: int = 2) -> None:
        await asyncio.sleep(n * self.scrape_interval_s + 0.5)

    @staticmethod
    def wait_until(
        predicate: Callable[[], object],
        *,
        timeout_s: float,
        what: Callable[[], str] | str,
        poll_s: float = 0.2,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(poll_s)
        message = what() if callable(what) else what
        raise PrometheusError(f"timed out after {timeout_s}s waiting for {message}")


def _duration(seconds: float) -> str:
    """Prometheus duration string with millisecond precision ("1s", "250ms")."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


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


# ---- scrape targets: CPU executor processes --------------------------------------------------


class ExecutorProcess:
    """A ``poolpilot-executor`` subprocess on loopback (HTTP + metrics ports), for end-to-end tests.

    Lives here because every Prometheus test needs something real to scrape. Readiness is checked
    with ``tritonclient`` (never hand-rolled HTTP), as for any Triton server.
    """

    def __init__(
        self,
        repository: str | Path,
        models: Sequence[str],
        *,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
    ) -> None:
        self.repository = Path(repository)
        self.models = list(models)
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.url = f"127.0.0.1:{self.http_port}"
        self.metrics_target = f"127.0.0.1:{self.metrics_port}"
        self._extra_args = list(extra_args)
        self._log_path = (
            Path(log_path) if log_path else self.repository.parent / f"executor-{self.http_port}.log"
        )
        self._proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        args = [
            "--model-repository",
            str(self.repository),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--model-control-mode",
            "explicit",
            "--metrics-config",
            "summary_latencies=true",
        ]
        for model in self.models:
            args += ["--load-model", model]
        launcher = "import sys; from poolpilot.executor.cli import main; sys.exit(main(sys.argv[1:]))"
        return [sys.executable, "-c", launcher, *args, *self._extra_args]

    def start(self, *, timeout_s: float = 60.0) -> ExecutorProcess:
        import tritonclient.http as triton_http

        log = self._log_path.open("wb")
        self._proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        client = triton_http.InferenceServerClient(self.url, connection_timeout=2.0, network_timeout=5.0)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"executor exited with {self._proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.is_server_live() and all(client.is_model_ready(m) for m in self.models):
                        return self
                except Exception:  # not listening yet
                    pass
                time.sleep(0.1)
        finally:
            client.close()
        self.stop()
        raise RuntimeError(f"executor not ready after {timeout_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        terminate(proc)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ExecutorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_emulated_model(
    repository: str | Path,
    name: str,
    *,
    latency_ms: tuple[float, float],
    max_batch_size: int = 8,
    max_queue_delay_us: int = 0,
    instances: int = 1,
    dims: int = 16,
) -> Path:
    """Write ``<repository>/<name>/config.pbtxt`` (+ version dir) for an emulated-curve model."""
    model_dir = Path(repository) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    a_ms, b_ms = latency_ms
    (model_dir / "config.pbtxt").write_text(
        f"""name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {max_queue_delay_us} }}
instance_group [ {{ kind: KIND_GPU count: {instances} }} ]
parameters {{ key: "emulated_batch_latency_ms" value: {{ string_value: "{a_ms},{b_ms}" }} }}
"""
    )
    return model_dir


@pytest.fixture()
def executor_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ExecutorProcess]]:
    """Factory fixture: ``executor_process(repository, models, extra_args=()) -> ExecutorProcess`` (ready).

    Every process started through it is stopped at teardown.
    """
    started: list[ExecutorProcess] = []

    def start(
        repository: str | Path, models: Sequence[str], *, extra_args: Sequence[str] = ()
    ) -> ExecutorProcess:
        log = tmp_path_factory.mktemp("executor-log") / "executor.log"
        proc = ExecutorProcess(repository, models, extra_args=extra_args, log_path=log)
        started.append(proc)
        return proc.start()

    yield start
    for proc in reversed(started):
        proc.stop()
