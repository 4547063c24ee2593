"""A real Prometheus server for tests: the ``prometheus`` binary, a generated config, a query helper.

Why real: PoolPilot's signals are PromQL over Triton's counters (rates across scrapes, counter
continuity across model reloads); a fake would only echo our own assumptions. The harness starts
``/usr/bin/prometheus`` (Debian package ``prometheus``, v2.42) on a free loopback port with a temp
TSDB, scraping static loopback targets every ``scrape_interval_s``, waits for ``/-/ready``, and
stops it on teardown. Queries use the HTTP API through the standard library (no extra client).

The pytest fixture factory ``prometheus`` (tests/conftest.py) wraps it::

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
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from poolpilot.sandbox.processes import free_port, spawn, terminate

DEFAULT_BINARY: Final = "prometheus"
INSTALL_HINT: Final = "install it with `apt-get install -y prometheus` (only /usr/bin/prometheus is used)"


class PrometheusError(RuntimeError):
    """Prometheus did not start, or a query failed; the message carries the server's words."""


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
        self._proc = spawn(
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
