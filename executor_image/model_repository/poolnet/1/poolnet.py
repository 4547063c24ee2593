"""PoolNet: the small deterministic torch model served by both the real Triton image and our CPU executor.

Why one module: the production image's Python-backend ``model.py`` and PoolPilot's CPU executor must
compute the same function, so tests on CPU say something about what runs on the GPU. Pure torch +
numpy, no Triton imports. Weights come from a seeded ``torch.Generator`` so every process, on every
machine and device, builds the same network without shipping a weights file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

FEATURES = 16
"""Width of INPUT0 / OUTPUT0 (the config's ``dims: [16]``; the batch dim is implicit)."""
HIDDEN = 64
DEFAULT_SEED = 20260101


class PoolNet(nn.Module):  # type: ignore[misc]
    """A two-layer MLP with a residual connection: ``y = x + W2·gelu(W1·x + b1) + b2``."""

    def __init__(self, features: int = FEATURES, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def build(seed: int = DEFAULT_SEED, device: str | torch.device = "cpu") -> PoolNet:
    """The network with weights drawn from a CPU generator seeded with ``seed`` (then moved to ``device``)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    model = PoolNet()
    with torch.no_grad():
        for param in model.parameters():
            # Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) like nn.Linear's default, but from our generator.
            fan_in = param.shape[-1] if param.dim() > 1 else FEATURES
            bound = 1.0 / float(np.sqrt(fan_in))
            param.copy_(torch.rand(param.shape, generator=gen, dtype=torch.float32) * 2 * bound - bound)
    return model.to(device).eval()


def forward_batch(model: PoolNet, batch: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Run one forward pass over a ``[b, 16]`` float32 batch; returns ``[b, 16]`` float32 on the host.

    Raises ValueError naming the shape problem, so a bad request can be answered with INVALID_ARG.
    """
    if batch.ndim != 2 or batch.shape[1] != FEATURES:
        raise ValueError(f"INPUT0 must have shape [batch, {FEATURES}], got {list(batch.shape)}")
    device = next(model.parameters()).device
    with torch.no_grad():
        x = torch.as_tensor(np.ascontiguousarray(batch, dtype=np.float32), device=device)
        y = model(x)
    out: npt.NDArray[np.float32] = y.detach().to("cpu").numpy().astype(np.float32, copy=False)
    return out
