"""Checks the CRD schema cannot express, and parsing that reports problems instead of raising.

The apiserver enforces everything local to one object (types, bounds, CEL rules). What needs another
object — the referenced GPUNodePool exists and admits the pool's namespace, the target workload
exists — is checked here, on objects the caller already fetched (pure: no I/O). Every problem is a
`(field_path, message)` pair whose path uses wire names (`spec.replicas.max`), so it can go straight
into a condition message or an Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from poolpilot.api import types


class Problem(NamedTuple):
    """One thing wrong with an object: where (wire field path) and what."""

    field_path: str
    message: str

    def __str__(self) -> str:
        return f"{self.field_path}: {self.message}"


def problems_from_error(error: ValidationError, prefix: str = "spec") -> list[Problem]:
    """Pydantic errors as wire field paths (`spec.batching.maxQueueDelayMicroseconds.min`)."""
    out: list[Problem] = []
    for err in error.errors(include_url=False):
        path = prefix
        for part in err["loc"]:
            path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}"
        ctx = err.get("ctx") or {}
        if err["type"] == "poolpilot_rule":
            path += str(ctx.get("field_path", ""))
        message = err["msg"].removeprefix("Value error, ")
        out.append(Problem(path, message))
    return out


_M = TypeVar("_M", bound=BaseModel)


def _parse_spec(body: Any, model: type[_M], kind: str) -> tuple[_M | None, list[Problem]]:
    if not isinstance(body, Mapping):
        return None, [Problem("", f"a {kind} must be a mapping, got {type(body).__name__}")]
    problems: list[Problem] = []
    api_version = body.get("apiVersion")
    if api_version is not None and api_version != types.API_VERSION:
        problems.append(Problem("apiVersion", f"must be {types.API_VERSION}, got {api_version!r}"))
    found_kind = body.get("kind")
    if found_kind is not None and found_kind != kind:
        problems.append(Problem("kind", f"must be {kind}, got {found_kind!r}"))
    spec = body.get("spec")
    if spec is None:
        return None, [*problems, Problem("spec", "required field is missing")]
    if not isinstance(spec, Mapping):
        return None, [*problems, Problem("spec", f"must be a mapping, got {type(spec).__name__}")]
    try:
        # Wire names only, as the apiserver: `target_ref` in a manifest is an unknown field there too.
        parsed = model.model_validate(dict(spec), by_alias=True, by_name=False)
    except ValidationError as err:
        return None, [*problems, *problems_from_error(err)]
    return (parsed if not problems else None), problems


def parse_inference_pool(body: Any) -> tuple[types.InferencePoolSpec | None, list[Problem]]:
    """Typed spec of a raw InferencePool body, or None and the problems (never raises)."""
    return _parse_spec(body, types.InferencePoolSpec, types.INFERENCE_POOL_KIND)


def parse_gpu_node_pool(body: Any) -> tuple[types.GPUNodePoolSpec | None, list[Problem]]:
    """Typed spec of a raw GPUNodePool body, or None and the problems (never raises)."""
    return _parse_spec(body, types.GPUNodePoolSpec, types.GPU_NODE_POOL_KIND)


def check_inference_pool(
    body: Any,
    *,
    namespace_labels: Mapping[str, str],
    target: Mapping[str, Any] | None,
    node_pool: Mapping[str, Any] | None,
) -> list[Problem]:
    """Everything wrong with an InferencePool, given the objects it refers to (already fetched).

    `target` is the workload named by spec.targetRef (None when it does not exist); `node_pool` is
    the GPUNodePool named by spec.nodePool.name (None when it does not exist, or when the pool names
    none); `namespace_labels` are the labels of the pool's namespace.
    """
    spec, problems = parse_inference_pool(body)
    if spec is None:
        return problems
    namespace = str(body.get("metadata", {}).get("namespace", ""))
    ref = spec.target_ref
    if target is None:
        problems.append(Problem("spec.targetRef.name", f"{ref.kind} {namespace}/{ref.name} not found"))
    elif target.get("kind") not in (None, ref.kind):
        problems.append(
            Problem("spec.targetRef.kind", f"is {ref.kind} but the target is a {target.get('kind')}")
        )
    if spec.node_pool is not None:
        problems.extend(_check_node_pool(spec.node_pool, node_pool, namespace, namespace_labels))
    return problems


def _check_node_pool(
    ref: types.NodePoolRef,
    body: Mapping[str, Any] | None,
    namespace: str,
    namespace_labels: Mapping[str, str],
) -> list[Problem]:
    where = "spec.nodePool.name"
    if body is None:
        return [Problem(where, f"GPUNodePool {ref.name!r} not found")]
    pool, pool_problems = parse_gpu_node_pool(body)
    if pool is None:
        first = pool_problems[0] if pool_problems else Problem("", "invalid")
        return [Problem(where, f"GPUNodePool {ref.name!r} is invalid ({first})")]
    if not pool.admits_namespace(namespace_labels):
        why = (
            "its namespaceSelector is unset, which admits no namespace"
            if pool.namespace_selector is None
            else "its namespaceSelector does not match the namespace's labels"
        )
        return [Problem(where, f"GPUNodePool {ref.name!r} does not admit namespace {namespace!r}: {why}")]
    if ref.gpus_per_replica > pool.gpus_per_node:
        return [
            Problem(
                "spec.nodePool.gpusPerReplica",
                f"{ref.gpus_per_replica} GPUs per replica do not fit on one node of GPUNodePool "
                f"{ref.name!r} ({pool.gpus_per_node} GPUs per node)",
            )
        ]
    return []
