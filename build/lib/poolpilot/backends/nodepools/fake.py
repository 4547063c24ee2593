"""In-memory provider for unit tests and for clusters without real GPU capacity (e2e sandboxes).

`spec.provider.fake: {nodes: N}` starts the pool at N nodes; later `set_nodes` calls are kept in
the operator's memory only.
"""

from __future__ import annotations

from typing import Any

from poolpilot.api import types as api
from poolpilot.backends.nodepools.base import ProviderContext, ProviderError


class FakeNodePool:
    def __init__(self, name: str, nodes: dict[str, int]) -> None:
        self._name = name
        self._nodes = nodes
        self.writes: list[int] = []

    async def get_nodes(self) -> int:
        return self._nodes[self._name]

    async def get_ready_nodes(self) -> int:
        return self._nodes[self._name]  # in memory, a node is Ready the moment it is asked for

    async def set_nodes(self, count: int) -> None:
        if count < 0:
            raise ProviderError(f"fake node pool {self._name}: node count {count} is negative")
        self.writes.append(count)
        self._nodes[self._name] = count

    async def sync(self) -> None:
        return None


def build(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> FakeNodePool:
    config: dict[str, Any] = spec.provider.fake or {}
    initial = config.get("nodes", spec.nodes.min)
    if not isinstance(initial, int) or isinstance(initial, bool) or initial < 0:
        raise ProviderError(f"spec.provider.fake.nodes: {initial!r} is not a non-negative integer")
    ctx.fake_nodes.setdefault(name, initial)
    return FakeNodePool(name, ctx.fake_nodes)
