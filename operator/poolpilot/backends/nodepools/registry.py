"""The explicit provider registry: key = the field set under `GPUNodePool.spec.provider`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from poolpilot.api import types as api
from poolpilot.backends.nodepools import clusterapi, fake, kwok, placeholder
from poolpilot.backends.nodepools.base import NodePoolProvider, ProviderContext, ProviderError

ProviderFactory = Callable[[str, api.GPUNodePoolSpec, ProviderContext], NodePoolProvider]

PROVIDERS: Final[dict[str, ProviderFactory]] = {
    "clusterAPI": clusterapi.build,
    "fake": fake.build,
    "kwok": kwok.build,
    "placeholder": placeholder.build,
}


def provider_name(spec: api.GPUNodePoolSpec) -> str:
    """Which provider the spec selects; exactly one must be set (else ProviderError naming the field)."""
    chosen = [key for key in PROVIDERS if getattr(spec.provider, _ATTRS[key]) is not None]
    if len(chosen) != 1:
        found = ", ".join(chosen) or "none"
        raise ProviderError(
            f"spec.provider: set exactly one of {', '.join(sorted(PROVIDERS))} (found: {found})"
        )
    return chosen[0]


def build_provider(name: str, spec: api.GPUNodePoolSpec, ctx: ProviderContext) -> NodePoolProvider:
    return PROVIDERS[provider_name(spec)](name, spec, ctx)


_ATTRS: Final[dict[str, str]] = {
    "clusterAPI": "cluster_api",
    "fake": "fake",
    "kwok": "kwok",
    "placeholder": "placeholder",
}
