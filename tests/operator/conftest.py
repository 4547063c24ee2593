"""Builders for InferencePool / GPUNodePool bodies and a reconcile `Services` made of fakes."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from poolpilot.backends.batching import FakeBatchingActuator
from poolpilot.backends.kube import FakeCluster
from poolpilot.backends.metrics.fake import FakeMetricSource
from poolpilot.backends.pods import FakePods, PodInfo
from poolpilot.backends.workloads import FakeWorkloads, Scale
from poolpilot.reconcile.inferencepool import Services
from poolpilot.reconcile.signals import SignalCache
from poolpilot.sandbox.prometheus import PrometheusServer, find_binary
from poolpilot.settings import OperatorSettings

_uids = itertools.count(1)


def _deep_update(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_update(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture
def pool_body() -> Callable[..., dict[str, Any]]:
    """`pool_body(name, namespace, spec={...overrides})` → an InferencePool as the API returns it."""

    def make(
        name: str = "chat", namespace: str = "team-a", generation: int = 1, **spec: Any
    ) -> dict[str, Any]:
        base_spec: dict[str, Any] = {
            "mode": "Auto",
            "targetRef": {"kind": "Deployment", "name": "chat-triton"},
            "model": {"name": "llama", "maxBatchSize": 64},
            "nodePool": {"name": "a100"},
        }
        return {
            "apiVersion": "poolpilot.io/v1alpha1",
            "kind": "InferencePool",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "generation": generation,
                "uid": f"uid-{next(_uids)}",
            },
            "spec": _deep_update(base_spec, spec),
        }

    return make


@pytest.fixture
def node_pool_body() -> Callable[..., dict[str, Any]]:
    def make(name: str = "a100", **spec: Any) -> dict[str, Any]:
        base_spec: dict[str, Any] = {
            "provider": {"fake": {"nodes": 2}},
            "gpusPerNode": 8,
            "nodes": {"min": 0, "max": 4},
            "pricePerNodeHourUSD": 29.4,
            "namespaceSelector": {"matchLabels": {"gpu-tier": "a100"}},
        }
        return {
            "apiVersion": "poolpilot.io/v1alpha1",
            "kind": "GPUNodePool",
            "metadata": {"name": name, "generation": 1, "uid": f"uid-{next(_uids)}"},
            # provider is replaced, not merged: exactly one provider may be set
            "spec": {
                **_deep_update(base_spec, spec),
                **({"provider": spec["provider"]} if "provider" in spec else {}),
            },
        }

    return make


def triton_default_config() -> dict[str, Any]:
    """A model config as Triton's GET /config shows it for `dynamic_batching {}` with max_batch_size 64."""
    return {
        "name": "llama",
        "platform": "",
        "backend": "python",
        "max_batch_size": 64,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "dynamic_batching": {
            "preferred_batch_size": [64],
            "max_queue_delay_microseconds": 0,
            "preserve_ordering": False,
            "priority_levels": 0,
            "default_priority_level": 0,
            "priority_queue_policy": {},
        },
        "instance_group": [{"name": "llama_0", "kind": "KIND_GPU", "count": 1, "gpus": [0]}],
    }


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class World:
    """A small fake cluster: namespace team-a (gpu-tier=a100), GPUNodePool a100, Deployment chat-triton."""

    def __init__(self, node_pool: dict[str, Any]) -> None:
        self.cluster = FakeCluster()
        self.cluster.namespaces["team-a"] = {"gpu-tier": "a100"}
        self.cluster.namespaces["team-b"] = {"gpu-tier": "t4"}
        self.cluster.add("gpunodepools", node_pool)
        self.workloads = FakeWorkloads()
        self.workloads.scales[("team-a", "chat-triton")] = Scale(3, 3, "app=chat", "1")
        self.workloads.scales[("team-b", "chat-triton")] = Scale(1, 1, "app=chat", "1")
        self.metrics = FakeMetricSource()
        self.clock = FakeClock()
        self.settings = OperatorSettings()
        self.cache = SignalCache(self.metrics, min_refresh_s=5.0, clock=self.clock)
        self.pods = FakePods()
        self.batching = FakeBatchingActuator()
        self.set_pods(3)
        self.services = Services(
            cluster=self.cluster,
            workloads=self.workloads,
            signals=self.cache,
            settings=self.settings,
            pods=self.pods,
            batching=self.batching,
        )

    def set_pods(self, count: int, namespace: str = "team-a", *, ready: bool = True) -> list[PodInfo]:
        """`count` Ready pods serving `llama` with Triton's default batching (as config.pbtxt gives)."""
        pods = [
            PodInfo(f"chat-triton-{i}", f"uid-pod-{i}", f"127.1.0.{i + 2}", ready, "node-0")
            for i in range(count)
        ]
        self.pods.set(namespace, "app=chat", pods)
        for pod in pods:
            self.batching.configs.setdefault((pod.url(8000), "llama"), triton_default_config())
        return pods

    def pod_configs(self, namespace: str = "team-a") -> list[Any]:
        """What each pod's model runs now, in pod order."""
        from poolpilot.backends.batching import batching_of

        return [
            batching_of(self.batching.configs[(p.url(8000), "llama")])
            for p in self.pods.pods[(namespace, "app=chat")]
        ]

    def status_of(self, name: str, namespace: str = "team-a") -> dict[str, Any]:
        return self.cluster.statuses[("inferencepools", namespace, name)]


@pytest.fixture
def world(node_pool_body: Callable[..., dict[str, Any]]) -> World:
    return World(node_pool_body())


class PoolLabelledPrometheus(PrometheusServer):
    """The shared Prometheus harness with target labels `namespace` and `pool` on every series,
    as the documented relabelling of the pod label `poolpilot.io/pool` gives in a cluster."""

    def __init__(self, *args: Any, labels: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.labels = labels

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        for job in cfg["scrape_configs"]:
            for static in job["static_configs"]:
                static["labels"] = dict(self.labels)
        return cfg


@pytest.fixture
def labelled_prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: `labelled_prometheus(targets, labels={...}, scrape_interval_s=..., port=...)` → started."""
    if find_binary() is None:
        pytest.fail("prometheus binary not found; install it with `apt-get install -y prometheus`")
    started: list[PrometheusServer] = []

    def start(
        targets: dict[str, list[str]],
        *,
        labels: dict[str, str],
        scrape_interval_s: float = 0.5,
        port: int | None = None,
    ) -> Any:
        workdir = tmp_path / f"prom-{len(started)}"
        workdir.mkdir()
        server = PoolLabelledPrometheus(
            targets, scrape_interval_s=scrape_interval_s, workdir=workdir, labels=labels, port=port
        )
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()
