"""`poolpilot-executor`: a CPU Triton-protocol server whose flags mirror `tritonserver`'s.

Why mirror the flags: scripts, charts and the operator's e2e tests can swap the real Triton image
for this executor without changing the command line (see docs/executor.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from poolpilot.executor.metrics import MetricsSettings
from poolpilot.executor.repository import RepositoryError
from poolpilot.executor.server import ExecutorServer, ServerSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver-compatible flags (subset)."""
    parser.add_argument("--model-repository", required=True, type=Path, help="model repository directory")
    parser.add_argument("--http-port", type=int, default=8000, help="HTTP port (0 = pick a free one)")
    parser.add_argument("--metrics-port", type=int, default=8002, help="metrics port (0 = pick a free one)")
    parser.add_argument(
        "--host",
        "--http-address",
        dest="host",
        default="127.0.0.1",
        help="address to bind both ports (tritonserver's --http-address, whose default is 0.0.0.0)",
    )
    parser.add_argument(
        "--model-control-mode",
        choices=["none", "explicit"],
        default="none",
        help="none: load everything at start, load/unload API disabled; explicit: --load-model + API",
    )
    parser.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at start in explicit mode (repeatable; * = all)",
    )
    parser.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="summary_latencies=true, summary_quantiles=0.5:0.05,..., counter_latencies=false",
    )
    parser.add_argument(
        "--metrics-interval-ms",
        type=int,
        default=2000,
        help="GPU utilisation sampling interval (as tritonserver's flag)",
    )
    parser.add_argument(
        "--gpu-uuid", default="", help="gpu_uuid label of the emulated GPU (default from hostname)"
    )
    parser.add_argument("--log-verbose", type=int, default=0, help="1 = debug logging")


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Validate flags early, naming the flag on error."""
    if not args.model_repository.is_dir():
        raise ValueError(f"--model-repository: {args.model_repository} is not a directory")
    if args.load_model and args.model_control_mode != "explicit":
        raise ValueError("--load-model requires --model-control-mode=explicit")
    if args.metrics_interval_ms <= 0:
        raise ValueError("--metrics-interval-ms must be > 0")
    return ServerSettings(
        model_repository=args.model_repository,
        host=args.host,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        explicit=args.model_control_mode == "explicit",
        load_models=tuple(args.load_model),
        metrics=MetricsSettings.parse(args.metrics_config),
        metrics_interval_ms=args.metrics_interval_ms,
        gpu_uuid=args.gpu_uuid,
    )


async def _serve(settings: ServerSettings) -> None:
    server = ExecutorServer(settings)
    task = asyncio.create_task(server.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def run(args: argparse.Namespace) -> int:
    """Entry used by both the console script and `main`."""
    logging.basicConfig(
        level=logging.DEBUG if args.log_verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"poolpilot-executor: error: {exc}", file=sys.stderr)
        return 2
    for entry in settings.metrics.ignored:
        logging.getLogger("poolpilot.executor").warning(
            "--metrics-config %s accepted but not implemented", entry
        )
    try:
        asyncio.run(_serve(settings))
    except RepositoryError as exc:
        print(f"error: failed to load model: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="poolpilot-executor", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
