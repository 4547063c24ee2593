"""`PoolState` ↔ the JSON kept in `InferencePool.status.policyState`: the one converter.

Why generic: the policy's memory (fit sums, offsets, floors, tabu list, history with rates, cooldown
times) evolves with the policy, and a hand-written mapping is the place a new field gets forgotten — an
operator restarted mid-run would then decide differently from one that was not. This walks the frozen
dataclasses by their type hints, so every field is persisted, and `tests/policy/test_persist.py` checks
exact round trips of arbitrary states.

Wire rules (the status is JSON, merge-patched by the apiserver):
- keys are the field names in camelCase; `version` names the format;
- floats are JSON numbers (Python's repr round-trips exactly); NaN and ±inf, which JSON cannot carry, are
  the strings "NaN", "Infinity", "-Infinity";
- None is left out (a merge patch deletes a key sent as null), so a missing key reads back as None;
- tuples are lists; nested dataclasses are objects.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar, cast, get_args, get_origin

from poolpilot.policy.types import PoolState

STATE_VERSION = 1
"""Bump when a field changes meaning (not when one is added: missing fields read back as defaults)."""

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

T = TypeVar("T")


class StateFormatError(ValueError):
    """The persisted state cannot be read back; the message names the field path."""


def state_to_wire(state: PoolState) -> dict[str, Any]:
    """The state as a JSON object for `status.policyState` (with `version`)."""
    body = _encode(state, "policyState")
    assert isinstance(body, dict)
    return {"version": STATE_VERSION, **body}


def state_from_wire(doc: Mapping[str, Any]) -> PoolState:
    """The state persisted by `state_to_wire`; raises StateFormatError naming the bad field."""
    version = doc.get("version")
    if version != STATE_VERSION:
        raise StateFormatError(f"policyState.version: {version!r} is not {STATE_VERSION}")
    body = {k: v for k, v in doc.items() if k != "version"}
    return _decode_dataclass(PoolState, body, "policyState")


def encoded_size_bytes(state: PoolState) -> int:
    """Bytes the state takes in the status (what the size bound is checked against)."""
    return len(json.dumps(state_to_wire(state), separators=(",", ":")))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _encode(value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is not None:
                out[_camel(f.name)] = _encode(item, f"{path}.{_camel(f.name)}")
        return out
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, tuple):
        return [_encode(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise StateFormatError(f"{path}: cannot persist a {type(value).__name__}")


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, raw: Any, path: str) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if raw is None:
            if type(None) in args:
                return None
            raise StateFormatError(f"{path}: missing")
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise StateFormatError(f"{path}: unsupported union {tp}")
        return _decode(inner[0], raw, path)
    if raw is None:
        raise StateFormatError(f"{path}: missing")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, raw, path)
    if origin is tuple:
        return _decode_tuple(get_args(tp), raw, path)
    if origin is typing.Literal:
        if raw not in get_args(tp):
            raise StateFormatError(f"{path}: {raw!r} is not one of {get_args(tp)}")
        return raw
    return _decode_scalar(tp, raw, path)


def _decode_dataclass(cls: type[T], raw: Any, path: str) -> T:
    if not isinstance(raw, Mapping):
        raise StateFormatError(f"{path}: expected an object, got {type(raw).__name__}")
    hints = _hints(cast(Any, cls))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = _camel(f.name)
        sub = f"{path}.{key}"
        if key in raw:
            kwargs[f.name] = _decode(hints[f.name], raw[key], sub)
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            # An absent key is None when the field may be None (None is never written), else the default.
            optional = type(None) in get_args(hints[f.name])
            if optional:
                kwargs[f.name] = None
        elif type(None) in get_args(hints[f.name]):
            kwargs[f.name] = None
        else:
            raise StateFormatError(f"{sub}: missing")
    return cls(**kwargs)


def _decode_tuple(args: tuple[Any, ...], raw: Any, path: str) -> tuple[Any, ...]:
    if not isinstance(raw, list):
        raise StateFormatError(f"{path}: expected a list, got {type(raw).__name__}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], item, f"{path}[{i}]") for i, item in enumerate(raw))
    if len(raw) != len(args):
        raise StateFormatError(f"{path}: expected {len(args)} items, got {len(raw)}")
    return tuple(_decode(a, item, f"{path}[{i}]") for i, (a, item) in enumerate(zip(args, raw, strict=True)))


def _decode_scalar(tp: Any, raw: Any, path: str) -> Any:
    if tp is float:
        if isinstance(raw, str) and raw in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[raw]
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
    elif tp is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, float) and raw.is_integer():  # a JSON round trip may turn 3 into 3.0
            return int(raw)
    elif tp is bool:
        if isinstance(raw, bool):
            return raw
    elif tp is str:
        if isinstance(raw, str):
            return raw
    else:
        raise StateFormatError(f"{path}: unsupported type {tp}")
    raise StateFormatError(f"{path}: expected {tp.__name__}, got {raw!r}")
