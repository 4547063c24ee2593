"""The load generator (`poolpilot loadgen`): open-loop Triton traffic from the simulator's loads.

- `core`: the sender, its config, report, metrics and CLI;
- `schedule`: arrival schedules, built on `poolpilot.loads` (the same loads `simulate` runs);
- `routing`: where each request goes — fixed `--url`s, or a Service's ready endpoints (`--service`).
See docs/loadgen.md.
"""

from __future__ import annotations

from poolpilot.loadgen.core import (
    LATENCY_BUCKETS_S,
    LoadgenConfig,
    LoadgenError,
    LoadgenMetrics,
    LoadgenReport,
    RequestRecord,
    add_arguments,
    main,
    run,
    write_csv,
)

__all__ = [
    "LATENCY_BUCKETS_S",
    "LoadgenConfig",
    "LoadgenError",
    "LoadgenMetrics",
    "LoadgenReport",
    "RequestRecord",
    "add_arguments",
    "main",
    "run",
    "write_csv",
]
