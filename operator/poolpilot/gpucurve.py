"""The emulated GPU: one batch-latency curve for the simulator, the executor and the policy's prior.

One execution of a batch of `batch` inferences takes

    a_ms + b_ms · batch + token_ms_per_1k · max(0, T − token_ref) / 1000   ms

where T is the **largest** token count (context + generated) among the batch's requests. Why the
largest and not the sum: Triton's dynamic batcher forms one tensor per batch, so requests of
different lengths are padded to the longest one (ragged batching aside), and a batched LLM step is
done only when its longest sequence is done — the batch waits for its straggler. The per-request
cost up to `token_ref` tokens is already in `b_ms · batch`; the token term charges the straggler's
excess length to the whole batch (docs/gpu-curve.md has the full reasoning and what it leaves out).

Pure (no I/O, no clock): the policy layer may import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

DEFAULT_A_MS: Final = 50.0
DEFAULT_B_MS: Final = 2.19
DEFAULT_TOKEN_REF: Final = 2048
DEFAULT_TOKEN_MS_PER_1K: Final = 10.0
DEFAULT_INSTANCE_INTERFERENCE: Final = 0.8
"""Slowdown per other execution on the same GPU: a second instance buys ~10 % throughput."""


@dataclass(frozen=True, slots=True)
class GpuCurve:
    """Batch latency a + b·batch (+ the longest request's tokens above `token_ref`), in ms."""

    a_ms: float = DEFAULT_A_MS
    b_ms: float = DEFAULT_B_MS
    token_ms_per_1k: float = DEFAULT_TOKEN_MS_PER_1K
    token_ref: int = DEFAULT_TOKEN_REF
    instance_interference: float = DEFAULT_INSTANCE_INTERFERENCE

    def __post_init__(self) -> None:
        for name in ("a_ms", "b_ms", "token_ms_per_1k", "instance_interference"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if not isinstance(self.token_ref, int) or self.token_ref < 0:
            raise ValueError(f"token_ref must be an integer >= 0, got {self.token_ref!r}")

    def batch_ms(self, batch: int, max_tokens: int = 0) -> float:
        """Latency of one execution of `batch` inferences whose longest request has `max_tokens`."""
        ms = self.a_ms + self.b_ms * batch
        if max_tokens > self.token_ref:
            ms += (self.token_ms_per_1k / 1000.0) * (max_tokens - self.token_ref)
        return ms

    def shared_ms(self, ms: float, others: int) -> float:
        """An execution of `ms` alone that starts while `others` executions run on the same GPU (instance
        count > 1): (1 + instance_interference · others) times as long — the GPU's compute is shared."""
        return ms * (1.0 + self.instance_interference * others) if others > 0 else ms

    def curve_ms(self, batch: int) -> float:
        """Latency without the token term: what a capacity planner assumes."""
        return self.a_ms + self.b_ms * batch

    def without_tokens(self) -> GpuCurve:
        return GpuCurve(self.a_ms, self.b_ms, 0.0, self.token_ref, self.instance_interference)
