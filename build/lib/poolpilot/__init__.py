"""PoolPilot: joint control of Triton dynamic batching, replicas and GPU nodes against a p99 objective."""

__version__ = "0.1.0"
