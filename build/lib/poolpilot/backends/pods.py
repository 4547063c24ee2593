"""The pods of a pool's workload: who they are, where they listen, whether they are Ready.

The operator contacts Triton only at the addresses of the target's own pods (selected by the label
selector the workload's `/scale` reports, in the pool's namespace): never a URL taken from a spec.
One list call per tick, whatever the number of pods. `FakePods` is the unit-test twin.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from poolpilot.backends.kube import ClusterError


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the operator needs of one pod."""

    name: str
    uid: str
    ip: str | None  # status.podIP; None until the pod has an address
    ready: bool  # condition Ready=True and not being deleted
    node: str | None = None
    terminating: bool = False

    def url(self, port: int) -> str:
        """host:port for tritonclient (IPv6 addresses in brackets); the pod must have an IP."""
        if self.ip is None:
            raise ValueError(f"pod {self.name} has no IP yet")
        host = f"[{self.ip}]" if ipaddress.ip_address(self.ip).version == 6 else self.ip
        return f"{host}:{port}"


class PodLister(Protocol):
    async def list_pods(self, namespace: str, selector: str) -> list[PodInfo]:
        """Pods in `namespace` matching the label `selector` (as /scale reports it), sorted by name."""


def pod_info(pod: Any) -> PodInfo:
    """A `kubernetes.client.V1Pod` (or its dict form) as a `PodInfo`."""
    d = pod if isinstance(pod, dict) else pod.to_dict()
    meta = d.get("metadata") or {}
    status = d.get("status") or {}
    spec = d.get("spec") or {}
    terminating = meta.get("deletion_timestamp") is not None or meta.get("deletionTimestamp") is not None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (status.get("conditions") or [])
    )
    ip = status.get("pod_ip") or status.get("podIP") or None
    return PodInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        ip=str(ip) if ip else None,
        ready=ready and not terminating and ip is not None,
        node=spec.get("node_name") or spec.get("nodeName"),
        terminating=terminating,
    )


class KubernetesPods:
    """`PodLister` on the official client (the call runs in a thread, with a timeout)."""

    def __init__(self, api_client: Any, *, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._core: Any = client.CoreV1Api(api_client)
        self._timeout_s = request_timeout_s

    async def list_pods(self, namespace: str, selector: str) -> list[PodInfo]:
        if not selector:
            # An empty selector would match every pod of the namespace: never contact those.
            raise ClusterError(f"the target in {namespace} reports no label selector on /scale")
        try:
            result = await asyncio.to_thread(
                self._core.list_namespaced_pod,
                namespace,
                label_selector=selector,
                _request_timeout=self._timeout_s,
            )
        except Exception as exc:
            raise ClusterError(f"cannot list pods in {namespace} ({selector}): {exc}") from exc
        return sorted((pod_info(p) for p in result.items), key=lambda p: p.name)


@dataclass
class FakePods:
    """In-memory `PodLister`: pods keyed by (namespace, selector)."""

    pods: dict[tuple[str, str], list[PodInfo]] = field(default_factory=dict)

    def set(self, namespace: str, selector: str, pods: Sequence[PodInfo]) -> None:
        self.pods[(namespace, selector)] = sorted(pods, key=lambda p: p.name)

    async def list_pods(self, namespace: str, selector: str) -> list[PodInfo]:
        return list(self.pods.get((namespace, selector), []))
