"""The fleet simulator: a trace through Triton-faithful pods on a GPU node pool, a policy in the loop.

Map of the package (each module's docstring has its contract):
- `traces`: the Azure CSV, rate multipliers (clone with jitter, or compress), seeded synthetic loads.
- `params.SimParams`: every number of a run (curve, node pool, lead times, scrape interval).
- `engine.FleetEngine`: the discrete-event fleet (router, per-pod `triton.batcher.BatchQueue`, pod and
  node lifecycle, reloads, billing) producing an `EngineOutput`.
- `signals`: scrapes → `PromStore` → `policy.types.Signals`, as Prometheus would answer the operator.
- `protocol`: `Observation` / `Action` / `Controller`; `controllers`: PoolPilot's real policy, a fixed fleet.
- `run.simulate(trace, factory, params) -> Result` and the metric definitions; `registry`: policies by name;
  `cli`: `poolpilot simulate`. Baselines, oracle, report and bench live in their own modules.
- `search.gallop_bisect`: the one "fewest that is enough" search (oracle, hindsight fleet, suite frontier).
"""
