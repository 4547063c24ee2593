"""The CPU executor: a Triton-protocol server (`poolpilot-executor`); see docs/executor.md."""
