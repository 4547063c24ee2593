"""The chart's PrometheusRule and Grafana dashboard: generated from the code, naming metrics that exist, and
evaluated by a real Prometheus against a real executor under load (recording rules return the pool's series,
no rule errors, every dashboard query parses and runs)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.operator.conftest import PoolLabelledPrometheus

from poolpilot import loadgen, monitoring
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.reconcile import telemetry
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model
from poolpilot.sandbox.prometheus import find_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "poolpilot"


def test_chart_files_are_the_generated_ones() -> None:
    for rel, text in monitoring.render().items():
        assert (CHART / rel).read_text() == text, (
            f"{rel} is stale: python -m poolpilot.monitoring --chart {CHART}"
        )


def test_the_documented_scrape_config_and_the_podmonitor_are_the_generated_ones() -> None:
    assert (REPO / monitoring.SCRAPE_DOC).read_text() == monitoring.scrape_doc()
    import subprocess

    from poolpilot.sandbox.chart import helm_binary

    out = subprocess.run(
        [str(helm_binary()), "template", "pp", str(CHART), "--set", "podMonitor.enabled=true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    monitor = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PodMonitor")
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["relabelings"] == monitoring.podmonitor_relabelings()
    assert endpoint["port"] == monitoring.METRICS_PORT_NAME


def _families() -> set[str]:
    names = set()
    for family in telemetry.REGISTRY.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def test_every_operator_metric_they_use_exists() -> None:
    exported = _families()
    missing = [m for m in monitoring.OPERATOR_METRICS if m not in exported]
    assert missing == []
    exprs = [r["expr"] for g in monitoring.rule_file()["groups"] for r in g["rules"]]
    used = {
        m
        for e in [*exprs, *monitoring.dashboard_queries()]
        for m in re.findall(r"\bpoolpilot_[a-z0-9_]+\b(?!:)", e)
        if not m.startswith("poolpilot_pool:")
    }
    assert used - {"poolpilot_pool"} <= {*monitoring.OPERATOR_METRICS, "poolpilot_executor_tokens_total"}


class RulePrometheus(PoolLabelledPrometheus):
    """The tests' Prometheus with the chart's rule file loaded and evaluated every second."""

    def __init__(self, *args: Any, rule_file: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rule_file = rule_file

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["rule_files"] = [str(self.rule_file)]
        cfg["global"]["evaluation_interval"] = "1s"
        return cfg


@pytest.mark.prometheus
async def test_rules_and_dashboard_queries_run_on_a_real_prometheus(
    tmp_path: Path, executor_process: Any
) -> None:
    if find_binary() is None:
        pytest.fail("prometheus binary not found; install it with `apt-get install -y prometheus`")
    rules = json.loads(json.dumps(monitoring.rule_file()))
    for group in rules["groups"]:
        group["interval"] = "1s"  # the shipped 30 s, shortened so the test sees evaluations quickly
    rule_path = tmp_path / "rules.yaml"
    rule_path.write_text(json.dumps(rules))  # JSON is YAML

    repo = tmp_path / "models"
    write_emulated_model(repo, "emu", latency_ms=(3.0, 0.5), max_batch_size=16, max_queue_delay_us=4000)
    executor: ExecutorProcess = executor_process(repo, ["emu"])
    (tmp_path / "prom").mkdir()
    prom = RulePrometheus(
        {"triton": [executor.metrics_target]},
        scrape_interval_s=0.5,
        workdir=tmp_path / "prom",
        labels={"namespace": "team-a", "pool": "chat"},
        rule_file=rule_path,
    )
    with prom:
        prom.wait_for_targets_up()
        schedule = loadgen_schedule.synthetic("constant", base_rps=100, duration_s=4.0, seed=3)
        report = await loadgen.run(loadgen.LoadgenConfig(urls=(executor.url,), model="emu"), schedule)
        assert report.succeeded == len(schedule)

        deadline = time.monotonic() + 30
        while True:
            series = prom.query('poolpilot_pool:success_per_s{namespace="team-a",pool="chat"}')
            if series and float(series[0]["value"][1]) > 0:
                break
            assert time.monotonic() < deadline, "the recording rule never produced the pool's request rate"
            time.sleep(0.5)
        batch = prom.query('poolpilot_pool:inferences_per_s{pool="chat"} / poolpilot_pool:executions_per_s')
        assert batch and float(batch[0]["value"][1]) >= 1.0

        groups = prom.api("rules")["groups"]
        evaluated = [r for g in groups for r in g["rules"]]
        assert len(evaluated) == sum(len(g["rules"]) for g in rules["groups"])
        bad = [(r["name"], r.get("lastError")) for r in evaluated if r.get("health") == "err"]
        assert bad == []
        for expr in monitoring.dashboard_queries():
            prom.query(expr.replace("$namespace", ".*").replace("$pool", ".*"))  # raises on a PromQL error
