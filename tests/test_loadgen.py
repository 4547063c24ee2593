"""The load generator: schedules (pure) and open-loop sending against a real executor on loopback."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import prometheus_client.parser
import pytest
import tritonclient.http.aio as triton_aio

from poolpilot import loadgen, loads
from poolpilot.loadgen import schedule as loadgen_schedule
from poolpilot.loadgen.schedule import Arrival
from poolpilot.loads import LoadError
from poolpilot.sandbox.executor import ExecutorProcess, write_emulated_model

TRACE = Path("/work/shared/traces/AzureLLMInferenceTrace_conv.csv")
REPO_ROOT = Path(__file__).resolve().parents[1]


def _write_trace(
    path: Path, rows: list[str], header: str = "TIMESTAMP,ContextTokens,GeneratedTokens"
) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


# ---- schedules ----------------------------------------------------------------------------------


def test_trace_offsets_start_at_zero_and_keep_tokens(tmp_path: Path) -> None:
    trace = _write_trace(
        tmp_path / "t.csv",
        [
            "2023-11-16 18:15:46.5000000,374,44",
            "2023-11-16 18:15:47.0000000,396,109",
            "2023-11-16 18:15:49.5,10,1",
        ],
    )
    sched = loadgen_schedule.read_azure_trace(trace)
    assert [a.offset_s for a in sched] == pytest.approx([0.0, 0.5, 3.0])
    assert [(a.context_tokens, a.generated_tokens) for a in sched] == [(374, 44), (396, 109), (10, 1)]


def test_rate_scale_compresses_time_and_bounds_apply(tmp_path: Path) -> None:
    rows = [f"2023-11-16 18:00:{s:02d}.0,100,10" for s in range(0, 40, 2)]  # one every 2 s
    trace = _write_trace(tmp_path / "t.csv", rows)
    base = loadgen_schedule.read_azure_trace(trace)
    fast = loadgen_schedule.read_azure_trace(trace, rate_scale=4.0)
    assert [a.offset_s for a in fast] == pytest.approx([a.offset_s / 4 for a in base])
    assert loadgen_schedule.mean_rate_rps(fast) == pytest.approx(4 * loadgen_schedule.mean_rate_rps(base))
    assert len(loadgen_schedule.read_azure_trace(trace, rate_scale=4.0, duration_s=3.0)) == 6  # 0,.5,...,2.5
    assert len(loadgen_schedule.read_azure_trace(trace, max_requests=5)) == 5
    skipped = loadgen_schedule.read_azure_trace(trace, start_offset_s=10.0)
    assert len(skipped) == len(base) - 5 and skipped[0].offset_s == 0.0


def test_real_azure_trace_rate(tmp_path: Path) -> None:
    if not TRACE.exists():
        pytest.fail(f"shared trace missing: {TRACE}")
    sched = loadgen_schedule.read_azure_trace(TRACE)
    assert len(sched) == 19366
    offsets = np.array([a.offset_s for a in sched])
    assert np.all(np.diff(offsets) >= 0)
    # One hour of trace ⇒ a mean rate of a few requests per second.
    assert 3000 < offsets[-1] < 3700
    assert loadgen_schedule.mean_rate_rps(sched) == pytest.approx(len(sched) / offsets[-1], rel=1e-3)


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        (["2023-11-16 18:00:00,1,1"], "TIME,ContextTokens,GeneratedTokens", "header must be TIMESTAMP"),
        (["yesterday,1,1"], None, ":2: TIMESTAMP"),
        (["2023-11-16 18:00:00,1,1", "2023-11-16 18:00:01,x,1"], None, ":3: ContextTokens"),
        (["2023-11-16 18:00:00,1,-4"], None, "GeneratedTokens must be >= 0"),
        ([], None, "no rows"),
    ],
    ids=["bad header", "bad timestamp", "bad context tokens", "negative generated tokens", "empty"],
)
def test_bad_trace_names_the_field(tmp_path: Path, rows: list[str], header: str | None, message: str) -> None:
    trace = _write_trace(tmp_path / "t.csv", rows, *([header] if header else []))
    with pytest.raises(LoadError, match=message):
        loadgen_schedule.read_azure_trace(trace)


def test_synthetic_is_seeded() -> None:
    a = loadgen_schedule.synthetic("diurnal", base_rps=50, duration_s=20, seed=3)
    b = loadgen_schedule.synthetic("diurnal", base_rps=50, duration_s=20, seed=3)
    c = loadgen_schedule.synthetic("diurnal", base_rps=50, duration_s=20, seed=4)
    assert a == b
    assert a != c


def _count(sched: list[Arrival], lo: float, hi: float) -> int:
    return sum(lo <= a.offset_s < hi for a in sched)


def test_synthetic_shapes_follow_their_rate() -> None:
    base, dur = 200.0, 30.0
    const = loadgen_schedule.synthetic("constant", base_rps=base, duration_s=dur, seed=1)
    assert len(const) == pytest.approx(base * dur, rel=0.05)

    # step: 3x the base rate in the middle third.
    step = loadgen_schedule.synthetic("step", base_rps=base, duration_s=dur, seed=1)
    assert _count(step, 10, 20) / _count(step, 0, 10) == pytest.approx(3.0, rel=0.1)
    assert _count(step, 20, 30) / _count(step, 0, 10) == pytest.approx(1.0, rel=0.1)

    # diurnal: 0.3x at the ends, 2x at half-time.
    diurnal = loadgen_schedule.synthetic("diurnal", base_rps=base, duration_s=dur, seed=1)
    middle, edge = _count(diurnal, 14, 16), _count(diurnal, 0, 1) + _count(diurnal, 29, 30)
    assert middle / edge == pytest.approx(2.0 / 0.3, rel=0.2)
    assert all(0 <= a.offset_s < dur for a in diurnal)


def test_loadgen_sends_the_simulators_loads() -> None:
    """`loadgen --synthetic K` and `simulate --synthetic K` draw the same arrivals and tokens."""
    tokens = loads.load_default_tokens()
    for kind in loads.LOAD_SHAPES:
        sim = loads.synthetic(kind, duration_s=600.0, rate_scale=2.0, seed=7, token_source=tokens)
        sent = loadgen_schedule.synthetic(kind, duration_s=600.0, rate_scale=2.0, seed=7, token_source=tokens)
        assert [a.offset_s for a in sent] == sim.arrival_s.tolist()
        assert [a.context_tokens for a in sent] == sim.context_tokens.tolist()
        assert [a.generated_tokens for a in sent] == sim.generated_tokens.tolist()
    flash = loadgen_schedule.synthetic("flash", base_rps=100.0, duration_s=1000.0, seed=1)
    # flash: a crowd at 40 % ramping to 6x in 30 s, then decaying (120 s time constant).
    assert _count(flash, 430, 440) / _count(flash, 0, 400) * 40 == pytest.approx(6.0, rel=0.15)
    assert _count(flash, 900, 1000) / _count(flash, 0, 400) * 4 == pytest.approx(1.0, rel=0.1)


def test_synthetic_max_requests_and_bad_parameters() -> None:
    assert (
        len(loadgen_schedule.synthetic("constant", base_rps=100, duration_s=10, seed=0, max_requests=7)) == 7
    )
    with pytest.raises(LoadError, match="synthetic must be one of"):
        loadgen_schedule.synthetic("sawtooth", base_rps=1, duration_s=1, seed=0)
    with pytest.raises(LoadError, match="base_rps"):
        loadgen_schedule.synthetic("constant", base_rps=0, duration_s=1, seed=0)
    with pytest.raises(LoadError, match="max_requests"):
        loadgen_schedule.synthetic("constant", base_rps=1, duration_s=1, seed=0, max_requests=0)


def test_latency_buckets_resolve_ms_scale_p99() -> None:
    buckets = loadgen.LATENCY_BUCKETS_S
    assert list(buckets) == sorted(buckets)
    fine = [b for b in buckets if b <= 0.3]
    assert max(np.diff(fine)) <= 0.005 + 1e-9
    assert buckets[-1] >= 30


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"urls": ()}, "--url"),
        ({"urls": ("http://localhost:8000",)}, "--url must be host:port"),
        ({"model": ""}, "--model"),
        ({"batch_size": 0}, "--batch-size"),
        ({"max_in_flight": 0}, "--max-in-flight"),
    ],
)
def test_bad_config_names_the_option(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"urls": ("localhost:8000",), "model": "m"}
    with pytest.raises(loadgen.LoadgenError, match=message):
        loadgen.LoadgenConfig(**(base | kwargs))  # type: ignore[arg-type]


def test_cli_rejects_bad_url_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    loadgen.add_arguments(parser)
    args = parser.parse_args(["--url", "http://x:1", "--model", "m", "--synthetic", "constant"])
    assert loadgen.main(args) == 2
    assert "--url must be host:port" in capsys.readouterr().err


# ---- against a real executor on loopback --------------------------------------------------------


@pytest.fixture()
def emu_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_emulated_model(
        repo, "fast", latency_ms=(2.0, 0.1), max_batch_size=8, max_queue_delay_us=500, instance_count=2
    )
    # One request at a time, 150 ms each: answers come far slower than requests are sent.
    write_emulated_model(repo, "slow", latency_ms=(150.0, 0.0), max_batch_size=1, max_queue_delay_us=0)
    return repo


async def _stats(url: str, model: str) -> tuple[int, int]:
    async with triton_aio.InferenceServerClient(url) as client:
        stats = await client.get_inference_statistics(model)
    entry = stats["model_stats"][0]
    return int(entry["inference_count"]), int(entry["inference_stats"]["success"]["count"])


async def test_replay_counts_match_the_server_and_metrics(emu_repo: Path, executor_process) -> None:
    proc: ExecutorProcess = executor_process(emu_repo, ["fast"])
    schedule = loadgen_schedule.synthetic("constant", base_rps=100, duration_s=2.0, seed=5)
    metrics = loadgen.LoadgenMetrics()
    records: list[loadgen.RequestRecord] = []
    config = loadgen.LoadgenConfig(urls=(proc.url,), model="fast")

    report = await loadgen.run(config, schedule, metrics=metrics, records=records)

    assert report.sent == len(schedule) == len(records)
    assert report.succeeded == len(schedule), report.statuses
    assert report.statuses == {"success": len(schedule)}
    inference_count, success_count = await _stats(proc.url, "fast")
    assert success_count == inference_count == len(schedule)
    # The router-side histogram saw every success, and latencies are at least the emulated 2 ms.
    text = prometheus_client.generate_latest(metrics.registry).decode()
    families = {f.name: f for f in prometheus_client.parser.text_string_to_metric_families(text)}
    hist = families["poolpilot_loadgen_request_duration_seconds"]
    count = next(s.value for s in hist.samples if s.name.endswith("_count"))
    assert count == len(schedule)
    ok = next(
        s.value
        for s in families["poolpilot_loadgen_requests"].samples
        if s.name == "poolpilot_loadgen_requests_total" and s.labels["status"] == "success"
    )
    assert ok == len(schedule)
    assert min(r.latency_ms for r in records) >= 2.0
    assert report.intended_rate_rps == pytest.approx(loadgen_schedule.mean_rate_rps(schedule))


async def test_open_loop_sends_on_schedule_while_the_server_lags(emu_repo: Path, executor_process) -> None:
    """20 requests at 40 req/s into a server that answers one per 150 ms: sending must not wait."""
    proc: ExecutorProcess = executor_process(emu_repo, ["slow"])
    schedule = [Arrival(offset_s=i * 0.025) for i in range(20)]
    records: list[loadgen.RequestRecord] = []
    report = await loadgen.run(
        loadgen.LoadgenConfig(urls=(proc.url,), model="slow"), schedule, records=records
    )

    assert report.succeeded == 20
    sends = np.array([r.send_s for r in records])
    intended = np.array([r.intended_send_s for r in records])
    # A closed-loop client would need ~20 × 150 ms = 3 s to send them all; we send within the 0.475 s span.
    assert sends[-1] - sends[0] < 0.475 + 0.25
    assert np.max(sends - intended) < 0.2
    latencies = np.array([r.latency_ms for r in records])
    assert latencies[-1] > 10 * 150 * 0.8  # the last one queued behind the others on the server
    assert report.achieved_send_rate_rps == pytest.approx(report.intended_rate_rps, rel=0.35)


async def test_round_robin_over_two_executors(emu_repo: Path, executor_process) -> None:
    a: ExecutorProcess = executor_process(emu_repo, ["fast"])
    b: ExecutorProcess = executor_process(emu_repo, ["fast"])
    schedule = [Arrival(offset_s=i * 0.01) for i in range(30)]
    report = await loadgen.run(loadgen.LoadgenConfig(urls=(a.url, b.url), model="fast"), schedule)
    assert report.succeeded == 30
    assert (await _stats(a.url, "fast"))[1] == 15
    assert (await _stats(b.url, "fast"))[1] == 15


async def test_failures_are_counted_by_status(emu_repo: Path, executor_process) -> None:
    proc: ExecutorProcess = executor_process(emu_repo, ["fast"])
    # batch 16 > max_batch_size 8 is refused by build_inputs before anything is sent
    with pytest.raises(loadgen.LoadgenError, match="--batch-size 16 exceeds max_batch_size 8"):
        await loadgen.run(
            loadgen.LoadgenConfig(urls=(proc.url,), model="fast", batch_size=16), [Arrival(0.0)]
        )
    # A model the server does not have: the error names --model.
    with pytest.raises(loadgen.LoadgenError, match="--model 'nope'"):
        await loadgen.run(loadgen.LoadgenConfig(urls=(proc.url,), model="nope"), [Arrival(0.0)])
    # Half the requests to a port nobody listens on: counted, not raised.
    dead = f"127.0.0.1:{_closed_port()}"
    records: list[loadgen.RequestRecord] = []
    report = await loadgen.run(
        loadgen.LoadgenConfig(urls=(proc.url, dead), model="fast", request_timeout_s=5.0),
        [Arrival(offset_s=i * 0.01) for i in range(10)],
        records=records,
    )
    assert report.succeeded == 5
    assert report.statuses.get("connection_error") == 5
    assert {r.status for r in records if r.url == dead} == {"connection_error"}


def _closed_port() -> int:
    from poolpilot.sandbox.processes import free_port

    return free_port()


async def test_stop_event_ends_dispatch_early(emu_repo: Path, executor_process) -> None:
    proc: ExecutorProcess = executor_process(emu_repo, ["fast"])
    stop = asyncio.Event()
    schedule = [Arrival(offset_s=i * 0.01) for i in range(1000)]  # 10 s of schedule
    asyncio.get_running_loop().call_later(0.5, stop.set)
    report = await loadgen.run(loadgen.LoadgenConfig(urls=(proc.url,), model="fast"), schedule, stop=stop)
    assert report.stopped_early
    assert 20 < report.sent < 200
    assert report.succeeded == report.sent


def test_cli_writes_csv_and_json_summary(tmp_path: Path, emu_repo: Path, executor_process) -> None:
    proc: ExecutorProcess = executor_process(emu_repo, ["fast"])
    trace = _write_trace(
        tmp_path / "t.csv", [f"2023-11-16 18:00:00.{i:02d}0,100,10" for i in range(0, 100, 4)]
    )
    out_csv = tmp_path / "out.csv"
    result = subprocess.run(
        [
            sys.executable, "-m", "poolpilot.cli", "loadgen",
            "--url", proc.url, "--model", "fast", "--trace", str(trace), "--rate-scale", "0.5",
            "--max-requests", "20", "--csv", str(out_csv),
        ],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["sent"] == summary["succeeded"] == 20
    assert summary["intended_rate_rps"] == pytest.approx(12.5, rel=0.01)  # 25 req/s halved
    with out_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20
    assert {r["status"] for r in rows} == {"success"}
    assert all(float(r["latency_ms"]) > 0 for r in rows)
    assert float(rows[-1]["intended_send_s"]) == pytest.approx(19 * 0.08, abs=1e-6)
