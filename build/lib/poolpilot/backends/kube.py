"""The operator's own reads and writes on the API server: lookups, status patches, Events.

The official `kubernetes` client is synchronous, so every call runs in a worker thread
(`asyncio.to_thread`) and never blocks kopf's event loop. Each call has a request timeout.
`FakeCluster` is the in-memory twin for unit tests of the reconcilers.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLUSTER_EVENTS_NAMESPACE = "default"
"""Where Events about cluster-scoped objects (GPUNodePool) are written."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Enough of an object's identity to patch it and to point an Event at it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None  # None = cluster-scoped
    uid: str | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class ClusterError(Exception):
    """An API call failed for a reason other than 'not found' (which lookups return as None)."""


class Cluster(Protocol):
    """The API-server operations a reconciler needs; bounded and explicit so a tick's cost is visible."""

    async def get_custom_object(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        """The object as a dict, or None when it does not exist."""

    async def get_namespace_labels(self, name: str) -> dict[str, str] | None:
        """Labels of a namespace, or None when it does not exist."""

    async def list_custom_objects(
        self, api_version: str, plural: str, namespaces: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """Every object of a namespaced kind, in `namespaces` (one call each) or cluster-wide (one call)."""

    async def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        """Labels of every namespace (one call), by name."""

    async def patch_status(self, ref: ObjectRef, plural: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource (lists such as conditions are replaced whole)."""

    async def emit_event(self, ref: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about `ref` (type_ is Normal or Warning). Never raises."""


def load_api_client() -> Any:
    """A `kubernetes.client.ApiClient` from $KUBECONFIG / ~/.kube/config, else the in-cluster account."""
    from kubernetes import client, config  # imported here: unit tests with fakes never need it

    configuration = client.Configuration()
    kubeconfig = os.environ.get("KUBECONFIG")
    try:
        if kubeconfig or os.path.exists(os.path.expanduser("~/.kube/config")):
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        raise ClusterError(f"no Kubernetes credentials (KUBECONFIG or in-cluster): {exc}") from exc
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubernetesCluster:
    """`Cluster` on the official client, each call in a thread with a timeout."""

    def __init__(
        self, api_client: Any, *, request_timeout_s: float = 30.0, component: str = "poolpilot"
    ) -> None:
        from kubernetes import client

        self._custom: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._timeout_s = request_timeout_s
        self._component = component
        self._instance = os.environ.get("HOSTNAME", "poolpilot")

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, _request_timeout=self._timeout_s, **kwargs)

    async def get_custom_object(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        try:
            if ref.namespace is None:
                obj = await self._call(
                    self._custom.get_cluster_custom_object, ref.group, ref.version, plural, ref.name
                )
            else:
                obj = await self._call(
                    self._custom.get_namespaced_custom_object,
                    ref.group,
                    ref.version,
                    ref.namespace,
                    plural,
                    ref.name,
                )
        except Exception as exc:
            if _status_of(exc) == 404:
                return None
            raise ClusterError(f"cannot read {ref}: {exc}") from exc
        return dict(obj) if isinstance(obj, dict) else None

    async def get_namespace_labels(self, name: str) -> dict[str, str] | None:
        try:
            ns = await self._call(self._core.read_namespace, name)
        except Exception as exc:
            if _status_of(exc) == 404:
                return None
            raise ClusterError(f"cannot read namespace {name}: {exc}") from exc
        return dict((ns.metadata and ns.metadata.labels) or {})

    async def list_custom_objects(
        self, api_version: str, plural: str, namespaces: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        group, _, version = api_version.rpartition("/")
        out: list[dict[str, Any]] = []
        try:
            if not namespaces:
                result = await self._call(self._custom.list_cluster_custom_object, group, version, plural)
                out.extend(result.get("items") or [])
            for ns in namespaces:
                result = await self._call(
                    self._custom.list_namespaced_custom_object, group, version, ns, plural
                )
                out.extend(result.get("items") or [])
        except Exception as exc:
            raise ClusterError(f"cannot list {plural}: {exc}") from exc
        return out

    async def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        try:
            result = await self._call(self._core.list_namespace)
        except Exception as exc:
            raise ClusterError(f"cannot list namespaces: {exc}") from exc
        return {ns.metadata.name: dict(ns.metadata.labels or {}) for ns in result.items}

    async def patch_status(self, ref: ObjectRef, plural: str, status: Mapping[str, Any]) -> None:
        body = {"status": dict(status)}
        try:
            if ref.namespace is None:
                await self._call(
                    self._custom.patch_cluster_custom_object_status,
                    ref.group,
                    ref.version,
                    plural,
                    ref.name,
                    body,
                )
            else:
                await self._call(
                    self._custom.patch_namespaced_custom_object_status,
                    ref.group,
                    ref.version,
                    ref.namespace,
                    plural,
                    ref.name,
                    body,
                )
        except Exception as exc:
            if _status_of(exc) == 404:
                logger.info("%s vanished before its status was written", ref)
                return
            raise ClusterError(f"cannot patch status of {ref}: {exc}") from exc

    async def emit_event(self, ref: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        namespace = ref.namespace or CLUSTER_EVENTS_NAMESPACE
        now = _now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._call(self._core.create_namespaced_event, namespace, body)
        except Exception as exc:  # an Event is best effort: never fail a tick over it
            logger.warning("could not record Event %s on %s: %s", reason, ref, exc)


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch, as the API server applies `application/merge-patch+json`."""
    out = copy.deepcopy(dict(target))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_patch(out[key], value)
        elif isinstance(value, Mapping):
            out[key] = merge_patch({}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class RecordedEvent:
    ref: ObjectRef
    type: str
    reason: str
    message: str


@dataclass
class FakeCluster:
    """In-memory `Cluster` for unit tests: objects keyed by (plural, namespace, name)."""

    objects: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    statuses: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    calls: int = 0

    def add(self, plural: str, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(plural, meta.get("namespace"), meta["name"])] = copy.deepcopy(dict(obj))

    async def get_custom_object(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        self.calls += 1
        obj = self.objects.get((plural, ref.namespace, ref.name))
        if obj is None:
            return None
        out = copy.deepcopy(obj)
        status = self.statuses.get((plural, ref.namespace, ref.name))
        if status is not None:
            out["status"] = copy.deepcopy(status)
        return out

    async def get_namespace_labels(self, name: str) -> dict[str, str] | None:
        self.calls += 1
        labels = self.namespaces.get(name)
        return dict(labels) if labels is not None else None

    async def list_custom_objects(
        self, api_version: str, plural: str, namespaces: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        self.calls += max(1, len(namespaces))
        out = []
        for (p, ns, name), obj in sorted(
            self.objects.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])
        ):
            if p != plural or (namespaces and ns not in namespaces):
                continue
            item = copy.deepcopy(obj)
            status = self.statuses.get((p, ns, name))
            if status is not None:
                item["status"] = copy.deepcopy(status)
            out.append(item)
        return out

    async def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        self.calls += 1
        return {name: dict(labels) for name, labels in self.namespaces.items()}

    async def patch_status(self, ref: ObjectRef, plural: str, status: Mapping[str, Any]) -> None:
        self.calls += 1
        key = (plural, ref.namespace, ref.name)
        self.statuses[key] = merge_patch(self.statuses.get(key, {}), status)

    async def emit_event(self, ref: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        self.calls += 1
        self.events.append(RecordedEvent(ref, type_, reason, message))
