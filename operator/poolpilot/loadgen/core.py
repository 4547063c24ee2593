"""``poolpilot loadgen``: replay a trace open-loop against Triton-protocol servers.

Why open-loop: a closed-loop client (N workers, each waiting for its response) slows down when the
server does, which hides exactly the latency PoolPilot must control. Here every request leaves at
its scheduled offset whatever earlier responses do; the generator reports how late it was itself
(lateness) so a run whose *client* fell behind is visible, not silently mistaken for a slow server.

Requests go through ``tritonclient.http.aio`` round-robin over one or more ``--url``s. The end-to-end
latency of successful requests is exported as a Prometheus histogram (the "router side" p99, with
buckets fine enough for ms-scale objectives), with counters by status; ``--csv`` writes one row per
request. Schedules come from :mod:`poolpilot.loadgen.schedule`, built on :mod:`poolpilot.loads` (the
simulator's loads), and requests are routed by :mod:`poolpilot.loadgen.routing`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import prometheus_client
import tritonclient.http.aio as triton_aio
from tritonclient.utils import InferenceServerException

from poolpilot import loads
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.loadgen.routing import RoutingError, ServiceRouter, StaticRouter
from poolpilot.loadgen.schedule import Arrival

LATENCY_BUCKETS_S: Final[tuple[float, ...]] = (
    *(0.001, 0.002, 0.003, 0.004),
    *(round(0.005 * i, 3) for i in range(1, 61)),  # 5 ms steps to 300 ms
    *(0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0),
    *(30.0, 60.0),
)
"""End-to-end latency buckets (seconds): fine up to 300 ms where p99 objectives live, then coarser."""

LATENESS_BUCKETS_S: Final[tuple[float, ...]] = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
)  # fmt: skip

STATUS_SUCCESS: Final = "success"
STATUS_TIMEOUT: Final = "timeout"
STATUS_CONNECTION: Final = "connection_error"
STATUS_DROPPED: Final = "dropped"  # shed by the generator itself: --max-in-flight reached
STATUS_CLIENT_ERROR: Final = "client_error"
STATUS_NO_ENDPOINT: Final = "no_ready_endpoint"  # --service had no Ready endpoint at send time


class LoadgenError(ValueError):
    """Bad configuration or an unusable target model; the message names the option."""


@dataclass(frozen=True, slots=True)
class LoadgenConfig:
    """How to send (the *when* is the schedule)."""

    urls: tuple[str, ...]
    model: str
    model_version: str = ""
    batch_size: int = 1
    """Rows per request along the batch dimension (for models with max_batch_size > 0)."""
    request_timeout_s: float = 30.0
    max_in_flight: int = 4096
    """Open-loop, but bounded: past this many outstanding requests new ones are dropped and counted."""
    seed: int = 0
    service: str | None = None
    """NAMESPACE/NAME: send to the Service's ready endpoints (EndpointSlices) instead of `urls`."""
    kubeconfig: str | None = None

    def __post_init__(self) -> None:
        if self.service is not None:
            if self.urls:
                raise LoadgenError("--url and --service: choose one")
        elif not self.urls:
            raise LoadgenError("--url: at least one host:port is required (or --service)")
        for url in self.urls:
            if "://" in url or ":" not in url:
                raise LoadgenError(f"--url must be host:port without a scheme, got {url!r}")
        if not self.model:
            raise LoadgenError("--model must not be empty")
        if self.batch_size < 1:
            raise LoadgenError(f"--batch-size must be >= 1, got {self.batch_size}")
        if not self.request_timeout_s > 0:
            raise LoadgenError(f"--request-timeout-s must be > 0, got {self.request_timeout_s}")
        if self.max_in_flight < 1:
            raise LoadgenError(f"--max-in-flight must be >= 1, got {self.max_in_flight}")


@dataclass(slots=True)
class RequestRecord:
    """One request as the CSV reports it; times are seconds since the run's start."""

    index: int
    url: str
    intended_send_s: float
    send_s: float
    latency_ms: float
    status: str


@dataclass(frozen=True, slots=True)
class LoadgenReport:
    """What a run did, for humans (stderr) and scripts (one JSON line on stdout)."""

    scheduled: int
    sent: int
    succeeded: int
    statuses: dict[str, int]
    span_s: float
    intended_rate_rps: float
    achieved_send_rate_rps: float
    lateness_p50_ms: float
    lateness_p99_ms: float
    lateness_max_ms: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    stopped_early: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(slots=True)
class LoadgenMetrics:
    """The generator's own Prometheus series, in a registry of its own (several runs per process)."""

    registry: prometheus_client.CollectorRegistry = field(default_factory=prometheus_client.CollectorRegistry)
    latency: prometheus_client.Histogram = field(init=False)
    requests: prometheus_client.Counter = field(init=False)
    lateness: prometheus_client.Histogram = field(init=False)
    in_flight: prometheus_client.Gauge = field(init=False)

    def __post_init__(self) -> None:
        self.latency = prometheus_client.Histogram(
            "poolpilot_loadgen_request_duration_seconds",
            "End-to-end latency of successful requests as the client sees them (router-side p99).",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.requests = prometheus_client.Counter(
            "poolpilot_loadgen_requests",
            "Requests finished, by status (success, HTTP code, timeout, connection_error, dropped).",
            ["model", "status"],
            registry=self.registry,
        )
        self.lateness = prometheus_client.Histogram(
            "poolpilot_loadgen_send_lateness_seconds",
            "How late the generator sent each request after its scheduled time.",
            ["model"],
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.in_flight = prometheus_client.Gauge(
            "poolpilot_loadgen_in_flight_requests",
            "Requests sent and not yet answered.",
            ["model"],
            registry=self.registry,
        )


TOKENS_INPUT: Final = "TOKENS"
"""An integer input of this name carries each arrival's token count (context + generated), which
token-aware emulated models (``emulated_token_ms_per_1k``) charge for; other inputs get random data."""


@dataclass(frozen=True, slots=True)
class RequestInputs:
    """Inputs shared by every request, plus the shape/datatype of a per-request TOKENS input."""

    shared: tuple[triton_aio.InferInput, ...]
    tokens: tuple[list[int], str] | None = None

    def for_arrival(self, arrival: Arrival) -> list[triton_aio.InferInput]:
        if self.tokens is None:
            return list(self.shared)
        shape, datatype = self.tokens
        inp = triton_aio.InferInput(TOKENS_INPUT, shape, datatype)
        total = arrival.context_tokens + arrival.generated_tokens
        inp.set_data_from_numpy(np.full(shape, total, dtype=_NUMPY_TYPES[datatype]), binary_data=True)
        return [*self.shared, inp]


_NUMPY_TYPES: Final[dict[str, Any]] = {
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
}  # fmt: skip


async def build_inputs(client: triton_aio.InferenceServerClient, config: LoadgenConfig) -> RequestInputs:
    """Inputs matching the model's metadata: random data, ``[batch_size, *dims]`` for batching models.

    Built once and reused: the request body is serialised per call and never mutates them.
    """
    try:
        meta = await client.get_model_metadata(config.model, config.model_version)
        model_config = await client.get_model_config(config.model, config.model_version)
    except InferenceServerException as exc:
        raise LoadgenError(f"--model {config.model!r}: cannot read metadata/config: {exc.message()}") from exc
    max_batch_size = int(model_config.get("max_batch_size", 0))
    if max_batch_size == 0 and config.batch_size != 1:
        raise LoadgenError(f"--batch-size {config.batch_size}: model {config.model!r} does not batch")
    if 0 < max_batch_size < config.batch_size:
        raise LoadgenError(f"--batch-size {config.batch_size} exceeds max_batch_size {max_batch_size}")
    rng = np.random.default_rng(config.seed)
    inputs: list[triton_aio.InferInput] = []
    tokens: tuple[list[int], str] | None = None
    for spec in meta.get("inputs", []):
        # Metadata shapes include the batch dim as -1 for batching models.
        dims = [int(d) for d in spec["shape"]]
        if max_batch_size > 0:
            dims = [config.batch_size, *dims[1:]]
        shape = [d if d > 0 else 1 for d in dims]
        datatype = spec["datatype"]
        if spec["name"] == TOKENS_INPUT and datatype.startswith(("INT", "UINT")):
            tokens = (shape, datatype)
            continue
        inp = triton_aio.InferInput(spec["name"], shape, datatype)
        inp.set_data_from_numpy(_random_array(rng, shape, datatype), binary_data=True)
        inputs.append(inp)
    if not inputs and tokens is None:
        raise LoadgenError(f"--model {config.model!r}: metadata lists no inputs")
    return RequestInputs(tuple(inputs), tokens)


def _random_array(rng: np.random.Generator, shape: list[int], datatype: str) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.full(shape, b"poolpilot", dtype=np.object_)
    if datatype == "BOOL":
        return rng.random(shape) < 0.5
    np_type = _NUMPY_TYPES.get(datatype)
    if np_type is None:
        raise LoadgenError(f"input datatype {datatype!r} is not supported by the load generator")
    if np.issubdtype(np_type, np.floating):
        return rng.standard_normal(shape).astype(np_type)
    return rng.integers(0, 100, size=shape).astype(np_type)


async def run(
    config: LoadgenConfig,
    schedule: Sequence[Arrival],
    *,
    metrics: LoadgenMetrics | None = None,
    stop: asyncio.Event | None = None,
    records: list[RequestRecord] | None = None,
) -> LoadgenReport:
    """Send ``schedule`` open-loop and wait for every answer (or its timeout).

    ``stop`` ends dispatching early (in-flight requests still finish); ``records``, if given,
    receives one :class:`RequestRecord` per request in send order.
    """
    metrics = metrics or LoadgenMetrics()
    records = records if records is not None else []

    def make_client(url: str) -> triton_aio.InferenceServerClient:
        return triton_aio.InferenceServerClient(
            url, conn_limit=config.max_in_flight, conn_timeout=config.request_timeout_s
        )

    router: StaticRouter | ServiceRouter = (
        ServiceRouter(config.service, config.kubeconfig, make_client)
        if config.service is not None
        else StaticRouter(config.urls, make_client)
    )
    try:
        try:
            await router.start()
        except RoutingError as exc:
            raise LoadgenError(str(exc)) from None
        inputs = await build_inputs(router.any_client(), config)
        return await _Sender(config, router, inputs, metrics, records).run(schedule, stop)
    finally:
        await router.close()


class _Sender:
    """The dispatch loop and per-request bookkeeping of one run."""

    def __init__(
        self,
        config: LoadgenConfig,
        router: StaticRouter | ServiceRouter,
        inputs: RequestInputs,
        metrics: LoadgenMetrics,
        records: list[RequestRecord],
    ) -> None:
        self._config = config
        self._router = router
        self._inputs = inputs
        self._records = records
        self._latency = metrics.latency.labels(model=config.model)
        self._lateness = metrics.lateness.labels(model=config.model)
        self._in_flight_gauge = metrics.in_flight.labels(model=config.model)
        self._requests = metrics.requests
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._lateness_s: list[float] = []

    async def run(self, schedule: Sequence[Arrival], stop: asyncio.Event | None) -> LoadgenReport:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time() + 0.01
        stopped_early = False
        sent = 0
        for i, arrival in enumerate(schedule):
            if stop is not None and stop.is_set():
                stopped_early = True
                break
            target = self._t0 + arrival.offset_s
            delay = target - loop.time()
            if delay > 0:
                if stop is None:
                    await asyncio.sleep(delay)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=delay)
                    if stop.is_set():
                        stopped_early = True
                        break
            now = loop.time()
            lateness_s = max(0.0, now - target)
            self._lateness_s.append(lateness_s)
            self._lateness.observe(lateness_s)
            sent += 1
            self._start(i, arrival, target - self._t0, now - self._t0)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        return self._report(len(schedule), sent, schedule, stopped_early)

    def _start(self, index: int, arrival: Arrival, intended_s: float, send_s: float) -> None:
        picked = self._router.pick()
        record = RequestRecord(index, picked[0] if picked else "", intended_s, send_s, math.nan, "")
        self._records.append(record)
        if picked is None:
            self._finish(record, STATUS_NO_ENDPOINT, None)
            return
        client = picked[1]
        if self._in_flight >= self._config.max_in_flight:
            self._finish(record, STATUS_DROPPED, None)
            return
        task = asyncio.create_task(self._send(client, arrival, record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(
        self, client: triton_aio.InferenceServerClient, arrival: Arrival, record: RequestRecord
    ) -> None:
        loop = asyncio.get_running_loop()
        inputs = self._inputs.for_arrival(arrival)
        self._in_flight += 1
        self._in_flight_gauge.set(self._in_flight)
        start = loop.time()
        status = STATUS_SUCCESS
        try:
            await client.infer(
                self._config.model,
                inputs,
                model_version=self._config.model_version,
            )
        except InferenceServerException as exc:
            status = exc.status() or STATUS_CLIENT_ERROR
        except TimeoutError:
            status = STATUS_TIMEOUT
        except OSError:  # aiohttp.ClientConnectionError derives from OSError
            status = STATUS_CONNECTION
        except Exception:  # the aiohttp layer raises others (e.g. payload errors)
            status = STATUS_CLIENT_ERROR
        finally:
            self._in_flight -= 1
            self._in_flight_gauge.set(self._in_flight)
        self._finish(record, status, loop.time() - start)

    def _finish(self, record: RequestRecord, status: str, latency_s: float | None) -> None:
        record.status = status
        if latency_s is not None:
            record.latency_ms = latency_s * 1e3
            if status == STATUS_SUCCESS:
                self._latency.observe(latency_s)
        self._requests.labels(model=self._config.model, status=status).inc()

    def _report(
        self, scheduled: int, sent: int, schedule: Sequence[Arrival], stopped_early: bool
    ) -> LoadgenReport:
        statuses = Counter(r.status for r in self._records)
        ok_latency = np.array([r.latency_ms for r in self._records if r.status == STATUS_SUCCESS])
        sends = [r.send_s for r in self._records]
        span_s = (sends[-1] - sends[0]) if len(sends) >= 2 else 0.0
        intended = loadgen_schedule.mean_rate_rps(schedule[:sent])
        lateness_ms = np.array(self._lateness_s) * 1e3
        return LoadgenReport(
            scheduled=scheduled,
            sent=sent,
            succeeded=statuses.get(STATUS_SUCCESS, 0),
            statuses=dict(sorted(statuses.items())),
            span_s=span_s,
            intended_rate_rps=intended,
            achieved_send_rate_rps=(sent - 1) / span_s if span_s > 0 else 0.0,
            lateness_p50_ms=_pct(lateness_ms, 50),
            lateness_p99_ms=_pct(lateness_ms, 99),
            lateness_max_ms=float(lateness_ms.max()) if lateness_ms.size else 0.0,
            latency_p50_ms=_pct(ok_latency, 50),
            latency_p90_ms=_pct(ok_latency, 90),
            latency_p99_ms=_pct(ok_latency, 99),
            latency_max_ms=float(ok_latency.max()) if ok_latency.size else math.nan,
            stopped_early=stopped_early,
        )


def _pct(values: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


def write_csv(path: str | Path, records: Sequence[RequestRecord]) -> None:
    """One row per request: index, url, intended/actual send time (s), latency (ms), status."""
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["index", "url", "intended_send_s", "send_s", "latency_ms", "status"])
        for r in records:
            latency = "" if math.isnan(r.latency_ms) else f"{r.latency_ms:.3f}"
            writer.writerow(
                [r.index, r.url, f"{r.intended_send_s:.6f}", f"{r.send_s:.6f}", latency, r.status]
            )


# ---- command line -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target")
    target.add_argument(
        "--url", action="append", dest="urls", metavar="HOST:PORT",
        help="Triton HTTP endpoint (repeatable: requests go round-robin); default localhost:8000",
    )  # fmt: skip
    target.add_argument(
        "--service", metavar="NAMESPACE/NAME",
        help="send to the Service's ready endpoints (EndpointSlices, re-read every 2 s), as kube-proxy would",
    )  # fmt: skip
    target.add_argument(
        "--kubeconfig", help="kubeconfig for --service (default: $KUBECONFIG, ~/.kube/config)"
    )
    target.add_argument("--model", required=True, help="model name")
    target.add_argument("--model-version", default="", help="model version (default: server's choice)")
    target.add_argument("--batch-size", type=int, default=1, help="rows per request (default 1)")
    target.add_argument("--request-timeout-s", type=float, default=30.0)
    target.add_argument("--max-in-flight", type=int, default=4096, help="past this, new requests are dropped")

    load = parser.add_argument_group("load (choose --trace or --synthetic)")
    source = load.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--trace", type=Path, help="Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)"
    )
    source.add_argument(
        "--synthetic", choices=loads.LOAD_SHAPES, help="the simulator's seeded shape (poolpilot.loads)"
    )
    load.add_argument(
        "--rate-scale", type=float, default=1.0,
        help="trace: compress time by this factor; synthetic: base rate = 5.5 req/s × this (as simulate)",
    )  # fmt: skip
    load.add_argument("--start-offset-s", type=float, default=0.0, help="trace: skip this much trace time")
    load.add_argument(
        "--rate", type=float, default=None, help="synthetic: base rate in requests/s instead of --rate-scale"
    )
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--duration", type=float, default=60.0, help="seconds of schedule to send (bounded)")
    load.add_argument("--max-requests", type=int, default=None, help="stop after this many requests")

    out = parser.add_argument_group("output")
    out.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    out.add_argument("--metrics-addr", default="0.0.0.0")
    out.add_argument("--linger-s", type=float, default=0.0, help="keep /metrics up this long after the run")
    out.add_argument("--csv", type=Path, default=None, help="write one row per request here")
    out.add_argument(
        "--json", type=Path, default=None, help="write the summary here (also printed on stdout)"
    )


def schedule_from_args(args: argparse.Namespace) -> list[Arrival]:
    if args.trace is not None:
        return loadgen_schedule.read_azure_trace(
            args.trace,
            rate_scale=args.rate_scale,
            start_offset_s=args.start_offset_s,
            duration_s=args.duration,
            max_requests=args.max_requests,
        )
    return loadgen_schedule.synthetic(
        args.synthetic,
        duration_s=args.duration,
        seed=args.seed,
        rate_scale=args.rate_scale,
        base_rps=args.rate,
        token_source=loads.load_default_tokens(),
        max_requests=args.max_requests,
    )


def config_from_args(args: argparse.Namespace) -> LoadgenConfig:
    return LoadgenConfig(
        urls=tuple(args.urls or ([] if args.service else ["localhost:8000"])),
        service=args.service,
        kubeconfig=args.kubeconfig,
        model=args.model,
        model_version=args.model_version,
        batch_size=args.batch_size,
        request_timeout_s=args.request_timeout_s,
        max_in_flight=args.max_in_flight,
        seed=args.seed,
    )


def main(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        schedule = schedule_from_args(args)
    except (LoadgenError, loads.LoadError, OSError) as exc:
        print(f"poolpilot loadgen: {exc}", file=sys.stderr)
        return 2
    metrics = LoadgenMetrics()
    server = None
    if args.metrics_port is not None:
        server, _thread = prometheus_client.start_http_server(
            args.metrics_port, addr=args.metrics_addr, registry=metrics.registry
        )
    records: list[RequestRecord] = []
    try:
        report = asyncio.run(run(config, schedule, metrics=metrics, records=records))
    except LoadgenError as exc:
        print(f"poolpilot loadgen: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None and args.linger_s > 0:
            time.sleep(args.linger_s)
        if server is not None:
            server.shutdown()
            server.server_close()
    if args.csv is not None:
        write_csv(args.csv, records)
    if args.json is not None:
        args.json.write_text(report.to_json() + "\n")
    print(_human(report), file=sys.stderr)
    print(report.to_json())
    return 0


def _human(r: LoadgenReport) -> str:
    return (
        f"sent {r.sent}/{r.scheduled} over {r.span_s:.1f}s: intended {r.intended_rate_rps:.1f} req/s, "
        f"achieved {r.achieved_send_rate_rps:.1f} req/s; lateness p50 {r.lateness_p50_ms:.2f} ms, "
        f"p99 {r.lateness_p99_ms:.2f} ms, max {r.lateness_max_ms:.2f} ms\n"
        f"statuses {r.statuses}; latency p50 {r.latency_p50_ms:.2f} ms, p90 {r.latency_p90_ms:.2f} ms, "
        f"p99 {r.latency_p99_ms:.2f} ms, max {r.latency_max_ms:.2f} ms"
    )
