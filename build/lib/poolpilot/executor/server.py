"""The HTTP side: Triton's KServe-v2 routes and extensions, and the metrics endpoint (triton.md §2, §4).

One asyncio loop serves both ports; model code runs in worker threads (Python backend) or as
timers (emulated backend), so the loop never blocks on compute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from poolpilot.executor.metrics import PENDING, BusyTracker, Labels, MetricsRegistry, MetricsSettings
from poolpilot.executor.model import InferError, LoadedModel
from poolpilot.executor.repository import Repository, RepositoryError
from poolpilot.executor.tensors import (
    CONFIG_TO_DATATYPE,
    HEADER_LENGTH,
    TensorError,
    decode_request,
    encode_response,
)

log = logging.getLogger("poolpilot.executor")

SERVER_NAME = "triton"
SERVER_VERSION = "2.73.0"
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]
GPU_MEMORY_TOTAL_BYTES = 80 * 2**30  # an emulated 80 GiB GPU


@dataclass(frozen=True)
class ServerSettings:
    """Command-line settings (names mirror tritonserver's flags)."""

    model_repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    metrics_port: int = 8002
    explicit: bool = False
    load_models: tuple[str, ...] = ()
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    metrics_interval_ms: int = 2000
    gpu_uuid: str = ""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _empty(status: int) -> web.Response:
    return web.Response(status=status)


class ExecutorServer:
    """Wires the repository, metrics and HTTP routes together; `run()` serves until cancelled."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.gpu_uuid = settings.gpu_uuid or "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_DNS, socket.gethostname())
        )
        self.metrics = MetricsRegistry(settings.metrics, time.monotonic)
        self.busy = BusyTracker(time.monotonic)
        self.repo = Repository(
            settings.model_repository, metrics=self.metrics, busy=self.busy, explicit=settings.explicit
        )
        self.metrics.gauge_sources.append(self._gauges)
        self._ready = False
        self.http_port = 0
        self.metrics_port = 0

    # -- app ---------------------------------------------------------------------------------------
    def http_app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        r = app.router
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.ready)
        r.add_get("/v2", self.server_metadata)
        r.add_get("/v2/models/stats", self.stats)
        r.add_get("/v2/models/{model}", self.model_metadata)
        r.add_get("/v2/models/{model}/versions/{version}", self.model_metadata)
        r.add_get("/v2/models/{model}/ready", self.model_ready)
        r.add_get("/v2/models/{model}/versions/{version}/ready", self.model_ready)
        r.add_get("/v2/models/{model}/config", self.model_config)
        r.add_get("/v2/models/{model}/versions/{version}/config", self.model_config)
        r.add_get("/v2/models/{model}/stats", self.stats)
        r.add_get("/v2/models/{model}/versions/{version}/stats", self.stats)
        r.add_post("/v2/models/{model}/infer", self.infer)
        r.add_post("/v2/models/{model}/versions/{version}/infer", self.infer)
        r.add_post("/v2/repository/index", self.repo_index)
        r.add_post("/v2/repository/models/{model}/load", self.repo_load)
        r.add_post("/v2/repository/models/{model}/unload", self.repo_unload)
        r.add_post("/v2/repository/{repo}/index", self.repo_named)
        r.add_post("/v2/repository/{repo}/models/{model}/{action}", self.repo_named)
        return app

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics_page)
        return app

    # -- health & metadata -----------------------------------------------------------------------
    async def live(self, request: web.Request) -> web.Response:
        return _empty(200)

    async def ready(self, request: web.Request) -> web.Response:
        # Triton's --strict-readiness (default on): ready only when every model loads fine.
        return _empty(200 if self._ready and not self.repo.is_failed() else 400)

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS})

    def _model(self, request: web.Request) -> LoadedModel:
        return self.repo.get(request.match_info["model"], request.match_info.get("version", ""))

    async def model_metadata(self, request: web.Request) -> web.Response:
        try:
            model = self._model(request)
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        cfg = model.config
        batch = [-1] if int(cfg.get("max_batch_size", 0)) > 0 else []

        def tensors(kind: str) -> list[dict[str, Any]]:
            return [
                {
                    "name": t["name"],
                    "datatype": CONFIG_TO_DATATYPE.get(t.get("data_type", ""), "INVALID"),
                    "shape": batch + [int(d) for d in t.get("dims", [])],
                }
                for t in cfg.get(kind, [])
            ]

        return web.json_response(
            {
                "name": model.name,
                "versions": [model.version],
                "platform": cfg.get("platform") or cfg.get("backend", ""),
                "inputs": tensors("input"),
                "outputs": tensors("output"),
            }
        )

    async def model_ready(self, request: web.Request) -> web.Response:
        try:
            self._model(request)
        except RepositoryError:
            return _empty(400)
        return _empty(200)

    async def model_config(self, request: web.Request) -> web.Response:
        try:
            model = self._model(request)
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        return web.json_response(model.config)

    async def stats(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model")
        if name is None:
            models = self.repo.ready_models()
        else:
            try:
                models = [self._model(request)]
            except RepositoryError as exc:
                return _error(str(exc), exc.status)
        return web.json_response({"model_stats": [m.stats.as_json(m.name, m.version) for m in models]})

    # -- inference -------------------------------------------------------------------------------
    async def infer(self, request: web.Request) -> web.Response:
        received_ns = time.monotonic_ns()
        try:
            model = self._model(request)
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        body = await request.read()
        raw_len = request.headers.get(HEADER_LENGTH)
        try:
            header_len = int(raw_len) if raw_len is not None else None
            decoded = decode_request(body, header_len)
        except (TensorError, ValueError) as exc:
            return _error(str(exc), 400)
        try:
            outputs = await model.infer(decoded, received_ns)
        except InferError as exc:
            return _error(str(exc), exc.status)
        wanted = decoded.outputs
        if wanted is None:
            selected = [(name, arr, decoded.binary_output_default) for name, arr in outputs.items()]
        else:
            selected = []
            for out in wanted:
                if out.name not in outputs:
                    return _error(f"output '{out.name}' was not produced by model '{model.name}'", 500)
                selected.append((out.name, outputs[out.name], out.binary or decoded.binary_output_default))
        try:
            payload, header_length = encode_response(
                model_name=model.name,
                model_version=model.version,
                request_id=decoded.request_id,
                outputs=selected,
            )
        except TensorError as exc:
            return _error(str(exc), 500)
        if header_length is None:
            return web.Response(body=payload, content_type="application/json")
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )

    # -- model repository extension -------------------------------------------------------------
    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise RepositoryError(f"failed to parse the request JSON buffer: {exc}", 400) from None
        if not isinstance(doc, dict):
            raise RepositoryError("request JSON must be an object", 400)
        return doc

    async def repo_index(self, request: web.Request) -> web.Response:
        try:
            doc = await self._json_body(request)
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        return web.json_response(self.repo.index(bool(doc.get("ready", False))))

    async def repo_load(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        try:
            doc = await self._json_body(request)
            params = doc.get("parameters", {}) or {}
            if not isinstance(params, dict):
                raise RepositoryError("'parameters' must be an object", 400)
            config: str | None = None
            files = []
            for key, value in params.items():
                if key == "config":
                    if not isinstance(value, str):
                        raise RepositoryError("attempt to access JSON non-string as string", 400)
                    config = value
                elif key.startswith("file:"):
                    files.append(key)
                else:
                    raise RepositoryError(f"Unrecognized load parameter '{key}'.", 400)
            if files and config is None:
                raise RepositoryError(
                    f"failed to load '{name}', failed to poll from model repository: "
                    "model configuration must be provided with file override",
                    400,
                )
            if files:
                raise RepositoryError("file override is not supported by poolpilot-executor", 501)
            await self.repo.load(name, config)
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        return _empty(200)

    async def repo_unload(self, request: web.Request) -> web.Response:
        try:
            doc = await self._json_body(request)
            params = doc.get("parameters", {}) or {}
            for key in params:
                if key != "unload_dependents":
                    raise RepositoryError(f"Unrecognized unload parameter '{key}'.", 400)
            await self.repo.unload(request.match_info["model"])
        except RepositoryError as exc:
            return _error(str(exc), exc.status)
        return _empty(200)

    async def repo_named(self, request: web.Request) -> web.Response:
        return _error("'repository_name' specification is not supported", 400)

    # -- metrics -----------------------------------------------------------------------------------
    def _gauges(self) -> Iterable[tuple[str, str, Labels, float]]:
        pending: dict[Labels, float] = {}
        memory = 0
        for model in self.repo.live_models():
            pending[model.labels] = pending.get(model.labels, 0) + model.pending
            memory += model.memory_bytes
        for labels, value in pending.items():
            yield (
                PENDING,
                "Instantaneous number of pending requests awaiting execution per-model.",
                labels,
                value,
            )
        gpu: Labels = (("gpu_uuid", self.gpu_uuid),)
        yield "nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", gpu, self.busy.utilization
        yield "nv_gpu_memory_total_bytes", "GPU total memory, in bytes", gpu, float(GPU_MEMORY_TOTAL_BYTES)
        yield (
            "nv_gpu_memory_used_bytes",
            "GPU used memory, in bytes",
            gpu,
            float(min(memory, GPU_MEMORY_TOTAL_BYTES)),
        )

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics.render(),
            content_type="text/plain",
            headers={"X-Content-Type-Options": "nosniff"},
            charset="utf-8",
        )

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.metrics_interval_ms / 1000.0)
            self.busy.sample()

    # -- run ---------------------------------------------------------------------------------------
    async def load_startup_models(self) -> None:
        if self.settings.explicit:
            names = list(self.settings.load_models)
            if "*" in names:
                names = self.repo.model_names()
        else:
            names = self.repo.model_names()
        for name in names:
            await self.repo.load(name, startup=True)

    async def run(self, started: Callable[[ExecutorServer], None] | None = None) -> None:
        """Load startup models (a failure raises, like tritonserver's exit-on-error), then serve."""
        await self.load_startup_models()
        self._ready = True
        http_runner = web.AppRunner(self.http_app(), access_log=None)
        metrics_runner = web.AppRunner(self.metrics_app(), access_log=None)
        await http_runner.setup()
        await metrics_runner.setup()
        http_site = web.TCPSite(http_runner, self.settings.host, self.settings.http_port)
        metrics_site = web.TCPSite(metrics_runner, self.settings.host, self.settings.metrics_port)
        await http_site.start()
        await metrics_site.start()
        self.http_port = _bound_port(http_runner)
        self.metrics_port = _bound_port(metrics_runner)
        print(f"Started HTTPService at {self.settings.host}:{self.http_port}", flush=True)
        print(f"Started Metrics Service at {self.settings.host}:{self.metrics_port}", flush=True)
        sampler = asyncio.create_task(self._sample_loop())
        if started is not None:
            started(self)
        try:
            await asyncio.Event().wait()
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await http_runner.cleanup()
            await metrics_runner.cleanup()
            await self.repo.close()


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("server did not bind a TCP port")
