"""Triton Inference Server's behaviour, as PoolPilot relies on it (one implementation of each rule)."""

SUMMARY_WINDOW_S = 60.0
"""The window of Triton's latency summaries (`nv_inference_*_summary_us{quantile}`): prometheus-cpp's
`Summary` default max_age, which Triton does not set (docs/executor.md, "Metrics"). A PromQL query's window
does not change it. The executor emulates it; the operator's Prometheus source reports it with the p99."""
