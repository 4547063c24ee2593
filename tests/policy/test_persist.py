"""The policy state survives the status: exact round trips, bounded size, clear errors."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolpilot.api.types import POLICY_STATE_MAX_BYTES
from poolpilot.policy.params import DEFAULT_PARAMS
from poolpilot.policy.persist import (
    STATE_VERSION,
    StateFormatError,
    encoded_size_bytes,
    state_from_wire,
    state_to_wire,
)
from poolpilot.policy.types import BatchingConfig, CurvePoint, HistoryEntry, LatencyModel, PoolState

floats = st.floats(allow_nan=True, allow_infinity=True)


def _through_json(doc: dict[str, object]) -> dict[str, object]:
    """What the apiserver hands back: strict JSON (no NaN literals)."""
    return json.loads(json.dumps(doc, allow_nan=False))


@settings(max_examples=300)
@given(st.from_type(PoolState))
def test_any_state_round_trips_exactly(state: PoolState) -> None:
    back = state_from_wire(_through_json(state_to_wire(state)))
    # repr shows every field, and floats (NaN included) by their exact shortest repr.
    assert repr(back) == repr(state)


def test_a_learned_state_round_trips() -> None:
    model = LatencyModel(
        a_ms=48.25,
        b_ms=2.1875,
        correction=1.13,
        samples=40,
        sum_w=3.5,
        sum_x=11.0,
        sum_y=190.0,
        sum_xx=40.0,
        sum_xy=700.0,
        max_batch_ceiling=32,
        floor_replicas=5,
        floor_rate_per_s=412.0,
        offset_ms=17.5,
        offset_peak_ms=math.nan,
        spread_ms=118.5,
        p99_curve=(
            CurvePoint(12.5, 180.25, 36.0, 1.8e9 - 30.0, 8, 9),
            CurvePoint(25.0, 240.5, 0.0, 1.8e9, 16, 1),
        ),
        tabu=((5000, 1, 1.8e9 + 21600.0), (10000, 2, 1.8e9 + 25000.0)),
    )
    state = PoolState(
        replicas=6,
        batching=BatchingConfig(5000, 64, (8, 16), 1, queue_timeout_us=None, max_queue_size=0),
        latency_model=model,
        history=tuple(HistoryEntry(1.8e9 + 15.0 * i, 6, 400.0 + i, 7) for i in range(30)),
        last_batching_change_s=1.8e9 - 600.0,
        last_scale_change_s=None,
        last_scale_up_s=1.8e9 - 1200.0,
    )
    wire = _through_json(state_to_wire(state))
    assert wire["version"] == STATE_VERSION
    assert wire["latencyModel"]["offsetPeakMs"] == "NaN"  # type: ignore[index]
    assert "lastScaleChangeS" not in wire  # None is never written (a merge patch null deletes)
    assert state_from_wire(wire) == state or repr(state_from_wire(wire)) == repr(state)


def test_worst_case_size_is_bounded() -> None:
    """The history is capped by the policy; at the cap the state fits the status bound with room."""
    n = DEFAULT_PARAMS.history_max_entries
    state = PoolState(
        replicas=10_000,
        batching=BatchingConfig(10_000_000, 4096, tuple(range(1, 17)), 8, 10**9, 10**6),
        latency_model=LatencyModel(
            a_ms=1 / 3,
            b_ms=2 / 3,
            tabu=tuple((i, i, 1e9 / 7) for i in range(16)),
            p99_curve=tuple(
                CurvePoint(i / 7, 1e3 / 7, 1e4 / 7, 1.8e9 / 7, 10_000, 10**6)
                for i in range(DEFAULT_PARAMS.curve_max_entries)
            ),
        ),
        history=tuple(HistoryEntry(1.8e9 + i / 7, 10_000, 1e6 / 7, 10_000) for i in range(n)),
        last_batching_change_s=1.8e9 / 7,
        last_scale_change_s=1.8e9 / 7,
        last_scale_up_s=1.8e9 / 7,
    )
    assert encoded_size_bytes(state) < POLICY_STATE_MAX_BYTES / 4


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"version": 99, "replicas": 1}, "policyState.version"),
        ({"version": STATE_VERSION}, "policyState.replicas"),
        ({"version": STATE_VERSION, "replicas": "three"}, "policyState.replicas"),
        ({"version": STATE_VERSION, "replicas": 1, "history": {}}, "policyState.history"),
        (
            {"version": STATE_VERSION, "replicas": 1, "history": [{"timeS": 1.0}]},
            "policyState.history[0].replicas",
        ),
        (
            {"version": STATE_VERSION, "replicas": 1, "latencyModel": {"aMs": "fast", "bMs": 1.0}},
            "policyState.latencyModel.aMs",
        ),
    ],
)
def test_bad_documents_name_the_field(doc: dict[str, object], path: str) -> None:
    with pytest.raises(StateFormatError, match=path.replace("[", r"\[").replace(".", r"\.")):
        state_from_wire(doc)


def test_unknown_keys_from_a_newer_writer_are_ignored() -> None:
    doc = state_to_wire(PoolState(replicas=2, batching=None))
    doc["someFutureField"] = {"x": 1}
    assert state_from_wire(doc) == PoolState(replicas=2, batching=None)
