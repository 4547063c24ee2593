"""PoolPilot's API: the typed spec/status of InferencePool and GPUNodePool, and their CRDs.

Modules: `types` (pydantic models, the single source of truth), `conditions` (pure condition
helpers and reason constants), `validation` (cross-object checks, parsing that returns problems),
`crdgen` (CRD YAML generated from `types`; the `poolpilot crds` subcommand).
Pure: no I/O, no clock, no Kubernetes client.
"""
