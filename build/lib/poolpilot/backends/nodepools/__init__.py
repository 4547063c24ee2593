"""GPU node-pool providers: how a GPUNodePool's node count is read and changed.

One module per provider, a `NodePoolProvider` Protocol (`base.py`) and an explicit registry
(`registry.PROVIDERS`) keyed by the provider field of `GPUNodePool.spec.provider`.
"""
