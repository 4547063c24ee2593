"""Shared fixtures: the real control plane and the real Prometheus live in poolpilot.testing."""

pytest_plugins = ["poolpilot.testing.fixtures"]
