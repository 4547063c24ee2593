"""Where the load generator sends each request: fixed `--url`s, or a Service's ready endpoints.

`ServiceRouter` is the router kube-proxy would be for a ClusterIP Service: it reads the Service's
EndpointSlices (`kubernetes.io/service-name=<name>`) from the API server, keeps the addresses whose
`conditions.ready` is true on the Service's HTTP port, re-reads them every `refresh_s`, and hands requests out
round-robin. A pod that turns not-Ready (or goes) stops receiving new requests at the next refresh, as with a
real Service.

In the local sandbox pod IPs are loopback addresses, which the API server refuses in EndpointSlices ("may not
be in the loopback range"), so the EndpointSlice controller writes none. For a Service with a selector and no
EndpointSlice, the router computes what the controller would: the Service's selector resolved to its Ready,
non-terminating pods, at the container port its `targetPort` names (the controller leaves the Service's first,
empty EndpointSlice in place when later writes fail).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import tritonclient.http.aio as triton_aio


class RoutingError(ValueError):
    """The Service cannot be routed to (absent, no ready endpoint within the wait); names the Service."""


def ready_addresses(slices: Sequence[Mapping[str, Any]], port_name: str | None) -> list[str]:
    """`ip:port` of every ready endpoint in the Service's EndpointSlices (pure; sorted, deduplicated)."""
    out: set[str] = set()
    for s in slices:
        ports = [p for p in s.get("ports") or [] if port_name is None or p.get("name") == port_name]
        if not ports:
            continue
        port = ports[0]["port"]
        for endpoint in s.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            out.update(f"{ip}:{port}" for ip in endpoint.get("addresses") or [])
    return sorted(out)


def ready_pod_addresses(
    pods: Sequence[Mapping[str, Any]], service_port: Mapping[str, Any] | None
) -> list[str]:
    """`ip:port` of the Ready, non-terminating pods at the container port `service_port` targets (pure)."""
    if service_port is None:
        return []
    target = service_port.get("targetPort", service_port.get("port"))
    out = set()
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if not ready or not status.get("podIP") or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if isinstance(target, int):
            out.add(f"{status['podIP']}:{target}")
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name") == target:
                    out.add(f"{status['podIP']}:{port['containerPort']}")
    return sorted(out)


class StaticRouter:
    """Round-robin over fixed `host:port`s."""

    def __init__(self, urls: Sequence[str], make_client: Callable[[str], triton_aio.InferenceServerClient]):
        self.urls = list(urls)
        self._clients = {url: make_client(url) for url in self.urls}
        self._next: Iterator[str] = itertools.cycle(self.urls)

    async def start(self) -> None:
        return None

    def pick(self) -> tuple[str, triton_aio.InferenceServerClient] | None:
        url = next(self._next)
        return url, self._clients[url]

    def any_client(self) -> triton_aio.InferenceServerClient:
        return self._clients[self.urls[0]]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()


class ServiceRouter:
    """Round-robin over a Service's ready endpoints, re-read from its EndpointSlices every `refresh_s`."""

    def __init__(
        self,
        service: str,
        kubeconfig: str | None,
        make_client: Callable[[str], triton_aio.InferenceServerClient],
        *,
        port_name: str | None = "http",
        refresh_s: float = 2.0,
        wait_ready_s: float = 60.0,
    ) -> None:
        if service.count("/") != 1 or not all(service.split("/")):
            raise RoutingError(f"--service must be NAMESPACE/NAME, got {service!r}")
        self.namespace, self.name = service.split("/")
        self._kubeconfig = kubeconfig
        self._make_client = make_client
        self._port_name = port_name
        self._refresh_s = refresh_s
        self._wait_ready_s = wait_ready_s
        self._clients: dict[str, triton_aio.InferenceServerClient] = {}
        self.urls: list[str] = []
        self._turn = 0
        self._task: asyncio.Task[None] | None = None
        self._api: Any = None
        self._core: Any = None

    async def start(self) -> None:
        from kubernetes import client, config

        api_client = await asyncio.to_thread(
            config.new_client_from_config,
            config_file=self._kubeconfig,  # type: ignore[no-untyped-call]
        )
        self._api = client.DiscoveryV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_ready_s
        while not self.urls:
            await self.refresh()
            if self.urls:
                break
            if loop.time() > deadline:
                waited = f"{self._wait_ready_s:.0f} s"
                raise RoutingError(f"Service {self.namespace}/{self.name}: no ready endpoint after {waited}")
            await asyncio.sleep(0.5)
        self._task = asyncio.create_task(self._refresh_forever())

    async def refresh(self) -> None:
        selector = f"kubernetes.io/service-name={self.name}"
        resp = await asyncio.to_thread(
            self._api.list_namespaced_endpoint_slice,
            self.namespace,
            label_selector=selector,
            _preload_content=False,
        )
        slices = json.loads(resp.data).get("items") or []
        # No ready address in the slices: either none is ready (the selector finds none either) or the
        # controller could not write them (loopback pod IPs): the selector gives what it would have written.
        urls = ready_addresses(slices, self._port_name) or await self._from_selector()
        for url in urls:
            if url not in self._clients:
                self._clients[url] = self._make_client(url)
        self.urls = urls  # in-flight requests to a removed endpoint finish on their client

    async def _from_selector(self) -> list[str]:
        """What the EndpointSlice controller would write, for a Service it cannot write one for."""
        svc = json.loads(
            (
                await asyncio.to_thread(
                    self._core.read_namespaced_service, self.name, self.namespace, _preload_content=False
                )
            ).data
        )
        selector = ",".join(f"{k}={v}" for k, v in (svc["spec"].get("selector") or {}).items())
        if not selector:
            return []
        resp = await asyncio.to_thread(
            self._core.list_namespaced_pod, self.namespace, label_selector=selector, _preload_content=False
        )
        ports = [p for p in svc["spec"].get("ports") or [] if self._port_name in (None, p.get("name"))]
        return ready_pod_addresses(json.loads(resp.data).get("items") or [], ports[0] if ports else None)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            with contextlib.suppress(Exception):  # keep the last known endpoints through an API hiccup
                await self.refresh()

    def pick(self) -> tuple[str, triton_aio.InferenceServerClient] | None:
        """The next ready endpoint; None when the Service has none (kube-proxy would refuse it)."""
        urls = self.urls
        if not urls:
            return None
        url = urls[self._turn % len(urls)]
        self._turn += 1
        return url, self._clients[url]

    def any_client(self) -> triton_aio.InferenceServerClient:
        return self._clients[self.urls[0]]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for client in self._clients.values():
            await client.close()
