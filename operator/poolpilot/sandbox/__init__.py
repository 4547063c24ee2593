"""The local cluster PoolPilot runs and is tested in: control plane, Prometheus, executor processes.

A product feature (``poolpilot sandbox``), not test scaffolding: nothing here imports pytest; the
pytest glue lives under ``tests/``.
"""
