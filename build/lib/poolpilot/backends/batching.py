"""Triton's dynamic batcher on one pod, through Triton's model-repository API (tritonclient, asyncio).

Applying a setting is the safe pattern of triton.md §2.2: GET the model's config, edit only
`max_batch_size`, `dynamic_batching` and the instance count, POST the whole document back as the
`config` of a load (Triton replaces the on-disk config for that load, reloads in the background while the
old model serves, and keeps the old model if the load fails), then read the config back and check the
model is ready. A Triton restart forgets the override, so the operator re-applies the pool's setting to
any pod found running something else (see `poolpilot.reconcile.rollout`).

The pure conversions (`batching_of`, `with_batching`) are separate so they are unit-tested without a
server; `TritonBatching` is the tritonclient implementation, `FakeBatchingActuator` the unit-test twin.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from poolpilot.policy.types import BatchingConfig

logger = logging.getLogger(__name__)


class BatchingError(Exception):
    """A pod could not be read or did not take a setting; the message names the pod and the cause."""


def normalized(b: BatchingConfig) -> BatchingConfig:
    """Triton reports an empty preferred list as [max_batch_size]: both mean "none set"."""
    if b.preferred_batch_sizes == (b.max_batch_size,):
        return replace(b, preferred_batch_sizes=())
    return b


def same_batching(a: BatchingConfig | None, b: BatchingConfig | None) -> bool:
    """Whether two settings are the same once Triton's normalisation is taken into account."""
    if a is None or b is None:
        return a is b
    return normalized(a) == normalized(b)


def batching_of(config: Mapping[str, Any]) -> BatchingConfig | None:
    """The batching setting a model config (Triton's JSON form) runs; None without dynamic batching."""
    dyn = config.get("dynamic_batching")
    if not isinstance(dyn, Mapping):
        return None
    policy = dyn.get("default_queue_policy") or {}
    timeout_us = int(policy.get("default_timeout_microseconds") or 0)
    groups = config.get("instance_group") or [{}]
    return BatchingConfig(
        max_queue_delay_us=int(dyn.get("max_queue_delay_microseconds") or 0),
        max_batch_size=int(config.get("max_batch_size") or 0),
        preferred_batch_sizes=tuple(int(x) for x in dyn.get("preferred_batch_size") or ()),
        instance_count=max(1, int(groups[0].get("count") or 1)),
        queue_timeout_us=timeout_us or None,
        max_queue_size=int(policy.get("max_queue_size") or 0),
    )


def with_batching(config: Mapping[str, Any], b: BatchingConfig) -> dict[str, Any]:
    """`config` with the batching fields PoolPilot owns set to `b`; every other field kept as it is."""
    out = copy.deepcopy(dict(config))
    out["max_batch_size"] = b.max_batch_size
    dyn = dict(out.get("dynamic_batching") or {})
    dyn["max_queue_delay_microseconds"] = b.max_queue_delay_us
    # An empty list lets Triton fill [max_batch_size]; keeping the old list could exceed a lowered max.
    dyn["preferred_batch_size"] = list(b.preferred_batch_sizes)
    if b.queue_timeout_us is not None or b.max_queue_size:
        policy = dict(dyn.get("default_queue_policy") or {})
        policy["timeout_action"] = "REJECT"
        policy["default_timeout_microseconds"] = b.queue_timeout_us or 0
        policy["max_queue_size"] = b.max_queue_size
        dyn["default_queue_policy"] = policy
    else:
        dyn.pop("default_queue_policy", None)
    out["dynamic_batching"] = dyn
    groups = [dict(g) for g in out.get("instance_group") or [{}]]
    groups[0]["count"] = b.instance_count
    out["instance_group"] = groups
    return out


@dataclass(frozen=True, slots=True)
class Running:
    """What a pod's model runs now: its whole config (the base of an override) and its batching."""

    config: dict[str, Any]
    batching: BatchingConfig | None


class BatchingActuator(Protocol):
    async def read(self, url: str, model: str) -> Running | None:
        """The model's config on the pod at `url` (host:port); None when the model is not ready there.
        Raises BatchingError when the pod cannot be asked."""

    async def apply(self, url: str, model: str, target: BatchingConfig, base: Running) -> None:
        """Load `model` with `base.config` edited to `target`, verify by reading back, wait until ready.
        Raises BatchingError (the pod keeps serving its previous config: Triton keeps the old model)."""

    async def forget(self, urls: set[str]) -> None:
        """Release connections to pods other than `urls` (pods that are gone)."""

    async def close(self) -> None:
        """Release every connection."""


class TritonBatching:
    """`BatchingActuator` on `tritonclient.http.aio`: one client (connection pool) per pod address."""

    def __init__(self, *, read_timeout_s: float = 5.0, load_timeout_s: float = 600.0) -> None:
        self._read_timeout_s = read_timeout_s
        self._load_timeout_s = load_timeout_s
        self._clients: dict[str, Any] = {}

    def _client(self, url: str) -> Any:
        client = self._clients.get(url)
        if client is None:
            import tritonclient.http.aio as triton_aio

            # The session's total timeout bounds the slowest call (a load); reads get a shorter wait_for.
            client = triton_aio.InferenceServerClient(url, conn_limit=4, conn_timeout=self._load_timeout_s)
            self._clients[url] = client
        return client

    async def read(self, url: str, model: str) -> Running | None:
        client = self._client(url)
        try:
            ready = await asyncio.wait_for(client.is_model_ready(model), self._read_timeout_s)
            if not ready:
                return None
            config = await asyncio.wait_for(client.get_model_config(model), self._read_timeout_s)
        except Exception as exc:  # tritonclient raises InferenceServerException; aiohttp its own errors
            raise BatchingError(f"{url}: cannot read the config of {model}: {_why(exc)}") from exc
        if not isinstance(config, dict):
            raise BatchingError(f"{url}: the config of {model} is not a JSON object")
        return Running(config, batching_of(config))

    async def apply(self, url: str, model: str, target: BatchingConfig, base: Running) -> None:
        client = self._client(url)
        override = json.dumps(with_batching(base.config, target), separators=(",", ":"))
        try:
            await asyncio.wait_for(client.load_model(model, config=override), self._load_timeout_s)
        except Exception as exc:
            raise BatchingError(f"{url}: load of {model} failed: {_why(exc)}") from exc
        after = await self.read(url, model)
        if after is None:
            raise BatchingError(f"{url}: {model} is not ready after its load")
        if not same_batching(after.batching, target):
            raise BatchingError(
                f"{url}: {model} runs {after.batching} after the load, not the requested {target}"
            )

    async def forget(self, urls: set[str]) -> None:
        for url in [u for u in self._clients if u not in urls]:
            client = self._clients.pop(url)
            await client.close()

    async def close(self) -> None:
        await self.forget(set())


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return text or type(exc).__name__


@dataclass
class FakeBatchingActuator:
    """In-memory actuator: configs keyed by (url, model); `fail_on` urls raise on apply, `down` on read."""

    configs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    fail_on: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    applied: list[tuple[str, str, BatchingConfig]] = field(default_factory=list)

    async def read(self, url: str, model: str) -> Running | None:
        if url in self.down:
            raise BatchingError(f"{url}: connection refused")
        config = self.configs.get((url, model))
        if config is None:
            return None
        return Running(copy.deepcopy(config), batching_of(config))

    async def apply(self, url: str, model: str, target: BatchingConfig, base: Running) -> None:
        if url in self.fail_on:
            raise BatchingError(f"{url}: load of {model} failed: out of memory")
        self.applied.append((url, model, target))
        self.configs[(url, model)] = with_batching(base.config, target)

    async def forget(self, urls: set[str]) -> None:
        return None

    async def close(self) -> None:
        return None
