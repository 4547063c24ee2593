"""One real `poolpilot-executor` process (tests, benchmarks, the sandbox's pods), and emulated models.

Why a subprocess: tests must see the executor exactly as a user does — a separate process behind
HTTP — and drive it only with `tritonclient`. Port 0 lets the executor pick its ports, read back
from its "Started HTTPService at host:port" lines, so parallel runs never race for a port; a pod
passes its own address and container ports instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from poolpilot.sandbox.processes import spawn, terminate


def write_emulated_model(
    repository: Path,
    name: str,
    *,
    latency_ms: tuple[float, float] = (1.0, 0.0),
    max_batch_size: int = 8,
    dynamic_batching: Mapping[str, Any] | None = None,
    max_queue_delay_us: int | None = None,
    instance_count: int = 1,
    dims: Sequence[int] = (4,),
    extra_parameters: Mapping[str, str] | None = None,
) -> Path:
    """Write `<repository>/<name>/config.pbtxt` (+ version dir 1) for an emulated-latency model.

    INPUT0 / OUTPUT0 FP32 of `dims`: the emulated backend returns OUTPUT0 = INPUT0.
    `dynamic_batching` is given in Triton's JSON form and rendered to text format; None ⇒ no block.
    `max_queue_delay_us` is shorthand for ``dynamic_batching={"max_queue_delay_microseconds": N}``.
    """
    if max_queue_delay_us is not None:
        if dynamic_batching is not None:
            raise ValueError("give dynamic_batching or max_queue_delay_us, not both")
        dynamic_batching = {"max_queue_delay_microseconds": max_queue_delay_us}
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    params = {"emulated_batch_latency_ms": f"{latency_ms[0]},{latency_ms[1]}", **(extra_parameters or {})}
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {max_batch_size}",
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }} ]',
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }} ]',
        f"instance_group [ {{ kind: KIND_GPU count: {instance_count} }} ]",
    ]
    if dynamic_batching is not None:
        lines.append("dynamic_batching " + _to_text(dynamic_batching))
    for key, value in params.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    (model_dir / "config.pbtxt").write_text("\n".join(lines) + "\n")
    return model_dir


def _to_text(value: Mapping[str, Any]) -> str:
    """Render a JSON-form message as protobuf text format (maps keyed by level become entries)."""
    parts: list[str] = []
    for key, item in value.items():
        if key == "priority_queue_policy":
            for level, policy in item.items():
                parts.append(f"priority_queue_policy {{ key: {int(level)} value: {_to_text(policy)} }}")
        elif isinstance(item, Mapping):
            parts.append(f"{key} {_to_text(item)}")
        elif isinstance(item, list):
            parts.append(f"{key}: [ {', '.join(json.dumps(v) for v in item)} ]")
        elif isinstance(item, bool):
            parts.append(f"{key}: {'true' if item else 'false'}")
        elif isinstance(item, str) and item.isupper():
            parts.append(f"{key}: {item}")  # enum name
        else:
            parts.append(f"{key}: {json.dumps(item)}")
    return "{ " + " ".join(parts) + " }"


class ExecutorProcess:
    """A ``poolpilot-executor`` subprocess; `url` is host:port as tritonclient wants it (no scheme).

    Ports 0 (the default) let the executor pick free ones. ``start()`` returns once the server and
    every model in `models` are ready (checked with ``tritonclient``, as for any Triton server).
    """

    def __init__(
        self,
        repository: str | Path,
        models: Sequence[str] = ("*",),
        *,
        explicit: bool = True,
        host: str = "127.0.0.1",
        http_port: int = 0,
        metrics_port: int = 0,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.repository = Path(repository)
        self.models = list(models)
        self.explicit = explicit
        self.host = host
        self.http_port = http_port
        self.metrics_port = metrics_port
        self.extra_args = list(extra_args)
        self.log_path = (
            Path(log_path)
            if log_path
            else self.repository.parent / f"executor-{os.getpid()}-{time.monotonic_ns()}.log"
        )
        self.env = dict(env) if env is not None else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def metrics_target(self) -> str:
        return f"{self.host}:{self.metrics_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.metrics_target}/metrics"

    def command(self) -> list[str]:
        """The argv: tritonserver's flags, as a pod's container command would pass them."""
        args = [
            sys.executable,
            "-m",
            "poolpilot.executor.cli",
            "--model-repository",
            str(self.repository),
            "--http-address",
            self.host,
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
        ]
        if self.explicit:
            args += ["--model-control-mode", "explicit"] + [f"--load-model={m}" for m in self.models]
        else:
            args += ["--model-control-mode", "none"]
        return args + self.extra_args

    def start(self, *, timeout_s: float = 60.0) -> ExecutorProcess:
        env = dict(os.environ) if self.env is None else dict(self.env)
        operator_dir = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = operator_dir + os.pathsep + env.get("PYTHONPATH", "")
        with self.log_path.open("wb") as log_file:
            self.process = spawn(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        try:
            self._wait_ready(time.monotonic() + timeout_s, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, deadline: float, timeout_s: float) -> None:
        import tritonclient.http as triton_http

        while not self._read_ports():
            self._check_alive(deadline, timeout_s)
            time.sleep(0.05)
        client = triton_http.InferenceServerClient(self.url, connection_timeout=2.0, network_timeout=5.0)
        named = [m for m in self.models if m != "*"] if self.explicit else []
        try:
            while True:
                self._check_alive(deadline, timeout_s)
                try:
                    if client.is_server_ready() and all(client.is_model_ready(m) for m in named):
                        return
                except Exception:  # not answering yet
                    pass
                time.sleep(0.1)
        finally:
            client.close()

    def _read_ports(self) -> bool:
        """Take the bound ports from the executor's startup lines; True once both are known."""
        http = metrics = ""
        for line in self.log().splitlines():
            if line.startswith("Started HTTPService at "):
                http = line.rsplit(" ", 1)[1]
            elif line.startswith("Started Metrics Service at "):
                metrics = line.rsplit(" ", 1)[1]
        if not (http and metrics):
            return False
        self.http_port = int(http.rsplit(":", 1)[1])
        self.metrics_port = int(metrics.rsplit(":", 1)[1])
        return True

    def _check_alive(self, deadline: float, timeout_s: float) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"executor exited with {self.process.returncode}:\n{self.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"executor not ready after {timeout_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self.process = self.process, None
        terminate(proc)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:]) or "(no log)"

    def __enter__(self) -> ExecutorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_executor(
    repository: Path,
    *,
    load: Sequence[str] = ("*",),
    explicit: bool = True,
    host: str = "127.0.0.1",
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 60.0,
) -> Iterator[ExecutorProcess]:
    """An :class:`ExecutorProcess` on free ports at `host` (loopback by default) until the block exits."""
    proc = ExecutorProcess(repository, load, explicit=explicit, host=host, extra_args=extra_args)
    proc.start(timeout_s=startup_timeout_s)
    try:
        yield proc
    finally:
        proc.stop()
