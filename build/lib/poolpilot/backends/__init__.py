"""Everything PoolPilot reads from or writes to outside its own process, behind small Protocols.

Each backend family has a Protocol, an explicit registry (a literal dict) and a fake for unit tests:
`metrics` (signals from Prometheus), `nodepools` (GPU node counts), `workloads` (replicas via /scale),
`batching` (Triton dynamic-batcher settings), `kube` (status, events and lookups on the API server).
No kopf here: the kopf glue lives in `poolpilot.handlers`.
"""
