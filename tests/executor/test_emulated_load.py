"""`emulated_instance_load_s`: an emulated model takes time to load, like a real one (a rollout waits)."""

from __future__ import annotations

import asyncio
import time

import pytest

from poolpilot.executor.backends import BackendError, EmulatedBackend


def _config(load_s: str | None) -> dict[str, object]:
    params: dict[str, object] = {"emulated_batch_latency_ms": {"string_value": "5,1"}}
    if load_s is not None:
        params["emulated_instance_load_s"] = {"string_value": load_s}
    return {"name": "m", "max_batch_size": 8, "parameters": params}


def test_each_instance_takes_the_load_time() -> None:
    backend = EmulatedBackend(_config("0.2"))
    began = time.monotonic()
    asyncio.run(backend.start_instances(2))
    assert time.monotonic() - began >= 0.4  # a lower bound: a busy CPU only makes it longer


def test_no_parameter_loads_at_once() -> None:
    backend = EmulatedBackend(_config(None))
    began = time.monotonic()
    asyncio.run(backend.start_instances(4))
    assert time.monotonic() - began < 5.0


@pytest.mark.parametrize("raw", ["soon", "-1", "7200"])
def test_a_bad_load_time_fails_the_load_naming_the_parameter(raw: str) -> None:
    with pytest.raises(BackendError, match="emulated_instance_load_s"):
        EmulatedBackend(_config(raw))
