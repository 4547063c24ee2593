"""Placeholder pods: a low-priority Deployment whose pods each reserve one whole GPU node.

For clusters whose GPU nodes come from a node autoscaler (Cluster Autoscaler, Karpenter): PoolPilot
cannot order nodes there, but the autoscaler keeps a node for every pod it can schedule. Each placeholder
requests a whole node's GPUs, so to hold `N` nodes PoolPilot runs `N − S` placeholders, where `S` is the
number of the pool's nodes that already hold a serving GPU pod; serving pods pre-empt placeholders (lower
priority) when they need the room, and `sync` re-balances as serving pods come and go.

The asked-for count lives on the placeholder Deployment (annotation `poolpilot.io/nodes`), so a restarted
operator reads it back from the cluster; the pool's nodes are counted from the Node objects that match
`nodeSelector` and have `nvidia.com/gpu` capacity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final

from poolpilot.api import types as api
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError

PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"
GPU: Final = "nvidia.com/gpu"
NODES_ANNOTATION: Final = "poolpilot.io/nodes"
POOL_LABEL: Final = "poolpilot.io/placeholder-for"


def deployment_name(pool_name: str) -> str:
    return f"poolpilot-placeholder-{pool_name}"[:63]


def placeholder_deployment(pool_name: str, spec: api.GPUNodePoolSpec, nodes: int) -> dict[str, Any]:
    """The placeholder Deployment asking for `nodes` nodes (pure, so its shape is unit-testable)."""
    cfg = spec.provider.placeholder
    assert cfg is not None
    labels = {"app.kubernetes.io/managed-by": "poolpilot", POOL_LABEL: pool_name}
    gpus = str(spec.gpus_per_node)
    pod_spec: dict[str, Any] = {
        "priorityClassName": cfg.priority_class_name,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "reserve",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {GPU: gpus}, "limits": {GPU: gpus}},
            }
        ],
    }
    if cfg.node_selector:
        pod_spec["nodeSelector"] = dict(cfg.node_selector)
    if cfg.tolerations:
        pod_spec["tolerations"] = [t.model_dump(mode="json", exclude_none=True) for t in cfg.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(pool_name),
            "namespace": cfg.namespace,
            "labels": labels,
            "annotations": {NODES_ANNOTATION: str(nodes)},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def placeholders_needed(asked_nodes: int, serving_nodes: int) -> int:
    """Placeholders that make a node autoscaler keep `asked_nodes` when `serving_nodes` already serve."""
    return max(0, asked_nodes - serving_nodes)


def is_pool_node(node: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    return all(labels.get(k) == v for k, v in selector.items()) and _quantity(capacity.get(GPU)) > 0


def is_ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def serving_nodes(pods: Sequence[Mapping[str, Any]], pool_nodes: set[str]) -> int:
    """Pool nodes that hold at least one running-or-starting GPU pod that is not a placeholder."""
    held = set()
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in pool_nodes or POOL_LABEL in (meta.get("labels") or {}):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any(_quantity(_requests(c).get(GPU)) > 0 for c in spec.get("containers") or []):
            held.add(node)
    return len(held)


class PlaceholderNodePool:
    def __init__(self, name: str, spec: api.GPUNodePoolSpec, api_client: Any) -> None:
        cfg = spec.provider.placeholder
        assert cfg is not None
        self._name = name
        self._spec = spec
        self._cfg = cfg
        self._api_client = api_client
        self._deployment = deployment_name(name)
        self._ns = cfg.namespace

    async def get_nodes(self) -> int:
        dep = await self._read_deployment()
        return 0 if dep is None else _asked(dep)

    async def get_ready_nodes(self) -> int:
        return sum(is_ready(n) for n in await self._pool_nodes())

    async def set_nodes(self, count: int) -> None:
        if count < 0:
            raise ProviderError(f"placeholder pool {self._name}: node count {count} is negative")
        await self._ensure_priority_class()
        if await self._read_deployment() is None:
            await self._call("create", "create_namespaced_deployment", self._cfg.namespace, self._body(count))
        else:
            patch = {"metadata": {"annotations": {NODES_ANNOTATION: str(count)}}}
            await self._call("annotate", "patch_namespaced_deployment", self._deployment, self._ns, patch)
        await self.sync()

    async def sync(self) -> None:
        """Placeholders = asked-for nodes − nodes already serving (serving pods come and go)."""
        dep = await self._read_deployment()
        if dep is None:
            return
        nodes = await self._pool_nodes()
        names = {n["metadata"]["name"] for n in nodes}
        pods = await self._list("pods", "list_pod_for_all_namespaces", field_selector="spec.nodeName!=")
        want = placeholders_needed(_asked(dep), serving_nodes(pods, names))
        if (dep.get("spec") or {}).get("replicas") != want:
            body = {"spec": {"replicas": want}}
            await self._call(
                "scale", "patch_namespaced_deployment_scale", self._deployment, self._cfg.namespace, body
            )

    # -- Kubernetes calls (blocking client, run off the event loop) -------------------------------

    def _body(self, count: int) -> dict[str, Any]:
        return placeholder_deployment(self._name, self._spec, count)

    async def _pool_nodes(self) -> list[dict[str, Any]]:
        nodes = await self._list("nodes", "list_node")
        return [n for n in nodes if is_pool_node(n, self._cfg.node_selector)]

    async def _read_deployment(self) -> dict[str, Any] | None:
        from kubernetes import client

        apps: Any = client.AppsV1Api(self._api_client)
        try:
            dep = await asyncio.to_thread(
                apps.read_namespaced_deployment, self._deployment, self._cfg.namespace, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise ProviderError(f"cannot read Deployment {self._ns}/{self._deployment}: {exc}") from exc
        return _json(dep)

    async def _list(self, what: str, method: str, **kwargs: Any) -> list[dict[str, Any]]:
        from kubernetes import client

        core: Any = client.CoreV1Api(self._api_client)
        try:
            resp = await asyncio.to_thread(getattr(core, method), _preload_content=False, **kwargs)
        except client.ApiException as exc:
            raise ProviderError(f"placeholder pool {self._name}: cannot list {what}: {exc}") from exc
        items: list[dict[str, Any]] = _json(resp).get("items") or []
        return items

    async def _call(self, what: str, method: str, *args: Any) -> None:
        from kubernetes import client

        apps: Any = client.AppsV1Api(self._api_client)
        try:
            await asyncio.to_thread(getattr(apps, method), *args)
        except client.ApiException as exc:
            if not (what == "create" and exc.status == 409):  # created concurrently: fine
                ref = f"Deployment {self._cfg.namespace}/{self._deployment}"
                raise ProviderError(f"cannot {what} {ref}: {exc}") from exc

    async def _ensure_priority_class(self) -> None:
        from kubernetes import client

        scheduling: Any = client.SchedulingV1Api(self._api_client)
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": self._cfg.priority_class_name,
                "labels": {"app.kubernetes.io/managed-by": "poolpilot"},
            },
            "value": self._cfg.priority,
            "preemptionPolicy": "Never",
            "description": "PoolPilot placeholders: keep GPU nodes warm, pre-empted first by serving pods.",
        }
        try:
            await asyncio.to_thread(scheduling.create_priority_class, body)
        except client.ApiException as exc:
            if exc.status != 409:  # 409: it exists (ours or the platform team's own): use it as it is
                name = self._cfg.priority_class_name
                raise ProviderError(f"cannot create PriorityClass {name}: {exc}") from exc


def _asked(dep: Mapping[str, Any]) -> int:
    raw = ((dep.get("metadata") or {}).get("annotations") or {}).get(NODES_ANNOTATION)
    try:
        return max(0, int(raw)) if raw is not None else int((dep.get("spec") or {}).get("replicas") or 0)
    except ValueError as exc:
        raise ProviderError(f"annotation {NODES_ANNOTATION}={raw!r} is not a node count") from exc


def _requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _quantity(value: Any) -> float:
    """A resource quantity as a number (GPU counts are plain integers; anything else counts as 0)."""
    try:
        return float(str(value)) if value is not None else 0.0
    except ValueError:
        return 0.0


def _json(resp: Any) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(resp.data)
    return data


def build(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> PlaceholderNodePool:
    if spec.provider.placeholder is None:
        raise ProviderError("spec.provider.placeholder: missing")
    if ctx.api_client is None:
        raise ProviderError(f"GPUNodePool {name}: the placeholder provider needs a Kubernetes client")
    return PlaceholderNodePool(name, spec, ctx.api_client)
