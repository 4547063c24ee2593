"""Kubernetes pod discovery for a Prometheus built without it, over Prometheus' HTTP service discovery.

Debian's `prometheus` 2.42 rejects `kubernetes_sd_configs` ("field kubernetes_sd_configs not found in type
config.ScrapeConfig": the package is built without Kubernetes discovery). This serves what Prometheus' own
`role: pod` discovery would produce — one target per container port of every pod with an IP, labelled
`__meta_kubernetes_namespace`, `__meta_kubernetes_pod_name`, `__meta_kubernetes_pod_ip`,
`__meta_kubernetes_pod_ready`, `__meta_kubernetes_pod_label_<name>` (sanitised as Prometheus does),
`__meta_kubernetes_pod_container_name`, `__meta_kubernetes_pod_container_port_name` and `_number` — read from
the API server at each refresh, so the same relabelling (`poolpilot.monitoring.POD_RELABELINGS`) applies.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
from typing import Any

from poolpilot.sandbox.processes import free_port

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(name: str) -> str:
    """Prometheus' label-name sanitising (`poolpilot.io/pool` → `poolpilot_io_pool`)."""
    return _INVALID.sub("_", name)


def target_groups(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HTTP SD target groups for `pods`, labelled as Prometheus' Kubernetes `role: pod` discovery would."""
    groups = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        ip = status.get("podIP")
        if not ip or meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        base = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_ready": "true" if ready else "false",
            "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
            **{
                f"__meta_kubernetes_pod_label_{sanitize(k)}": v for k, v in (meta.get("labels") or {}).items()
            },
        }
        for container in pod["spec"].get("containers") or []:
            for port in container.get("ports") or []:
                labels = {
                    **base,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


class PodDiscovery:
    """An HTTP SD endpoint (`url`) answering with the cluster's pods, read at each request."""

    def __init__(self, api_client: Any) -> None:
        self._api_client = api_client
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/targets"
        self._server: http.server.ThreadingHTTPServer | None = None

    def _groups(self) -> list[dict[str, Any]]:
        from kubernetes import client

        core: Any = client.CoreV1Api(self._api_client)
        pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
        return target_groups(pods)

    def start(self) -> PodDiscovery:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    body = json.dumps(owner._groups()).encode()
                except Exception as exc:  # Prometheus keeps the last good answer on an error
                    self.send_error(503, str(exc))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # Prometheus may stop waiting (a slow list under load); it asks again at its next refresh.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, name="pod-discovery", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
