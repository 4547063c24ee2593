"""The `poolpilot` command: one entry point, each subcommand owned by the module that implements it.

Subcommand modules are imported lazily so that `poolpilot crds` does not pay for kopf, and the
operator image never needs the simulator's plotting stack.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, help). Each module defines `add_arguments(parser)` and `main(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("poolpilot.runner", "run the operator (wraps kopf with PoolPilot's settings)"),
    "crds": ("poolpilot.api.crdgen", "print the CustomResourceDefinitions generated from poolpilot.api"),
    "simulate": ("poolpilot.sim.cli", "replay a trace through the fleet simulator with policies in the loop"),
    "bench": ("poolpilot.sim.bench", "benchmark PoolPilot against HPA, KEDA, KPA, AIMD, static and oracle"),
    "loadgen": ("poolpilot.loadgen", "replay a trace open-loop against Triton-protocol servers"),
    "recommend": ("poolpilot.recommend", "print an InferencePool's recommendation as a patch to commit"),
    "sandbox": ("poolpilot.sandbox.cli", "a local cluster with running Triton pods: up, down, preempt NODE"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="poolpilot")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_main=module.main)
    args = parser.parse_args(argv)
    rc: int = args._main(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
