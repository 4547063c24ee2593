"""The node-pool provider contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class NodePoolProvider(Protocol):
    """Reads and sets how many GPU nodes a GPUNodePool has (or keeps warm)."""

    async def get_nodes(self) -> int:
        """Current desired node count. Raises `ProviderError` when the backing object is unreadable."""

    async def get_ready_nodes(self) -> int:
        """Nodes of the pool that are Ready (serving). Raises `ProviderError` when it cannot tell."""

    async def set_nodes(self, count: int) -> None:
        """Ask for `count` nodes. Idempotent; raises `ProviderError` on failure."""

    async def sync(self) -> None:
        """Keep the provider's own objects in line with the asked-for count when the cluster moved under
        them (placeholders after serving pods came or went); called every tick, a no-op for most."""


class ProviderError(Exception):
    """A provider could not read or change its node count; the message names the object."""


@dataclass
class ProviderContext:
    """What provider factories may use: the API client (None in unit tests) and the fake's memory."""

    api_client: Any = None
    fake_nodes: dict[str, int] = field(default_factory=dict)
