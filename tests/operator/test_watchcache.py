"""The per-tick reads of a pool's GPUNodePool and namespace labels come from the watches, not GETs."""

from __future__ import annotations

import asyncio

from poolpilot.api import types as api
from poolpilot.backends.kube import FakeCluster, ObjectRef
from poolpilot.backends.watchcache import CachedCluster, WatchCache

PLURAL = api.GPU_NODE_POOL_PLURAL
REF = ObjectRef(api.API_VERSION, api.GPU_NODE_POOL_KIND, "a100")


def node_pool(nodes: int) -> dict[str, object]:
    return {"metadata": {"name": "a100"}, "spec": {"gpusPerNode": 8}, "status": {"nodes": nodes}}


def make() -> tuple[FakeCluster, WatchCache, CachedCluster]:
    inner = FakeCluster()
    inner.add(PLURAL, node_pool(1))
    inner.namespaces["chat"] = {"tier": "gold"}
    cache = WatchCache()
    return inner, cache, CachedCluster(inner, cache, frozenset({PLURAL}))


def test_watched_objects_are_read_without_an_api_call() -> None:
    inner, cache, cluster = make()
    cache.put_object(PLURAL, node_pool(3))
    cache.put_namespace("chat", {"tier": "gold"})

    async def ticks() -> None:
        for _ in range(10):
            body = await cluster.get_custom_object(REF, PLURAL)
            assert body is not None and body["status"]["nodes"] == 3  # as last watched
            assert await cluster.get_namespace_labels("chat") == {"tier": "gold"}

    asyncio.run(ticks())
    assert inner.calls == 0 and cache.hits == 20


def test_what_the_watch_has_not_delivered_is_read_from_the_api_server() -> None:
    inner, cache, cluster = make()

    async def read() -> None:
        body = await cluster.get_custom_object(REF, PLURAL)
        assert body is not None and body["status"]["nodes"] == 1  # the API server's answer
        assert await cluster.get_namespace_labels("chat") == {"tier": "gold"}
        assert await cluster.get_namespace_labels("gone") is None

    asyncio.run(read())
    assert inner.calls == 3 and cache.misses == 3


def test_a_deleted_object_is_asked_for_again() -> None:
    inner, cache, cluster = make()
    cache.put_object(PLURAL, node_pool(3))
    cache.drop_object(PLURAL, "a100")
    del inner.objects[(PLURAL, None, "a100")]
    assert asyncio.run(cluster.get_custom_object(REF, PLURAL)) is None
    assert inner.calls == 1


def test_callers_get_copies() -> None:
    _, cache, cluster = make()
    cache.put_object(PLURAL, node_pool(3))
    first = asyncio.run(cluster.get_custom_object(REF, PLURAL))
    assert first is not None
    first["status"]["nodes"] = 99
    again = asyncio.run(cluster.get_custom_object(REF, PLURAL))
    assert again is not None and again["status"]["nodes"] == 3


def test_other_kinds_and_namespaced_reads_go_to_the_api_server() -> None:
    inner, cache, cluster = make()
    cache.put_object("inferencepools", {"metadata": {"name": "chat"}})
    ref = ObjectRef(api.API_VERSION, api.INFERENCE_POOL_KIND, "chat", "chat")
    assert asyncio.run(cluster.get_custom_object(ref, "inferencepools")) is None
    assert inner.calls == 1
