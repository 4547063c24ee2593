"""One loaded model version: request checks, the dynamic-batcher loop, execution, stats and metrics.

The batching rules are NOT here: they live once in `poolpilot.triton.batcher` (shared with the
fleet simulator). This module only drives a `BatchQueue` with the real clock: an asyncio task per
model calls `next_action(time.monotonic(), free_instances)` whenever a request arrives, an
instance frees up, or the batcher's `wake_at_s` passes, and runs each batch it gets on a free
instance (`instance_group.count` concurrent executions).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolpilot.executor.backends import Backend, BackendError, BatchOutcome, WorkItem, request_tokens
from poolpilot.executor.metrics import TOKENS_COUNTER, BusyTracker, Labels, MetricsRegistry
from poolpilot.executor.tensors import CONFIG_TO_DATATYPE, DecodedRequest
from poolpilot.triton.batcher import QUEUE_FULL_MESSAGE, TIMEOUT_MESSAGE, BatcherConfig, BatchQueue


class InferError(Exception):
    """An inference that failed; `status` is the HTTP status, `reason` the failure metric label."""

    def __init__(self, message: str, status: int = 400, reason: str = "OTHER") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass
class _Pending:
    """A request between arrival and response."""

    item: WorkItem
    batch_size: int
    future: asyncio.Future[dict[str, Any]]
    received_ns: int
    enqueued_ns: int = 0


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class ModelStats:
    """Triton's statistics extension for one model version (reset when a reload swaps models)."""

    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batch_stats: dict[int, tuple[_Duration, _Duration, _Duration]] = field(default_factory=dict)

    def as_json(self, name: str, version: str) -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_json(),
                "fail": self.fail.as_json(),
                "queue": self.queue.as_json(),
                "compute_input": self.compute_input.as_json(),
                "compute_infer": self.compute_infer.as_json(),
                "compute_output": self.compute_output.as_json(),
                "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": d_in.as_json(),
                    "compute_infer": d_inf.as_json(),
                    "compute_output": d_out.as_json(),
                }
                for size, (d_in, d_inf, d_out) in sorted(self.batch_stats.items())
            ],
            "memory_usage": [],
        }


def batcher_config_for(config: Mapping[str, Any]) -> BatcherConfig:
    """The shared batcher's settings for a model; no `dynamic_batching` ⇒ one request per execution."""
    if "dynamic_batching" in config:
        return BatcherConfig.from_model_config(config)
    # Triton without a scheduler block still accepts requests up to max_batch_size, one per run:
    # a preferred size of 1 with no delay makes the shared batcher send each request alone.
    return BatcherConfig(
        max_batch_size=max(1, int(config.get("max_batch_size", 0))), preferred_batch_sizes=(1,)
    )


def instance_count(config: Mapping[str, Any]) -> int:
    return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1


class LoadedModel:
    """A model version that is (being) served: owns its queue, scheduler task, backend and stats."""

    def __init__(
        self,
        *,
        name: str,
        version: str,
        config: dict[str, Any],
        backend: Backend,
        metrics: MetricsRegistry,
        busy: BusyTracker,
    ) -> None:
        self.name = name
        self.version = version
        self.config = config
        self.backend = backend
        self.labels: Labels = (("model", name), ("version", version))
        self._metrics = metrics
        self._busy_tracker = busy
        self.stats = ModelStats()
        self._max_batch_size = int(config.get("max_batch_size", 0))
        self._inputs = {t["name"]: t for t in config.get("input", [])}
        self._outputs = [t["name"] for t in config.get("output", [])]
        self._priority_levels = int(config.get("dynamic_batching", {}).get("priority_levels", 0))
        self.queue: BatchQueue[_Pending] = BatchQueue(batcher_config_for(config))
        self.instances = instance_count(config)
        self._running = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Initialise every instance (raises BackendError on failure), then start scheduling."""
        await self.backend.start_instances(self.instances)
        self._task = asyncio.create_task(self._schedule(), name=f"batcher-{self.name}")

    async def set_instances(self, count: int) -> None:
        """In-place instance-group update (triton.md §2.3): add or retire instances, keep the queue."""
        if count > self.instances:
            await self.backend.start_instances(count - self.instances)
        elif count < self.instances:
            await self.backend.stop_instances(self.instances - count)
        self.instances = count
        self._wake.set()

    async def drain_and_stop(self) -> None:
        """Let queued and in-flight requests finish (they hold the old model, as in Triton), then stop."""
        while len(self.queue) or self._running:
            self._idle.clear()
            self._wake.set()
            await self._idle.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.backend.stop_instances(self.instances)
        close = getattr(self.backend, "close", None)
        if close is not None:
            await close()

    @property
    def pending(self) -> int:
        return len(self.queue)

    @property
    def memory_bytes(self) -> int:
        return self.instances * self.backend.memory_bytes_per_instance()

    # -- requests ----------------------------------------------------------------------------
    def check(self, request: DecodedRequest) -> int:
        """Check a request against the config (Triton's InferenceRequest::Normalize); return batch size."""
        batch_size = 1
        given = set(request.inputs)
        for name in given - set(self._inputs):
            raise InferError(f"unexpected inference input '{name}' for model '{self.name}'")
        for name, spec in self._inputs.items():
            if name not in request.inputs:
                if spec.get("optional"):
                    continue
                raise InferError(
                    f"expected {len(self._inputs)} inputs but got {len(request.inputs)} inputs for model "
                    f"'{self.name}'. Got input(s) {sorted(given)}, but missing required input(s) ['{name}']"
                )
            array = request.inputs[name]
            expected_type = CONFIG_TO_DATATYPE.get(spec.get("data_type", ""), "")
            if request.datatypes[name] != expected_type:
                raise InferError(
                    f"inference input '{name}' data-type is '{request.datatypes[name]}', but model "
                    f"'{self.name}' expects '{expected_type}'"
                )
            dims = [int(d) for d in spec.get("dims", [])]
            shape = list(array.shape)
            if self._max_batch_size > 0:
                if not shape:
                    raise InferError(f"input '{name}' for model '{self.name}' is missing the batch dimension")
                this_batch, shape = shape[0], shape[1:]
                if this_batch < 1 or this_batch > self._max_batch_size:
                    raise InferError(
                        f"inference request batch-size must be <= {self._max_batch_size} for '{self.name}'"
                    )
                batch_size = this_batch
            if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape, strict=False)):
                expected = ([-1] if self._max_batch_size > 0 else []) + dims
                raise InferError(
                    f"unexpected shape for input '{name}' for model '{self.name}'. Expected {expected}, "
                    f"got {list(array.shape)}"
                )
        if request.outputs is not None:
            for out in request.outputs:
                if out.name not in self._outputs:
                    raise InferError(f"unexpected inference output '{out.name}' for model '{self.name}'")
        return batch_size

    async def infer(self, request: DecodedRequest, received_ns: int) -> dict[str, Any]:
        """Queue a checked request and wait for its outputs; raises InferError."""
        batch_size = self.check(request)
        priority = _uint_param(request.parameters, "priority")
        if self._priority_levels == 0 or priority > self._priority_levels:
            priority = 0  # Triton: out-of-range priority means the model's default level
        timeout_us = request.parameters.get("timeout")
        timeout = _uint_param(request.parameters, "timeout") if timeout_us is not None else None
        loop = asyncio.get_running_loop()
        pending = _Pending(
            item=WorkItem(
                request_id=request.request_id,
                inputs=request.inputs,
                requested_outputs=[o.name for o in request.outputs] if request.outputs is not None else [],
                parameters=request.parameters,
            ),
            batch_size=batch_size,
            future=loop.create_future(),
            received_ns=received_ns,
            enqueued_ns=time.monotonic_ns(),
        )
        accepted = self.queue.enqueue(
            pending,
            now_s=pending.enqueued_ns / 1e9,
            batch_size=batch_size,
            priority=priority,
            timeout_us=timeout,
        )
        if not accepted:
            # FAILED_ENQUEUE: answered synchronously; Triton does not count it in request_failure.
            raise InferError(QUEUE_FULL_MESSAGE, status=503, reason="")
        self._wake.set()
        return await pending.future

    # -- scheduling ----------------------------------------------------------------------------
    async def _schedule(self) -> None:
        while True:
            self._wake.clear()
            now_ns = time.monotonic_ns()
            action = self.queue.next_action(now_ns / 1e9, self.instances - self._running)
            for rejected in action.rejected:
                self._fail(rejected, InferError(TIMEOUT_MESSAGE, status=503, reason="REJECTED"), now_ns)
            if action.execute:
                self._running += 1
                self._busy_tracker.start()
                task = asyncio.create_task(self._run_batch(list(action.execute), now_ns))
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)
                continue
            if not len(self.queue) and not self._running:
                self._idle.set()
            if action.wake_at_s is None:
                await self._wake.wait()
            else:
                delay = action.wake_at_s - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)

    async def _run_batch(self, batch: list[_Pending], start_ns: int) -> None:
        try:
            outcome = await self.backend.execute([p.item for p in batch])
        except BackendError as exc:
            end_ns = time.monotonic_ns()
            for p in batch:
                self._fail(p, InferError(str(exc), status=exc.status, reason="BACKEND"), end_ns)
            outcome = None
        except Exception as exc:  # a model bug must fail its requests, not the scheduler
            end_ns = time.monotonic_ns()
            for p in batch:
                self._fail(p, InferError(f"internal error: {exc}", status=500, reason="BACKEND"), end_ns)
            outcome = None
        finally:
            self._running -= 1
            self._busy_tracker.stop()
            self._wake.set()
        if outcome is not None:
            self._complete(batch, outcome, start_ns)

    def _complete(self, batch: list[_Pending], outcome: BatchOutcome, start_ns: int) -> None:
        end_ns = time.monotonic_ns()
        m, lbl = self._metrics, self.labels
        size = sum(p.batch_size for p in batch)
        st = self.stats
        st.execution_count += 1
        st.last_inference_ms = int(time.time() * 1000)
        m.inc("nv_inference_exec_count", lbl)
        d_in, d_inf, d_out = st.batch_stats.setdefault(size, (_Duration(), _Duration(), _Duration()))
        d_in.add(outcome.input_ns)
        d_inf.add(outcome.infer_ns)
        d_out.add(outcome.output_ns)
        for p, result in zip(batch, outcome.results, strict=True):
            if result.error is not None:
                self._fail(p, InferError(result.error, status=result.status, reason="BACKEND"), end_ns)
                continue
            queue_ns = start_ns - p.enqueued_ns
            total_ns = end_ns - p.received_ns
            st.success.add(total_ns)
            st.queue.add(queue_ns)
            st.compute_input.add(outcome.input_ns)
            st.compute_infer.add(outcome.infer_ns)
            st.compute_output.add(outcome.output_ns)
            st.inference_count += p.batch_size
            m.inc("nv_inference_request_success", lbl)
            m.inc("nv_inference_count", lbl, p.batch_size)
            tokens = request_tokens(p.item)
            if tokens:
                m.inc(TOKENS_COUNTER, lbl, tokens)
            for name, ns in (
                ("nv_inference_request_duration_us", total_ns),
                ("nv_inference_queue_duration_us", queue_ns),
                ("nv_inference_compute_input_duration_us", outcome.input_ns),
                ("nv_inference_compute_infer_duration_us", outcome.infer_ns),
                ("nv_inference_compute_output_duration_us", outcome.output_ns),
            ):
                m.inc(name, lbl, ns // 1000)  # Triton adds whole microseconds
                m.observe(name.replace("_duration_us", "_summary_us"), lbl, ns // 1000)
            if not p.future.done():
                p.future.set_result(result.outputs)

    def _fail(self, p: _Pending, error: InferError, now_ns: int) -> None:
        self.stats.fail.add(now_ns - p.received_ns)
        self._metrics.inc("nv_inference_request_failure", (*self.labels, ("reason", error.reason)))
        if not p.future.done():
            p.future.set_exception(error)


def _uint_param(params: Mapping[str, Any], key: str) -> int:
    value = params.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise InferError(f"parameter '{key}' must be a non-negative integer, got {value!r}")
    return int(value)
