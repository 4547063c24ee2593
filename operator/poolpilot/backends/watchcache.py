"""The reads every pool tick repeats — its GPUNodePool and its namespace's labels — served from watches.

Each InferencePool tick needs the GPUNodePool it draws on (spec, admission, status) and the labels of its
namespace (admission). Read with a GET per pool per tick, that is two API calls per pool per tick for
objects that change rarely. `WatchCache` holds them as the watch streams last delivered them (an informer:
the handlers layer feeds it from kopf's watch events, the initial listing included), and `CachedCluster`
answers those two reads from it.

Freshness: an object is served from the cache only once its watch delivered it; a miss (the operator just
started, an object created a moment ago, one that does not exist) falls back to a GET, so a read is never
answered "not found" by a cache that has not heard of the object yet. A deletion removes the entry, so
the next read asks the API server again. Copies are returned: a caller cannot change the cache.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolpilot.backends.kube import Cluster, ObjectRef


@dataclass
class WatchCache:
    """Cluster-scoped custom objects (by plural and name) and namespace labels, as last watched."""

    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def put_object(self, plural: str, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name", ""))
        if name:
            self.objects[(plural, name)] = copy.deepcopy(dict(body))

    def drop_object(self, plural: str, name: str) -> None:
        self.objects.pop((plural, name), None)

    def put_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        self.namespace_labels[name] = dict(labels or {})

    def drop_namespace(self, name: str) -> None:
        self.namespace_labels.pop(name, None)


class CachedCluster:
    """A `Cluster` that answers cluster-scoped reads of `cached_plurals` and namespace labels from a
    `WatchCache` (a GET on a miss); every other call goes to `inner`."""

    def __init__(self, inner: Cluster, cache: WatchCache, cached_plurals: frozenset[str]) -> None:
        self._inner = inner
        self._cache = cache
        self._plurals = cached_plurals

    async def get_custom_object(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        if ref.namespace is None and plural in self._plurals:
            body = self._cache.objects.get((plural, ref.name))
            if body is not None:
                self._cache.hits += 1
                return copy.deepcopy(body)
            self._cache.misses += 1
        return await self._inner.get_custom_object(ref, plural)

    async def get_namespace_labels(self, name: str) -> dict[str, str] | None:
        labels = self._cache.namespace_labels.get(name)
        if labels is not None:
            self._cache.hits += 1
            return dict(labels)
        self._cache.misses += 1
        return await self._inner.get_namespace_labels(name)

    async def list_custom_objects(
        self, api_version: str, plural: str, namespaces: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        return await self._inner.list_custom_objects(api_version, plural, namespaces)

    async def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        return await self._inner.list_namespace_labels()

    async def patch_status(self, ref: ObjectRef, plural: str, status: Mapping[str, Any]) -> None:
        await self._inner.patch_status(ref, plural, status)

    async def emit_event(self, ref: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        await self._inner.emit_event(ref, type_=type_, reason=reason, message=message)


__all__ = ["CachedCluster", "WatchCache"]
