"""Metric batching, PromQL parsing, node-pool providers and `poolpilot run` flags (no cluster)."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import socket
from typing import Any

import pytest

from poolpilot import runner
from poolpilot.api import types as api
from poolpilot.backends.metrics import prometheus, queries
from poolpilot.backends.metrics.base import MetricsUnavailable, PoolKey
from poolpilot.backends.nodepools import registry
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError
from poolpilot.policy.types import Signals
from poolpilot.reconcile import gpunodepool
from poolpilot.settings import LatencySource, PrometheusSettings

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC)


# ------------------------------------------------------------------------------------ batching


async def test_pools_ticking_together_share_one_fetch_for_all_pools(world: Any) -> None:
    a = PoolKey("team-a", "chat", "llama")
    b = PoolKey("team-b", "embed", "bge")
    world.metrics.signals[("team-a", "chat")] = Signals(p99_ms=10.0, age_s=1.0)
    world.metrics.signals[("team-b", "embed")] = Signals(p99_ms=20.0, age_s=1.0)

    await world.cache.get(a)
    await world.cache.get(b)  # a new pool forces one refresh that includes both
    world.clock.now_s += 15  # next tick period
    got_a = await world.cache.get(a)
    got_b = await world.cache.get(b)  # within min_refresh_s: reuses the same fetch

    assert world.metrics.fetches[-1] == (a, b)
    assert len(world.metrics.fetches) == 3
    assert (got_a.signals.p99_ms, got_b.signals.p99_ms) == (10.0, 20.0)


async def test_forgotten_pool_is_no_longer_queried(world: Any) -> None:
    a = PoolKey("team-a", "chat", "llama")
    b = PoolKey("team-b", "embed", "bge")
    await world.cache.get(a)
    await world.cache.get(b)
    world.cache.forget("team-b", "embed")
    world.clock.now_s += 15
    await world.cache.get(a)
    assert world.metrics.fetches[-1] == (a,)


# ------------------------------------------------------------------------------------- PromQL


def test_one_query_set_for_all_pools_grouped_by_pool_labels() -> None:
    batch = queries.build_queries(PrometheusSettings(), {0.99, 0.95})
    names = [q.name for q in batch]
    assert names.count("p0.99_ms") == names.count("p0.95_ms") == 1
    for q in batch:
        assert "by (namespace, pool" in q.promql, q.promql
        assert 'pool!=""' in q.promql
    latency = {q.name: q.promql for q in batch}
    assert 'quantile="0.99"' in latency["p0.99_ms"]
    assert "nv_inference_request_summary_us" in latency["p0.99_ms"]


def test_histogram_latency_query_uses_histogram_quantile_in_ms() -> None:
    settings = PrometheusSettings(
        latency_source=LatencySource.HISTOGRAM,
        latency_histogram_metric="router_request_duration_seconds",
        latency_histogram_unit_ms=1000.0,
    )
    q = queries.latency_query(settings, 0.99)
    assert q.promql.startswith("histogram_quantile(0.99, sum by (namespace, pool, model, le)")
    assert "router_request_duration_seconds_bucket" in q.promql
    assert q.promql.endswith("* 1000.0")


def _vector(samples: list[tuple[dict[str, str], str]], ts: float = 2000.0) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [ts, v]} for m, v in samples]},
    }


def test_assemble_derives_batch_size_queue_time_and_age_and_leaves_gaps_nan() -> None:
    key = PoolKey("team-a", "chat", "llama")
    other = PoolKey("team-a", "silent", "llama")
    lbl = {"namespace": "team-a", "pool": "chat", "model": "llama"}
    raw = {
        "success_per_s": _vector([(lbl, "50")]),
        "inferences_per_s": _vector([(lbl, "200")]),
        "executions_per_s": _vector([(lbl, "25")]),
        "queue_us_per_s": _vector([(lbl, "100000")]),
        "newest_sample_s": _vector([(lbl, "1990")]),
        "p0.99_ms": _vector([(lbl, "NaN")]),
    }
    results = {name: prometheus.parse_vector(p, by_model=True)[0] for name, p in raw.items()}
    failures = prometheus.parse_failures(_vector([({**lbl, "reason": "REJECTED"}, "0.5")]))

    out = prometheus.assemble([key, other], results, failures, now_s=2000.0)

    s = out[key]
    assert s.avg_batch_size == 8.0  # 200 inferences / 25 executions
    assert s.queue_time_us == 2000.0  # 100000 µs/s of queueing / 50 requests/s
    assert s.age_s == 10.0
    assert math.isnan(s.p99_ms) and math.isnan(s.gpu_utilization)
    assert s.failure_rate_by_reason == {"REJECTED": 0.5}
    assert math.isinf(out[other].age_s)  # no series at all for this pool


def test_prometheus_error_payload_raises_with_its_message() -> None:
    with pytest.raises(MetricsUnavailable, match="bad_data: parse error"):
        prometheus.parse_vector(
            {"status": "error", "errorType": "bad_data", "error": "parse error"}, by_model=True
        )


async def test_unreachable_prometheus_raises_metrics_unavailable_naming_the_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = prometheus.PrometheusSource(PrometheusSettings(url=f"http://127.0.0.1:{port}", timeout_s=2))
    try:
        with pytest.raises(MetricsUnavailable, match=f"127.0.0.1:{port}"):
            await source.fetch([PoolKey("team-a", "chat", "llama")])
    finally:
        await source.close()


# ---------------------------------------------------------------------------------- node pools


def test_registry_selects_the_one_configured_provider(node_pool_body: Any) -> None:
    for provider, expected in [
        ({"fake": {}}, "fake"),
        ({"clusterAPI": {"namespace": "capi", "machineDeployment": "gpu"}}, "clusterAPI"),
        ({"placeholder": {"namespace": "warm"}}, "placeholder"),
    ]:
        spec = api.GPUNodePoolSpec.model_validate(node_pool_body(provider=provider)["spec"])
        assert registry.provider_name(spec) == expected
    assert set(registry.PROVIDERS) == {"clusterAPI", "fake", "kwok", "placeholder"}


def test_real_providers_refuse_to_run_without_a_client(node_pool_body: Any) -> None:
    spec = api.GPUNodePoolSpec.model_validate(
        node_pool_body(provider={"clusterAPI": {"namespace": "capi", "machinePool": "gpu"}})["spec"]
    )
    with pytest.raises(ProviderError, match="needs a Kubernetes client"):
        registry.build_provider("a100", spec, ProviderContext())


async def test_fake_provider_remembers_set_nodes(node_pool_body: Any) -> None:
    spec = api.GPUNodePoolSpec.model_validate(node_pool_body(provider={"fake": {"nodes": 3}})["spec"])
    ctx = ProviderContext()
    provider = registry.build_provider("a100", spec, ctx)
    assert await provider.get_nodes() == 3
    await provider.set_nodes(5)
    assert await registry.build_provider("a100", spec, ctx).get_nodes() == 5
    with pytest.raises(ProviderError):
        await provider.set_nodes(-1)


async def test_gpunodepool_status_reports_provider_nodes_and_gpus(world: Any, node_pool_body: Any) -> None:
    body = node_pool_body(provider={"fake": {"nodes": 3}}, gpusPerNode=4)
    result = await gpunodepool.reconcile(world.cluster, ProviderContext(), body, now=NOW)

    status = world.cluster.statuses[("gpunodepools", None, "a100")]
    assert (status["provider"], status["nodes"], status["gpus"]) == ("fake", 3, 12)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert result.ready


async def test_gpunodepool_with_two_providers_is_invalid(world: Any, node_pool_body: Any) -> None:
    body = node_pool_body(provider={"fake": {}, "placeholder": {"namespace": "warm"}})
    result = await gpunodepool.reconcile(world.cluster, ProviderContext(), body, now=NOW)

    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.provider" in ready["message"]
    assert [e.type for e in world.cluster.events] == ["Warning"]


# ------------------------------------------------------------------------------------- runner


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_run_flags_default_to_all_namespaces_standalone() -> None:
    settings = runner.settings_from_args(_parse())
    assert settings.all_namespaces and settings.standalone and settings.peering_name is None


def test_run_flags_namespaces_peering_and_ports() -> None:
    settings = runner.settings_from_args(
        _parse(
            "-n", "a", "--namespace", "b", "--peering", "pp", "--metrics-port", "9100", "--log-format", "json"
        )
    )
    assert settings.namespaces == ("a", "b")
    assert not settings.standalone and settings.peering_name == "pp"
    assert settings.metrics_port == 9100
    assert settings.log_format.value == "json"


def test_prometheus_url_defaults_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLPILOT_PROMETHEUS_URL", "http://prom.monitoring:9090")
    assert runner.settings_from_args(_parse()).prometheus.url == "http://prom.monitoring:9090"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--metrics-port", "70000"), "--metrics-port"),
        (("--liveness-port", "0"), "--liveness-port"),
        (("--prometheus-url", "prometheus:9090"), "--prometheus-url"),
        (("--metrics-window-seconds", "1"), "--metrics-window-seconds"),
    ],
)
def test_bad_flags_are_rejected_naming_the_flag(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        runner.settings_from_args(_parse(*argv))


def test_namespace_and_all_namespaces_are_exclusive() -> None:
    with pytest.raises(SystemExit):
        _parse("--namespace", "a", "--all-namespaces")


def test_settings_reject_peering_without_a_name_and_bad_urls() -> None:
    from poolpilot.settings import OperatorSettings

    with pytest.raises(ValueError, match="peering_name"):
        OperatorSettings(standalone=False)
    with pytest.raises(ValueError, match=r"prometheus\.url"):
        OperatorSettings(prometheus=PrometheusSettings(url="prometheus:9090"))


def test_run_exits_2_with_the_flag_named_on_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from poolpilot import cli

    assert cli.main(["run", "--metrics-port", "99999"]) == 2
    assert "--metrics-port: 99999" in capsys.readouterr().err
