"""`poolpilot recommend`: an InferencePool's recommendation as changes a person can commit.

For teams that keep their Triton fleet in Git and want pull requests instead of an operator changing it (run
the pool in `Recommend` mode): prints the target's replicas as a patch for the workload (a kustomize/`kubectl
patch` strategic-merge patch) and the recommended dynamic batching as the `config.pbtxt` fields it changes,
with the decision's reasons as comments. Reads only the InferencePool (its status holds everything).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from poolpilot.backends.batching import with_batching
from poolpilot.policy.types import BatchingConfig


class NoRecommendation(Exception):
    """The pool's status holds no recommendation yet (message says why and what to check)."""


@dataclass(frozen=True)
class Recommendation:
    namespace: str
    pool: str
    workload_patch: dict[str, Any]
    batching_config: dict[str, Any] | None  # Triton's JSON form: only the fields PoolPilot sets
    reasons: tuple[str, ...]
    predicted_p99_ms: float | None


def recommendation(pool: Mapping[str, Any]) -> Recommendation:
    """What the pool's status recommends (pure: the InferencePool object in, the patches out)."""
    meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
    name, namespace = meta.get("name", "?"), meta.get("namespace", "default")
    replicas = status.get("desiredReplicas")
    if replicas is None:
        raise NoRecommendation(
            f"InferencePool {namespace}/{name} has no recommendation yet (status.desiredReplicas is unset): "
            "check that the operator runs, that the pool is Recommend or Auto, and its conditions "
            f"(kubectl describe inferencepool {name} -n {namespace})"
        )
    target = spec.get("targetRef") or {}
    patch = {
        "apiVersion": target.get("apiVersion", "apps/v1"),
        "kind": target.get("kind", "Deployment"),
        "metadata": {"name": target.get("name"), "namespace": namespace},
        "spec": {"replicas": int(replicas)},
    }
    decision = status.get("lastDecision") or {}
    return Recommendation(
        namespace=namespace,
        pool=name,
        workload_patch=patch,
        batching_config=_batching(status.get("recommendedBatching")),
        reasons=tuple(decision.get("reasons") or ()),
        predicted_p99_ms=status.get("predictedP99Ms"),
    )


def _batching(wire: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not wire or wire.get("maxQueueDelayMicroseconds") is None:
        return None
    b = BatchingConfig(
        max_queue_delay_us=int(wire["maxQueueDelayMicroseconds"]),
        max_batch_size=int(wire.get("maxBatchSize") or 0),
        preferred_batch_sizes=tuple(int(x) for x in wire.get("preferredBatchSize") or ()),
        instance_count=max(1, int(wire.get("instanceCount") or 1)),
        queue_timeout_us=wire.get("queueTimeoutMicroseconds"),
        max_queue_size=int(wire.get("maxQueueSize") or 0),
    )
    return with_batching({}, b)


def render(rec: Recommendation) -> str:
    """The patch (YAML) with the batching as `config.pbtxt` text and the reasons, as comments."""
    lines = [f"# PoolPilot recommendation for InferencePool {rec.namespace}/{rec.pool}"]
    if rec.predicted_p99_ms is not None:
        lines.append(f"# predicted p99: {rec.predicted_p99_ms:.0f} ms")
    lines += [f"#   - {r}" for r in rec.reasons]
    if rec.batching_config is not None:
        lines.append("# config.pbtxt fields to set (dynamic_batching, instance_group count, max_batch_size):")
        lines += [f"#   {line}" for line in _config_text(rec.batching_config).splitlines()]
    lines.append(yaml.safe_dump(rec.workload_patch, sort_keys=False).rstrip())
    return "\n".join(lines) + "\n"


def _config_text(config: dict[str, Any]) -> str:
    """`config.pbtxt` text; Triton's JSON form where protobuf is not installed (the slim operator image)."""
    try:
        from poolpilot.triton.config import to_pbtxt
    except ImportError:
        return "(JSON form) " + json.dumps(config)
    return to_pbtxt(config)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the InferencePool")
    parser.add_argument("-n", "--namespace", default="default", help="its namespace (default: default)")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument(
        "-o", "--output", choices=("patch", "json"), default="patch", help="patch (YAML, comments) or json"
    )


def main(args: argparse.Namespace) -> int:
    import kubernetes

    try:
        if args.kubeconfig:
            kubernetes.config.load_kube_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
        else:
            try:
                kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
            except kubernetes.config.ConfigException:
                kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        api: Any = kubernetes.client.CustomObjectsApi()
        pool = api.get_namespaced_custom_object(
            "poolpilot.io", "v1alpha1", args.namespace, "inferencepools", args.name
        )
        rec = recommendation(pool)
    except kubernetes.client.ApiException as exc:
        print(
            f"poolpilot recommend: cannot read InferencePool {args.namespace}/{args.name}: "
            f"{exc.status} {exc.reason}",
            file=sys.stderr,
        )
        return 1
    except NoRecommendation as exc:
        print(f"poolpilot recommend: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(
            json.dumps(
                {
                    "workloadPatch": rec.workload_patch,
                    "batchingConfig": rec.batching_config,
                    "reasons": list(rec.reasons),
                    "predictedP99Ms": rec.predicted_p99_ms,
                },
                indent=2,
            )
        )
    else:
        sys.stdout.write(render(rec))
    return 0
