"""How a batch is executed: an emulated GPU latency curve, or a real Python-backend `model.py`.

Chosen by the model's config (see docs/executor.md):
- `parameters { key: "emulated_batch_latency_ms" value: { string_value: "A,B" } }` ⇒ each batch runs
  for `poolpilot.gpucurve.GpuCurve`'s latency, the simulator's curve: A + B·b ms for b inferences,
  plus `emulated_token_ms_per_1k` ms per 1k tokens of the batch's longest request above
  `emulated_token_ref` (default 2048) when the model has an integer input named TOKENS. Outputs are
  deterministic: output k is a copy of input k when their datatypes and dims agree, else zeros.
  The wait is an `asyncio.sleep`, so thousands of emulated inferences per second cost no threads.
  `emulated_instance_load_s` (default 0) is how long each instance takes to initialise (weights onto
  the GPU, warm-up): a load, a reload and an added instance take that long, as a real model does.
- `backend: "python"` ⇒ `<repo>/<model>/<version>/model.py`'s `TritonPythonModel` is imported with
  `poolpilot.executor.pb_utils` standing in for `triton_python_backend_utils`; one instance object
  per `instance_group` count (Triton runs one stub process per instance); one `execute(requests)`
  call per batch in a worker thread, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from poolpilot.executor import pb_utils
from poolpilot.executor.tensors import CONFIG_TO_DATATYPE, numpy_dtype
from poolpilot.gpucurve import DEFAULT_INSTANCE_INTERFERENCE, DEFAULT_TOKEN_REF, GpuCurve

EMULATED_LATENCY_KEY = "emulated_batch_latency_ms"
EMULATED_TOKEN_KEY = "emulated_token_ms_per_1k"
EMULATED_TOKEN_REF_KEY = "emulated_token_ref"
EMULATED_INTERFERENCE_KEY = "emulated_instance_interference"
RETIRED_TOKEN_KEY = "emulated_ms_per_token"  # summed tokens; replaced by the simulator's curve
EMULATED_MEMORY_KEY = "emulated_instance_memory_mb"
EMULATED_LOAD_KEY = "emulated_instance_load_s"
TOKENS_INPUT = "TOKENS"


def request_tokens(item: WorkItem) -> int:
    """The tokens a request carries: its integer `TOKENS` input, summed (0 without one)."""
    arr = item.inputs.get(TOKENS_INPUT)
    return int(arr.sum()) if arr is not None and arr.dtype.kind in "iu" else 0


class BackendError(Exception):
    """A model failed to load or to execute; `status` is the HTTP status Triton would use."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class WorkItem:
    """One request's share of a batch, as the backend sees it."""

    request_id: str
    inputs: dict[str, npt.NDArray[Any]]
    requested_outputs: list[str]
    parameters: dict[str, Any]


@dataclass
class ItemResult:
    """One request's answer: outputs by name, or an error message and HTTP status."""

    outputs: dict[str, npt.NDArray[Any]]
    error: str | None = None
    status: int = 200


@dataclass
class BatchOutcome:
    """Per-request results plus the batch's compute phases in nanoseconds (Triton's stats split)."""

    results: list[ItemResult]
    input_ns: int
    infer_ns: int
    output_ns: int


class Backend(Protocol):
    """What a loaded model version runs batches with."""

    async def start_instances(self, count: int) -> None: ...

    async def stop_instances(self, count: int) -> None: ...

    async def execute(self, batch: list[WorkItem]) -> BatchOutcome: ...

    def memory_bytes_per_instance(self) -> int: ...


_N = TypeVar("_N", int, float)


def _param(config: Mapping[str, Any], key: str) -> str | None:
    entry = config.get("parameters", {}).get(key)
    if entry is None:
        return None
    return str(entry.get("string_value", ""))


def is_emulated(config: Mapping[str, Any]) -> bool:
    return _param(config, EMULATED_LATENCY_KEY) is not None


def _memory_bytes(config: Mapping[str, Any]) -> int:
    raw = _param(config, EMULATED_MEMORY_KEY)
    try:
        return int(float(raw) * 2**20) if raw else 2**30
    except ValueError:
        raise BackendError(
            f"parameter {EMULATED_MEMORY_KEY} must be a number of MiB, got {raw!r}", 400
        ) from None


def _load_s(config: Mapping[str, Any]) -> float:
    raw = _param(config, EMULATED_LOAD_KEY)
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        seconds = -1.0
    if not 0.0 <= seconds <= 3600.0:
        raise BackendError(f"parameter {EMULATED_LOAD_KEY} must be 0..3600 seconds, got {raw!r}", 400)
    return seconds


def _number_param(config: Mapping[str, Any], key: str, cast: type[_N], default: _N) -> _N:
    """Parameter `key` parsed by `cast` (`default` when absent or empty); a bad value is a 400 naming it."""
    raw = _param(config, key)
    if not raw:
        return default
    try:
        return cast(raw)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise BackendError(f"parameter {key} must be {kind}, got {raw!r}", 400) from None


def _emulated_curve(config: Mapping[str, Any]) -> GpuCurve:
    """The model's `GpuCurve` from its parameters; errors name the parameter."""
    if _param(config, RETIRED_TOKEN_KEY) is not None:
        raise BackendError(
            f"parameter {RETIRED_TOKEN_KEY} was replaced by {EMULATED_TOKEN_KEY} (ms per 1k tokens of the"
            f" batch's longest request above {EMULATED_TOKEN_REF_KEY}); see docs/gpu-curve.md",
            400,
        )
    raw = _param(config, EMULATED_LATENCY_KEY) or ""
    parts = raw.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        a_ms, b_ms = float(parts[0]), float(parts[1])
    except ValueError:
        raise BackendError(
            f'parameter {EMULATED_LATENCY_KEY} must be "A,B" (ms: A + B*batch), got {raw!r}', 400
        ) from None
    per_1k = _number_param(config, EMULATED_TOKEN_KEY, float, 0.0)
    token_ref = _number_param(config, EMULATED_TOKEN_REF_KEY, int, DEFAULT_TOKEN_REF)
    shared = _number_param(config, EMULATED_INTERFERENCE_KEY, float, DEFAULT_INSTANCE_INTERFERENCE)
    try:
        return GpuCurve(a_ms, b_ms, per_1k, token_ref, shared)
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0]
        key = {
            "token_ms_per_1k": EMULATED_TOKEN_KEY,
            "token_ref": EMULATED_TOKEN_REF_KEY,
            "instance_interference": EMULATED_INTERFERENCE_KEY,
        }.get(field, EMULATED_LATENCY_KEY)
        raise BackendError(f"parameter {key}: {exc}", 400) from None


def _output_dims(spec: Mapping[str, Any]) -> list[int]:
    """An output's dims with variable (-1) dims emitted as 1."""
    return [d if d > 0 else 1 for d in spec.get("dims", [])]


class WakeLateness:
    """How late this process's timers fire, learned from each emulated execution, so the next one sleeps that
    much less: an emulated GPU must take the curve's time, not the curve's time plus the event loop's.

    Measured live (sandbox demo, 8 executors beside the control plane on 2 CPUs): the operator fitted
    42.5 + 30·batch ms to a declared 40 + 30·batch (the trace's long-request token term included) before
    this and 41.5–42.1 after: the rest was the timer's wake-up plus the loop's other work. An exponential
    average (`gain` per execution) of the lateness past the requested sleep; the sleep never goes below 0.
    """

    def __init__(self, gain: float = 0.1) -> None:
        if not 0 < gain <= 1:
            raise ValueError(f"gain must be in (0, 1], got {gain}")
        self.gain = gain
        self.late_s = 0.0

    def sleep_for(self, target_s: float) -> float:
        """What to ask the timer for, so that the execution takes `target_s` on average."""
        return max(0.0, target_s - self.late_s)

    def observe(self, slept_s: float, elapsed_s: float) -> None:
        """One execution asked the timer for `slept_s` and took `elapsed_s`."""
        late = max(0.0, elapsed_s - slept_s)
        self.late_s += self.gain * (late - self.late_s)


class EmulatedBackend:
    """Batch latency from `GpuCurve` (the simulator's), identity-like deterministic outputs."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.curve = _emulated_curve(config)
        self._batching = int(config.get("max_batch_size", 0)) > 0
        self._inputs = list(config.get("input", []))
        self._outputs = list(config.get("output", []))
        self._memory = _memory_bytes(config)
        self._running = 0  # executions in progress on this model's (emulated) GPU
        self._load_s = _load_s(config)
        self._lateness = WakeLateness()

    async def start_instances(self, count: int) -> None:
        """Each instance takes `emulated_instance_load_s` to initialise, one after another."""
        if self._load_s > 0:
            await asyncio.sleep(self._load_s * count)

    async def stop_instances(self, count: int) -> None:
        return None

    def memory_bytes_per_instance(self) -> int:
        return self._memory

    def latency_s(self, batch: list[WorkItem]) -> float:
        """Emulated compute time of this batch: the curve at its size and its longest request."""
        size = sum(_batch_dim(item, self._batching) for item in batch)
        max_tokens = 0
        if self.curve.token_ms_per_1k:
            max_tokens = max((request_tokens(item) for item in batch), default=0)
        return self.curve.batch_ms(size, max_tokens) / 1000.0

    async def execute(self, batch: list[WorkItem]) -> BatchOutcome:
        """Wait the batch's GPU time; with other executions of this model running (instance count > 1) the
        GPU is shared as the simulator shares it (`GpuCurve.shared_ms`, fixed when the execution starts)."""
        t0 = time.monotonic_ns()
        others = self._running
        self._running += 1
        slept_s = self._lateness.sleep_for(self.curve.shared_ms(self.latency_s(batch), others))
        try:
            await asyncio.sleep(slept_s)
        finally:
            self._running -= 1
        t1 = time.monotonic_ns()
        self._lateness.observe(slept_s, (t1 - t0) / 1e9)
        results = [ItemResult(self._outputs_for(item)) for item in batch]
        t2 = time.monotonic_ns()
        return BatchOutcome(results, input_ns=0, infer_ns=t1 - t0, output_ns=t2 - t1)

    def _outputs_for(self, item: WorkItem) -> dict[str, npt.NDArray[Any]]:
        rows = _batch_dim(item, self._batching)
        out: dict[str, npt.NDArray[Any]] = {}
        for k, spec in enumerate(self._outputs):
            name = spec["name"]
            if item.requested_outputs and name not in item.requested_outputs:
                continue
            datatype = CONFIG_TO_DATATYPE.get(spec.get("data_type", ""), "FP32")
            dtype = numpy_dtype(datatype)
            if k < len(self._inputs):
                src_spec = self._inputs[k]
                src = item.inputs.get(src_spec["name"])
                if (
                    src is not None
                    and src_spec.get("data_type") == spec.get("data_type")
                    and list(src_spec.get("dims", [])) == list(spec.get("dims", []))
                ):
                    out[name] = np.array(src, copy=True)
                    continue
            shape = ([rows] if self._batching else []) + _output_dims(spec)
            out[name] = (
                np.zeros(shape, dtype=dtype) if datatype != "BYTES" else np.full(shape, b"", dtype=object)
            )
        return out


def _batch_dim(item: WorkItem, batching: bool) -> int:
    if not batching:
        return 1
    for arr in item.inputs.values():
        return int(arr.shape[0]) if arr.ndim else 1
    return 1


_MODULE_COUNTER = itertools.count()


class PythonBackend:
    """Drives a Python-backend `TritonPythonModel`, one object per instance, in worker threads."""

    def __init__(self, config: Mapping[str, Any], *, repository: Path, model_name: str, version: str) -> None:
        self._config = dict(config)
        self._model_name = model_name
        self._version = version
        self._repository = repository
        path = repository / model_name / version / "model.py"
        if not path.is_file():
            raise BackendError(f"unable to find '{path}' for model '{model_name}'", 400)
        self._path = path
        self._module: ModuleType | None = None
        self._idle: list[Any] = []
        self._busy = 0
        self._retire = 0
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix=f"model-{model_name}")
        self._memory = _memory_bytes(config)

    def memory_bytes_per_instance(self) -> int:
        return self._memory

    def _import(self) -> ModuleType:
        pb_utils.install()
        name = f"poolpilot_model_{self._model_name}_{self._version}_{next(_MODULE_COUNTER)}"
        spec = importlib.util.spec_from_file_location(name, self._path)
        if spec is None or spec.loader is None:
            raise BackendError(f"cannot import {self._path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise BackendError(f"failed to load model '{self._model_name}': {exc}") from exc
        if not hasattr(module, "TritonPythonModel"):
            raise BackendError(f"{self._path} does not define TritonPythonModel")
        return module

    def _new_instance(self, index: int) -> Any:
        if self._module is None:
            self._module = self._import()
        obj = self._module.TritonPythonModel()
        args = {
            "model_config": json.dumps(self._config),
            # The CPU executor has no GPU: tell the model the truth so it picks the CPU device.
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
            "model_instance_name": f"{self._model_name}_0_{index}",
            "model_repository": str(self._repository / self._model_name),
            "model_version": self._version,
            "model_name": self._model_name,
        }
        if hasattr(obj, "initialize"):
            try:
                obj.initialize(args)
            except Exception as exc:
                raise BackendError(f"failed to initialize model '{self._model_name}': {exc}") from exc
        return obj

    async def start_instances(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        base = len(self._idle) + self._busy
        for i in range(count):
            obj = await loop.run_in_executor(self._pool, self._new_instance, base + i)
            self._idle.append(obj)

    async def stop_instances(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(count):
            if self._idle:
                obj = self._idle.pop()
                await loop.run_in_executor(self._pool, _finalize, obj)
            else:
                self._retire += 1  # finalize when a busy instance comes back

    async def close(self) -> None:
        await self.stop_instances(len(self._idle))
        self._pool.shutdown(wait=False)

    async def execute(self, batch: list[WorkItem]) -> BatchOutcome:
        if not self._idle:
            raise BackendError("no idle model instance (scheduler bug)")
        obj = self._idle.pop()
        self._busy += 1
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self._run, obj, batch)
        finally:
            self._busy -= 1
            if self._retire:
                self._retire -= 1
                await loop.run_in_executor(self._pool, _finalize, obj)
            else:
                self._idle.append(obj)

    def _run(self, obj: Any, batch: list[WorkItem]) -> BatchOutcome:
        t0 = time.monotonic_ns()
        requests = [
            pb_utils.InferenceRequest(
                inputs=[pb_utils.Tensor(name, arr) for name, arr in item.inputs.items()],
                request_id=item.request_id,
                requested_output_names=item.requested_outputs,
                parameters=json.dumps(item.parameters),
                model_name=self._model_name,
                model_version=int(self._version) if self._version.isdigit() else -1,
            )
            for item in batch
        ]
        t1 = time.monotonic_ns()
        try:
            responses = obj.execute(requests)
        except Exception as exc:
            t2 = time.monotonic_ns()
            fail = ItemResult(
                {}, f"Failed to process the request(s) for model '{self._model_name}', message: {exc}", 500
            )
            return BatchOutcome([fail] * len(batch), t1 - t0, t2 - t1, 0)
        t2 = time.monotonic_ns()
        if (
            not isinstance(responses, list)
            or len(responses) != len(batch)
            or any(r is None for r in responses)
        ):
            fail = ItemResult(
                {},
                "Failed to process the request(s) for model "
                f"'{self._model_name}': execute must return one response per request",
                500,
            )
            return BatchOutcome([fail] * len(batch), t1 - t0, t2 - t1, 0)
        results: list[ItemResult] = []
        for response in responses:
            err = response.error() if hasattr(response, "error") else None
            if err is not None:
                results.append(ItemResult({}, err.message(), _ERROR_STATUS.get(err.code(), 500)))
                continue
            results.append(
                ItemResult({t.name(): np.asarray(t.as_numpy()) for t in response.output_tensors()})
            )
        t3 = time.monotonic_ns()
        return BatchOutcome(results, t1 - t0, t2 - t1, t3 - t2)


def _finalize(obj: Any) -> None:
    if hasattr(obj, "finalize"):
        obj.finalize()


# pb_utils.TritonError code -> HTTP status (triton.md §2.1).
_ERROR_STATUS = {
    pb_utils.TritonError.INTERNAL: 500,
    pb_utils.TritonError.NOT_FOUND: 404,
    pb_utils.TritonError.INVALID_ARG: 400,
    pb_utils.TritonError.UNAVAILABLE: 503,
    pb_utils.TritonError.UNSUPPORTED: 501,
    pb_utils.TritonError.ALREADY_EXISTS: 409,
    pb_utils.TritonError.CANCELLED: 500,
    pb_utils.TritonError.UNKNOWN: 500,
}


def make_backend(config: Mapping[str, Any], *, repository: Path, model_name: str, version: str) -> Backend:
    """Pick the backend the config asks for (emulated parameter first, then `backend: "python"`)."""
    if is_emulated(config):
        return EmulatedBackend(config)
    if config.get("backend") == "python":
        return PythonBackend(config, repository=repository, model_name=model_name, version=version)
    raise BackendError(
        f"unsupported backend '{config.get('backend') or config.get('platform')}' for model '{model_name}': "
        f'poolpilot-executor runs backend "python" or models with parameter {EMULATED_LATENCY_KEY}',
        400,
    )
