"""The load generator's Service routing: which endpoints a Service sends to (pure parts; the end-to-end path
is tests/controlplane/test_kwok_nodes.py, through a real Service of runner pods)."""

from __future__ import annotations

from typing import Any

from poolpilot.loadgen.routing import ready_addresses, ready_pod_addresses


def test_endpointslices_give_the_ready_addresses_on_the_named_port() -> None:
    slices: list[dict[str, Any]] = [
        {
            "ports": [{"name": "http", "port": 8000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},  # not Ready: no traffic
                {"addresses": ["10.0.0.3"], "conditions": {}},  # unknown counts as ready (API semantics)
            ],
        },
        {"ports": [{"name": "metrics", "port": 8002}], "endpoints": [{"addresses": ["10.0.0.9"]}]},
    ]
    assert ready_addresses(slices, "http") == ["10.0.0.1:8000", "10.0.0.3:8000"]


def pod(ip: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"deletionTimestamp": "2026-12-04T00:00:00Z"} if deleting else {},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_without_endpointslices_the_selector_resolves_to_ready_pods_on_the_target_port() -> None:
    pods = [pod("127.1.0.2", True), pod("127.1.0.3", False), pod("127.1.0.4", True, deleting=True)]
    assert ready_pod_addresses(pods, {"name": "http", "port": 80, "targetPort": "http"}) == ["127.1.0.2:8000"]
    assert ready_pod_addresses(pods, {"name": "http", "port": 80, "targetPort": 9000}) == ["127.1.0.2:9000"]
    assert ready_pod_addresses(pods, None) == []
