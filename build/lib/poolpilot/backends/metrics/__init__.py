"""Metric sources: one call per tick returns `Signals` for every pool (see `base.MetricSource`)."""
