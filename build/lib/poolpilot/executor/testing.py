"""Start a real `poolpilot-executor` process for tests and benchmarks, and write emulated models.

Why a subprocess: the conformance tests must see the executor exactly as a user does — a separate
process behind HTTP — and drive it only with `tritonclient`. Ports are chosen by the executor
(`--http-port 0`) and read back from its "Started HTTPService at host:port" line, so parallel
runs never race for a port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ExecutorProcess:
    """A running executor: `url` is host:port as tritonclient wants it (no scheme)."""

    url: str
    metrics_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def write_emulated_model(
    repository: Path,
    name: str,
    *,
    latency_ms: tuple[float, float] = (1.0, 0.0),
    max_batch_size: int = 8,
    dynamic_batching: Mapping[str, Any] | None = None,
    instance_count: int = 1,
    dims: Sequence[int] = (4,),
    extra_parameters: Mapping[str, str] | None = None,
) -> Path:
    """Write `<repository>/<name>/config.pbtxt` (+ version dir 1) for an emulated-latency model.

    INPUT0 / OUTPUT0 FP32 of `dims`: the emulated backend returns OUTPUT0 = INPUT0.
    `dynamic_batching` is given in Triton's JSON form and rendered to text format; None ⇒ no block.
    """
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


@contextmanager
def running_executor(
    repository: Path,
    *,
    load: Sequence[str] = ("*",),
    explicit: bool = True,
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 60.0,
) -> Iterator[ExecutorProcess]:
    """Run `python -m poolpilot.executor.cli` on free loopback ports until the block exits."""
    log_path = repository.parent / f"executor-{os.getpid()}-{time.monotonic_ns()}.log"
    args = [
        sys.executable,
        "-m",
        "poolpilot.executor.cli",
        "--model-repository",
        str(repository),
        "--http-port",
        "0",
        "--metrics-port",
        "0",
        "--host",
        "127.0.0.1",
    ]
    if explicit:
        args += ["--model-control-mode", "explicit"] + [f"--load-model={m}" for m in load]
    else:
        args += ["--model-control-mode", "none"]
    args += list(extra_args)
    env = dict(os.environ)
    operator_dir = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = operator_dir + os.pathsep + env.get("PYTHONPATH", "")
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    try:
        http = metrics = ""
        deadline = time.monotonic() + startup_timeout_s
        while not (http and metrics):
            if proc.poll() is not None:
                raise RuntimeError(f"executor exited with {proc.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"executor did not start in {startup_timeout_s}s:\n{log_path.read_text()}")
            for line in log_path.read_text(errors="replace").splitlines():
                if line.startswith("Started HTTPService at "):
                    http = line.rsplit(" ", 1)[1]
                elif line.startswith("Started Metrics Service at "):
                    metrics = line.rsplit(" ", 1)[1]
            time.sleep(0.05)
        yield ExecutorProcess(
            url=http, metrics_url=f"http://{metrics}/metrics", process=proc, log_path=log_path
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
