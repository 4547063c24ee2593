"""kwok Nodes as a GPU node pool: the local sandbox's and the tests' cloud (like Karpenter's kwok provider).

PoolPilot creates Node objects that kwok (managing nodes annotated `kwok.x-k8s.io/node: fake`) keeps Ready
without a kubelet. A real cloud takes minutes to bring a GPU node up; here a new node carries the taint
`poolpilot.io/provisioning` until `provisioningSeconds` have passed (its due time is an annotation, so a
restarted operator continues where it was), and only then is it schedulable and counted Ready. Fewer nodes:
the newest are cordoned, then deleted once no pod runs on them or after `drainGraceSeconds`. Every decision
lives on the Node objects themselves; the provider keeps no memory.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from poolpilot.api import types as api
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError

POOL_LABEL: Final = "poolpilot.io/gpunodepool"
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
READY_AT: Final = "poolpilot.io/ready-at"
REMOVING_SINCE: Final = "poolpilot.io/removing-since"
PROVISIONING_TAINT: Final = "poolpilot.io/provisioning"
GPU: Final = "nvidia.com/gpu"


def node_body(pool: str, spec: api.GPUNodePoolSpec, name: str, now_s: float) -> dict[str, Any]:
    """A new node of the pool, still provisioning (pure)."""
    cfg = spec.provider.kwok
    assert cfg is not None
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(spec.gpus_per_node)}
    taints = [t.model_dump(mode="json") for t in cfg.taints]
    taints.append({"key": PROVISIONING_TAINT, "value": "true", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**cfg.node_labels, POOL_LABEL: pool, "kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {
                KWOK_ANNOTATION: "fake",
                READY_AT: f"{now_s + spec.provisioning_seconds:.0f}",
            },
        },
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _annotation_s(node: Mapping[str, Any], key: str) -> float | None:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def provisioning(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == PROVISIONING_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def removing(node: Mapping[str, Any]) -> bool:
    return _annotation_s(node, REMOVING_SINCE) is not None


def ready(node: Mapping[str, Any]) -> bool:
    if provisioning(node) or removing(node) or (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class KwokNodePool:
    def __init__(
        self, name: str, spec: api.GPUNodePoolSpec, api_client: Any, clock: Callable[[], float] = time.time
    ) -> None:
        cfg = spec.provider.kwok
        assert cfg is not None
        self._name, self._spec, self._cfg = name, spec, cfg
        self._api_client = api_client
        self._clock = clock

    async def get_nodes(self) -> int:
        return sum(not removing(n) for n in await self._nodes())

    async def get_ready_nodes(self) -> int:
        return sum(ready(n) for n in await self._nodes())

    async def set_nodes(self, count: int) -> None:
        if count < 0:
            raise ProviderError(f"kwok pool {self._name}: node count {count} is negative")
        active = [n for n in await self._nodes() if not removing(n)]
        now_s = self._clock()
        for _ in range(count - len(active)):
            name = f"{self._name}-{secrets.token_hex(3)}"[:63]
            await self._core("create", "create_node", node_body(self._name, self._spec, name, now_s))
        newest_first = sorted(active, key=lambda n: n["metadata"].get("creationTimestamp", ""), reverse=True)
        for node in newest_first[: max(0, len(active) - count)]:
            patch = {
                "metadata": {"annotations": {REMOVING_SINCE: f"{now_s:.0f}"}},
                "spec": {"unschedulable": True},
            }
            await self._core("cordon", "patch_node", node["metadata"]["name"], patch)
        await self.sync()

    async def sync(self) -> None:
        """Finish provisioning nodes that are due; delete removed nodes that are empty or past the grace."""
        now_s = self._clock()
        for node in await self._nodes():
            name = node["metadata"]["name"]
            since = _annotation_s(node, REMOVING_SINCE)
            if since is not None:
                if now_s - since >= self._cfg.drain_grace_seconds or not await self._busy(name):
                    await self._core("delete", "delete_node", name)
                continue
            due = _annotation_s(node, READY_AT)
            if provisioning(node) and (due is None or now_s >= due):
                taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != PROVISIONING_TAINT]
                await self._core("finish provisioning", "patch_node", name, {"spec": {"taints": taints}})

    async def preempt(self, node_name: str) -> None:
        """A spot loss: the node disappears at once, with whatever ran on it."""
        await self._core("pre-empt", "delete_node", node_name)

    # -- Kubernetes calls (blocking client, off the event loop) -----------------------------------

    async def _nodes(self) -> list[dict[str, Any]]:
        resp = await self._core("list", "list_node", label_selector=f"{POOL_LABEL}={self._name}", raw=True)
        return [n for n in resp.get("items") or [] if not n["metadata"].get("deletionTimestamp")]

    async def _busy(self, node_name: str) -> bool:
        selector = f"spec.nodeName={node_name},status.phase!=Succeeded,status.phase!=Failed"
        method = "list_pod_for_all_namespaces"
        resp = await self._core("list pods of", method, field_selector=selector, raw=True)
        return bool(resp.get("items"))

    async def _core(self, what: str, method: str, *args: Any, raw: bool = False, **kwargs: Any) -> Any:
        import json

        from kubernetes import client

        core: Any = client.CoreV1Api(self._api_client)
        if raw:
            kwargs["_preload_content"] = False
        try:
            resp = await asyncio.to_thread(getattr(core, method), *args, **kwargs)
        except client.ApiException as exc:
            if what == "delete" and exc.status == 404:
                return None
            why = f"{exc.status} {exc.reason}"
            raise ProviderError(f"kwok pool {self._name}: cannot {what} node(s): {why}") from exc
        return json.loads(resp.data) if raw else resp


def build(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> KwokNodePool:
    if spec.provider.kwok is None:
        raise ProviderError("spec.provider.kwok: missing")
    if ctx.api_client is None:
        raise ProviderError(f"GPUNodePool {name}: the kwok provider needs a Kubernetes client")
    return KwokNodePool(name, spec, ctx.api_client)
