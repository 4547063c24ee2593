"""The one GPU curve: the simulator and the executor's emulated backend charge the same latency."""

from __future__ import annotations

import numpy as np
import pytest

from poolpilot.executor.backends import BackendError, EmulatedBackend, WorkItem
from poolpilot.gpucurve import GpuCurve
from poolpilot.sim.params import SimParams


def _config(**params: str) -> dict[str, object]:
    return {
        "max_batch_size": 64,
        "input": [{"name": "TOKENS", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


def _item(tokens: int) -> WorkItem:
    return WorkItem("r", {"TOKENS": np.array([[tokens]], dtype=np.int32)}, [], {})


def test_curve_charges_the_longest_request_above_the_reference() -> None:
    c = GpuCurve(a_ms=50.0, b_ms=2.0, token_ms_per_1k=10.0, token_ref=2048)
    assert c.batch_ms(4, 1000) == pytest.approx(58.0)
    assert c.batch_ms(4, 5048) == pytest.approx(58.0 + 30.0)
    assert c.curve_ms(4) == pytest.approx(58.0)


@pytest.mark.parametrize("field", ["a_ms", "b_ms", "token_ms_per_1k"])
def test_curve_rejects_negative_parameters_naming_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GpuCurve(**{field: -1.0})  # type: ignore[arg-type]


def test_executor_and_simulator_share_the_curve() -> None:
    sim = SimParams(batch_latency_a_ms=40.0, batch_latency_b_ms=3.0, token_ms_per_1k=20.0, token_ref=1000)
    backend = EmulatedBackend(
        _config(
            emulated_batch_latency_ms="40,3",
            emulated_token_ms_per_1k="20",
            emulated_token_ref="1000",
        )
    )
    assert backend.curve == sim.gpu_curve
    batch = [_item(500), _item(3000), _item(2500)]
    # Longest request (3000 tokens), not the sum (6000): 40 + 3·3 + 20·2 = 89 ms.
    assert backend.latency_s(batch) * 1000 == pytest.approx(89.0)
    assert backend.latency_s(batch) * 1000 == pytest.approx(sim.gpu_curve.batch_ms(3, 3000))


def test_token_mode_none_drops_the_token_term() -> None:
    assert SimParams(token_mode="none").gpu_curve.token_ms_per_1k == 0.0


def test_retired_summed_token_parameter_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match="emulated_ms_per_token was replaced by emulated_token_ms_per_1k"):
        EmulatedBackend(_config(emulated_batch_latency_ms="1,0", emulated_ms_per_token="2"))


def test_bad_token_reference_names_the_parameter() -> None:
    with pytest.raises(BackendError, match="emulated_token_ref"):
        EmulatedBackend(_config(emulated_batch_latency_ms="1,0", emulated_token_ref="-3"))


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("emulated_token_ms_per_1k", "ten", "a number"),
        ("emulated_token_ref", "2048.5", "an integer"),
        ("emulated_instance_interference", "0,3", "a number"),
    ],
)
def test_a_model_parameter_that_is_not_a_number_is_a_400_naming_it(key: str, value: str, kind: str) -> None:
    with pytest.raises(BackendError, match=f"parameter {key} must be {kind}, got '{value}'") as err:
        EmulatedBackend(_config(emulated_batch_latency_ms="1,0", **{key: value}))
    assert err.value.status == 400


def test_empty_model_parameters_take_the_defaults() -> None:
    backend = EmulatedBackend(
        _config(
            emulated_batch_latency_ms="1,0",
            emulated_token_ms_per_1k="",
            emulated_token_ref="",
            emulated_instance_interference="",
        )
    )
    # No token term unless asked for (the curve's own default is the simulator's); reference and
    # interference keep the shared defaults.
    assert backend.curve == GpuCurve(a_ms=1.0, b_ms=0.0, token_ms_per_1k=0.0)
