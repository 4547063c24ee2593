"""The generalization suite's seed sets, apart from `suite` so that the CLI can offer them without loading
the suite (its oracle and reactive reference cost ~50 ms of start-up to every `poolpilot bench`)."""

from __future__ import annotations

# Scenario i of a set draws from `numpy.random.default_rng(base + i)`. dev: develop on it (read with
# --explain, probes). heldout: report it. sealed: report it, never read a scenario's decisions — the set no
# mechanism was found on (docs/generalization.md, "Scenarios").
SEED_BASES: dict[str, int] = {"dev": 0, "heldout": 1_000_000, "sealed": 2_000_000}
