"""`poolpilot_executor_tokens_total`: the token throughput the operator reads for cost per 1k tokens
(`--tokens-metric`), counted over successful requests only, beside Triton's own counters."""

from __future__ import annotations

import contextlib
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from poolpilot.executor.metrics import TOKENS_COUNTER
from poolpilot.sandbox.executor import running_executor


def _tokens_counter(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    family = TOKENS_COUNTER.removesuffix("_total")  # the parser names a counter family without `_total`
    return {
        s.labels["model"]: float(s.value)
        for f in text_string_to_metric_families(text)
        if f.name == family and f.type == "counter"
        for s in f.samples
        if s.name == TOKENS_COUNTER
    }


def test_tokens_of_successful_requests_are_counted_per_model(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "tok" / "1").mkdir(parents=True)
    (root / "tok" / "config.pbtxt").write_text(
        """
backend: "python"
max_batch_size: 8
input [ { name: "TOKENS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { }
parameters { key: "emulated_batch_latency_ms" value: { string_value: "1,0" } }
"""
    )
    sent = [7, 300, 1, 2048]
    with running_executor(root) as proc:
        assert _tokens_counter(proc.metrics_url) == {}  # no series before any token is served
        client = httpclient.InferenceServerClient(proc.url)
        for tokens in sent:
            inp = httpclient.InferInput("TOKENS", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[tokens]], dtype=np.int32))
            client.infer("tok", [inp])
        bad = httpclient.InferInput("TOKENS", [1, 2], "INT32")  # wrong shape: refused, not counted
        bad.set_data_from_numpy(np.array([[5, 5]], dtype=np.int32))
        with contextlib.suppress(InferenceServerException):
            client.infer("tok", [bad])
        client.close()
        assert _tokens_counter(proc.metrics_url) == {"tok": float(sum(sent))}
