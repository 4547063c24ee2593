"""Typed spec and status of PoolPilot's two kinds: the single source of truth for the CRDs.

Pure: no I/O, no Kubernetes client. Python attribute names are snake_case with units in them;
the wire (CRD) names are camelCase aliases. The CRD YAML in `crds/` is generated from these models
(`poolpilot crds`), so a field's description, bounds and default live here and nowhere else.

Cross-field rules are declared once per model as `Rule`s: `poolpilot.api.crdgen` turns them into
CEL `x-kubernetes-validations` (enforced by the apiserver), and `_Model` checks the same rules in
Python (enforced when the operator, the simulator or a test builds a spec). Keep the CEL and the
Python predicate of a rule saying the same thing; tests/api run every invalid manifest through both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

GROUP: Final = "poolpilot.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

INFERENCE_POOL_KIND: Final = "InferencePool"
INFERENCE_POOL_PLURAL: Final = "inferencepools"
GPU_NODE_POOL_KIND: Final = "GPUNodePool"
GPU_NODE_POOL_PLURAL: Final = "gpunodepools"

# Bounds that keep status objects small and CEL cost estimates finite.
POLICY_STATE_MAX_BYTES: Final = 256 * 1024  # status.policyState, encoded; far above the policy's own bounds
CONDITIONS_MAX_ITEMS: Final = 16
REASONS_MAX_ITEMS: Final = 16
POOLS_MAX_ITEMS: Final = 512
PREFERRED_BATCH_SIZES_MAX_ITEMS: Final = 16
MAX_QUEUE_DELAY_CAP_US: Final = 10_000_000  # 10 s: past this a "batch window" is an outage

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_KIND = r"^[A-Z][A-Za-z0-9]*$"
_API_VERSION = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$"
)
_LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_CONDITION_TYPE = _LABEL_KEY
# A Triton model name is a directory in the model repository and a segment of /v2/models/<name>: no '/',
# no leading '.' (so never '.' or '..'), no leading '-'.
_MODEL_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


@dataclass(frozen=True, slots=True)
class Rule:
    """A cross-field rule, written once and enforced twice (CEL in the CRD, Python in pydantic).

    `field_path` is relative to the object the rule sits on (".min", ".batching.preferredBatchSizes");
    the apiserver reports the error there, and `poolpilot.api.validation` reports the same path.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field_path: str = ""
    reason: str = "FieldValueInvalid"


class _Model(BaseModel):
    """Wire-compatible base: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, use_enum_values=False
    )

    # Cross-field rules of this model (CEL + Python). Subclasses override.
    __rules__: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        for rule in type(self).__rules__:
            if not rule.check(self):
                raise PydanticCustomError("poolpilot_rule", rule.message, {"field_path": rule.field_path})
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if cls.__rules__:
            target["x-kubernetes-validations"] = [_cel(rule) for rule in cls.__rules__]
        return schema

    def to_wire(self) -> dict[str, Any]:
        """The object as the apiserver stores it: camelCase, JSON types, unset optionals omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class _StatusModel(_Model):
    """Status is written by the operator and read back; tolerate fields an older/newer build wrote."""

    model_config = ConfigDict(extra="ignore")

    def to_merge_patch(self) -> dict[str, Any]:
        """The status as a JSON merge patch body: unset fields are sent as null, which DELETES them.

        `to_wire()` omits unset fields, so a merge patch built from it would leave a stale value
        (yesterday's p99Ms) in place when a signal goes missing. Nulls nested in list items are
        harmless: the apiserver prunes nulls of non-nullable fields.
        """
        return self.model_dump(mode="json", by_alias=True)


def _cel(rule: Rule) -> dict[str, str]:
    out = {"rule": rule.cel, "message": rule.message}
    if rule.field_path:
        out["fieldPath"] = rule.field_path
    out["reason"] = rule.reason
    return out


def _finite_or_none(value: Any) -> Any:
    """Prometheus gives NaN for a missing series; JSON (and the status) cannot carry NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --------------------------------------------------------------------------------------------- enums


class Mode(StrEnum):
    """What the operator may do to a pool."""

    AUTO = "Auto"
    RECOMMEND = "Recommend"
    OFF = "Off"


class Shedding(StrEnum):
    """Whether PoolPilot may reject queued requests through Triton's queue-policy timeout."""

    OFF = "Off"
    HOPELESS = "Hopeless"


class CapacityType(StrEnum):
    """How the cloud sells the pool's nodes; Spot nodes can be pre-empted at any time."""

    ON_DEMAND = "OnDemand"
    SPOT = "Spot"


class SelectorOperator(StrEnum):
    """Operators of a Kubernetes label-selector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# ---------------------------------------------------------------------------------------- shared parts


class IntRange(_Model):
    """An inclusive integer range [min, max] the operator may move a setting within."""

    __rules__ = (
        Rule(
            cel="self.min <= self.max",
            message="min must be less than or equal to max",
            check=lambda r: r.min <= r.max,
            field_path=".min",
        ),
    )

    min: int = Field(ge=0, description="Lowest value the operator may set (inclusive).")
    max: int = Field(ge=0, description="Highest value the operator may set (inclusive); must be >= min.")


class LabelSelectorRequirement(_Model):
    """One requirement of a label selector (same semantics as metav1.LabelSelectorRequirement)."""

    __rules__ = (
        Rule(
            cel="(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
            message="values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
            check=lambda r: (r.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)) == bool(r.values),
            field_path=".values",
        ),
    )

    key: str = Field(max_length=317, pattern=_LABEL_KEY, description="Label key the requirement applies to.")
    operator: SelectorOperator = Field(description="How the key's value is compared with `values`.")
    values: list[Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default=[],
        max_length=64,
        description="Values to compare with; non-empty for In/NotIn, empty for Exists/DoesNotExist.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this requirement (Kubernetes semantics)."""
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in self.values
            case SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present


class LabelSelector(_Model):
    """A Kubernetes label selector; `{}` matches every object."""

    match_labels: dict[str, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default={},
        max_length=64,
        description="Labels that must all be present with exactly these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default=[],
        max_length=32,
        description="Requirements that must all hold, ANDed with matchLabels.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with `labels` is selected (all matchLabels and all matchExpressions hold)."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


# ----------------------------------------------------------------------------------- InferencePool spec


class TargetRef(_Model):
    """The Triton workload whose replicas PoolPilot scales (through its /scale subresource)."""

    api_version: str = Field(
        default="apps/v1",
        max_length=253,
        pattern=_API_VERSION,
        description="API version of the target, e.g. apps/v1.",
    )
    kind: str = Field(
        default="Deployment",
        max_length=63,
        pattern=_KIND,
        description="Kind of the target; any kind with a /scale subresource (Deployment, StatefulSet).",
    )
    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="Name of the target, in the InferencePool's own namespace.",
    )


class BatchLatencySpec(_Model):
    """The model's batch latency on one GPU with one instance: baseMs + perItemMs x batch (milliseconds)."""

    base_ms: float = Field(
        gt=0,
        le=600_000,
        description="Latency of a batch of one, less the per-item cost, in ms (the line's intercept).",
    )
    per_item_ms: float = Field(
        ge=0,
        le=600_000,
        description="Latency added by each further request in a batch, in ms (the line's slope).",
    )


class ModelSpec(_Model):
    """The Triton model the pool serves; batching changes are applied to this model on every pod."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=_MODEL_NAME,
        description="Model name in Triton's model repository (the name in /v2/models/<name>): letters, "
        "digits, '_', '-' and '.', not starting with '.' or '-' (it becomes a URL path segment).",
    )
    max_batch_size: int = Field(
        ge=1,
        le=4096,
        description="The model's max_batch_size; PoolPilot never configures a batch larger than this.",
    )
    http_port: int = Field(
        default=8000, ge=1, le=65535, description="Port of Triton's HTTP/REST endpoint on each pod."
    )
    batch_latency: BatchLatencySpec | None = Field(
        default=None,
        description="The model's batch latency as perf_analyzer or Model Analyzer measures it on this GPU: "
        "the policy's prior until the pool's own executions say otherwise (a slope is learned only once "
        "batch sizes spread). Unset: an A100-class decode step, 50 + 2.19 x batch ms.",
    )


class SLOSpec(_Model):
    """The latency objective and the utilisation the pool should run at while meeting it."""

    latency_quantile: float = Field(
        default=0.99,
        gt=0,
        lt=1,
        description="Quantile of request latency the objective is set on, strictly between 0 and 1 "
        "(0.99 = p99).",
    )
    latency_target_ms: float = Field(
        default=150.0,
        gt=0,
        le=600_000,
        description="Objective for the latency quantile, in milliseconds (end-to-end request latency).",
    )
    target_gpu_utilization: float = Field(
        default=1.0,
        gt=0,
        le=1,
        alias="targetGPUUtilization",
        description=(
            "Highest planned GPU busy fraction (0 < x <= 1). The default 1 leaves sizing to the latency "
            "objective alone; set it lower (0.7 is HPA's convention) to keep utilisation headroom as well."
        ),
    )
    margin_ratio: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description=(
            "Headroom kept below the latency target when planning (0.05 = plan for 95% of it). The "
            "measured p99 corrects the model every tick; the margin covers what is left (docs/policy.md)."
        ),
    )


class QueuePolicySpec(_Model):
    """Triton's default_queue_policy for the model: how long and how many requests may wait."""

    __rules__ = (
        Rule(
            cel="!has(self.timeoutMicroseconds) || !has(self.shedding) || self.shedding == 'Off'",
            message="shedding: Hopeless lets PoolPilot choose the timeout; it cannot be combined with "
            "timeoutMicroseconds (a fixed timeout)",
            check=lambda q: q.timeout_microseconds is None or q.shedding is Shedding.OFF,
            field_path=".shedding",
        ),
    )

    timeout_microseconds: int | None = Field(
        default=None,
        ge=0,
        le=3_600_000_000,
        description="Requests queued longer than this are rejected (Triton default_timeout_microseconds); "
        "unset = no timeout.",
    )
    max_queue_size: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Requests beyond this many queued are rejected at once; 0 = unbounded.",
    )
    shedding: Shedding = Field(
        default=Shedding.OFF,
        description="Off: PoolPilot never rejects a request (no timeout unless timeoutMicroseconds sets "
        "one). Hopeless: when long requests stall the queue, PoolPilot may set a queue timeout past which "
        "a waiting request can no longer meet the objective; such requests fail (REJECTED) instead of "
        "waiting.",
    )


class BatchingSpec(_Model):
    """Bounds within which PoolPilot tunes Triton's dynamic batcher."""

    __rules__ = (
        Rule(
            cel="!has(self.maxQueueDelayMicroseconds) || "
            f"self.maxQueueDelayMicroseconds.max <= {MAX_QUEUE_DELAY_CAP_US}",
            message=f"maxQueueDelayMicroseconds.max must be at most {MAX_QUEUE_DELAY_CAP_US} (10 s)",
            check=lambda b: b.max_queue_delay_microseconds.max <= MAX_QUEUE_DELAY_CAP_US,
            field_path=".maxQueueDelayMicroseconds.max",
        ),
        Rule(
            cel="!has(self.instanceCount) || self.instanceCount.min >= 1",
            message="instanceCount.min must be at least 1",
            check=lambda b: b.instance_count.min >= 1,
            field_path=".instanceCount.min",
        ),
        Rule(
            cel="!has(self.instanceCount) || self.instanceCount.max <= 16",
            message="instanceCount.max must be at most 16",
            check=lambda b: b.instance_count.max <= 16,
            field_path=".instanceCount.max",
        ),
    )

    max_queue_delay_microseconds: IntRange = Field(
        default=IntRange(min=0, max=50_000),
        description="Range for max_queue_delay_microseconds (how long the batcher waits to fill a batch), "
        "in microseconds; max at most 10000000.",
    )
    instance_count: IntRange = Field(
        default=IntRange(min=1, max=2),
        description="Range for instance_group.count (model instances per GPU); min >= 1, max <= 16.",
    )
    preferred_batch_sizes: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=PREFERRED_BATCH_SIZES_MAX_ITEMS,
        description="Fixed preferred_batch_size values (each <= model.maxBatchSize); unset = PoolPilot "
        "chooses them.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    queue_policy: QueuePolicySpec = Field(
        default=QueuePolicySpec(), description="Queue policy applied with every batching change."
    )
    min_seconds_between_changes: int = Field(
        default=120,
        ge=0,
        le=86_400,
        description="Rate limit on batching changes: each one reloads the model on every pod (about double "
        "GPU memory during the swap).",
    )

    @field_validator("preferred_batch_sizes")
    @classmethod
    def _positive_sizes(cls, sizes: list[int] | None) -> list[int] | None:
        if sizes is not None and len(set(sizes)) != len(sizes):
            raise ValueError("preferred batch sizes must be unique")
        return sizes


class ReplicaSpec(_Model):
    """Bounds on the target's replicas and how fast they may come down."""

    __rules__ = (
        Rule(
            cel="self.min <= self.max",
            message="replicas.min must be less than or equal to replicas.max",
            check=lambda r: r.min <= r.max,
            field_path=".min",
        ),
    )

    min: int = Field(default=1, ge=0, le=10_000, description="Fewest replicas; 0 allows scale to zero.")
    max: int = Field(default=32, ge=1, le=10_000, description="Most replicas; must be >= min.")
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="Scale down only to the highest recommendation of this many past seconds (as HPA does).",
    )


class NodePoolRef(_Model):
    """The GPUNodePool the pool's replicas run on; its nodes are sized for this pool's demand."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="Name of a cluster-scoped GPUNodePool whose namespaceSelector admits this namespace.",
    )
    gpus_per_replica: int = Field(
        default=1,
        ge=1,
        le=64,
        description="GPUs one replica requests; must fit on one node (<= gpusPerNode).",
    )


class CostSpec(_Model):
    """Cost guard rails."""

    max_cost_per_1k_tokens_usd: float | None = Field(
        default=None,
        gt=0,
        alias="maxCostPer1kTokensUSD",
        description="Ceiling on cost per 1000 tokens in US dollars; when the objective would need more, "
        "the pool reports it (condition CostLimited). Unset = no ceiling.",
    )


class InferencePoolSpec(_Model):
    """Desired state of an InferencePool: a Triton fleet kept on a latency objective at least GPU cost."""

    __rules__ = (
        Rule(
            cel="!has(self.batching) || !has(self.batching.preferredBatchSizes) || "
            "self.batching.preferredBatchSizes.all(s, s <= self.model.maxBatchSize)",
            message="every batching.preferredBatchSizes entry must be <= model.maxBatchSize",
            check=lambda s: (
                s.batching.preferred_batch_sizes is None
                or all(x <= s.model.max_batch_size for x in s.batching.preferred_batch_sizes)
            ),
            field_path=".batching.preferredBatchSizes",
        ),
    )

    mode: Mode = Field(
        default=Mode.AUTO,
        description="Auto: act on batching, replicas and nodes. Recommend: decide and report in status, "
        "touch nothing. Off: do nothing.",
    )
    target_ref: TargetRef = Field(description="The Triton Deployment (or other /scale target) to scale.")
    model: ModelSpec = Field(description="The Triton model served by the target.")
    slo: SLOSpec = Field(default=SLOSpec(), description="Latency objective and target GPU utilisation.")
    batching: BatchingSpec = Field(
        default=BatchingSpec(), description="Bounds for Triton dynamic-batching settings."
    )
    replicas: ReplicaSpec = Field(default=ReplicaSpec(), description="Bounds for the target's replicas.")
    node_pool: NodePoolRef | None = Field(
        default=None, description="GPU node pool to size for this pool; unset = nodes are not managed."
    )
    cost: CostSpec = Field(default=CostSpec(), description="Cost ceiling.")
    tick_seconds: int = Field(
        default=15, ge=5, le=600, description="How often the pool is observed and decided on, in seconds."
    )


# ------------------------------------------------------------------------------------- GPUNodePool spec


class ClusterAPIProvider(_Model):
    """Cluster API node group: PoolPilot sets the replicas of one MachineDeployment or MachinePool."""

    __rules__ = (
        Rule(
            cel="has(self.machineDeployment) != has(self.machinePool)",
            message="exactly one of machineDeployment or machinePool must be set",
            check=lambda p: (p.machine_deployment is None) != (p.machine_pool is None),
        ),
    )

    namespace: str = Field(
        max_length=63, pattern=_DNS_LABEL, description="Namespace of the MachineDeployment/MachinePool."
    )
    machine_deployment: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="Name of the MachineDeployment (set exactly one of machineDeployment, machinePool).",
    )
    machine_pool: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="Name of the MachinePool (set exactly one of machineDeployment, machinePool).",
    )


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(_Model):
    """A pod toleration (the subset of corev1.Toleration a placeholder needs to land on tainted GPU nodes)."""

    key: str = Field(default="", max_length=317, description="Taint key; empty with Exists tolerates all.")
    operator: TolerationOperator = Field(
        default=TolerationOperator.EQUAL, description="Exists (any value) or Equal (`value`)."
    )
    value: str = Field(default="", max_length=63, description="Taint value for the Equal operator.")
    effect: TaintEffect | None = Field(default=None, description="Taint effect; unset tolerates all effects.")


class PlaceholderProvider(_Model):
    """Low-priority placeholder pods that make Cluster Autoscaler / Karpenter keep warm GPU capacity.

    Each placeholder pod requests a whole node's GPUs; PoolPilot runs (nodes asked for − nodes already
    holding a serving GPU pod) of them, so the node autoscaler keeps the asked-for count and the serving
    pods pre-empt placeholders when they need the room.
    """

    namespace: str = Field(
        max_length=63, pattern=_DNS_LABEL, description="Namespace the placeholder pods are created in."
    )
    priority_class_name: str = Field(
        default="poolpilot-placeholder",
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="PriorityClass of the placeholder pods (created with `priority` when absent); must be "
        "lower than the serving pods' so they are pre-empted first.",
    )
    priority: int = Field(
        default=-5,
        ge=-10,
        le=-1,
        description="Value of the PriorityClass when PoolPilot creates it: below the serving pods' (0) and "
        "not below Cluster Autoscaler's expendable cutoff (-10), which would stop it scaling up for them.",
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default={},
        max_length=32,
        alias="nodeSelector",
        description="Labels of this pool's GPU nodes: placeholders are scheduled there and the pool's nodes "
        "are counted by them. Empty: every node with `nvidia.com/gpu` capacity.",
    )
    tolerations: list[Toleration] = Field(
        default=[],
        max_length=16,
        description="Tolerations of the placeholder pods, for GPU nodes with taints.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )


class Taint(_Model):
    """A node taint (corev1.Taint without timeAdded)."""

    key: str = Field(max_length=317, pattern=_LABEL_KEY, description="Taint key.")
    value: str = Field(default="", max_length=63, description="Taint value.")
    effect: TaintEffect = Field(description="NoSchedule, PreferNoSchedule or NoExecute.")


class KwokProvider(_Model):
    """kwok Nodes (local sandbox and tests only, like Karpenter's kwok cloud provider): PoolPilot creates
    Nodes that kwok keeps Ready without a kubelet, each with `gpusPerNode` GPUs, usable `provisioningSeconds`
    after they were asked for, cordoned then deleted when fewer are asked for."""

    node_labels: dict[str, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default={},
        max_length=32,
        alias="nodeLabels",
        description="Labels of the created Nodes (serving pods select the pool's nodes by them).",
    )
    taints: list[Taint] = Field(
        default=[],
        max_length=16,
        description="Taints of the created Nodes.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    drain_grace_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        alias="drainGraceSeconds",
        description="A node being removed is deleted once no pod runs on it, or after this long.",
    )


class ProviderSpec(_Model):
    """How the pool's node count is changed; exactly one provider is set."""

    __rules__ = (
        Rule(
            cel="(has(self.clusterAPI) ? 1 : 0) + (has(self.placeholder) ? 1 : 0) "
            "+ (has(self.kwok) ? 1 : 0) + (has(self.fake) ? 1 : 0) == 1",
            message="exactly one provider must be set: clusterAPI, placeholder, kwok or fake",
            check=lambda p: sum(x is not None for x in (p.cluster_api, p.placeholder, p.kwok, p.fake)) == 1,
        ),
    )

    cluster_api: ClusterAPIProvider | None = Field(
        default=None, alias="clusterAPI", description="Scale a Cluster API MachineDeployment or MachinePool."
    )
    placeholder: PlaceholderProvider | None = Field(
        default=None, description="Keep warm capacity with low-priority placeholder pods."
    )
    kwok: KwokProvider | None = Field(
        default=None, description="kwok Nodes for the local sandbox and tests (no real machines)."
    )
    fake: dict[str, Any] | None = Field(
        default=None,
        description="In-memory provider for unit tests: records the node count, touches nothing. Free-form "
        "settings.",
    )

    @property
    def name(self) -> str:
        """Wire name of the configured provider (shown in GPUNodePool's Provider column via status)."""
        if self.cluster_api is not None:
            return "clusterAPI"
        if self.placeholder is not None:
            return "placeholder"
        if self.kwok is not None:
            return "kwok"
        return "fake"


class GPUNodePoolSpec(_Model):
    """Desired state of a GPUNodePool: a cluster-scoped group of identical GPU nodes PoolPilot may resize."""

    provider: ProviderSpec = Field(description="How nodes are added and removed; exactly one provider.")
    gpus_per_node: int = Field(default=8, ge=1, le=64, alias="gpusPerNode", description="GPUs on each node.")
    nodes: IntRange = Field(
        default=IntRange(min=0, max=16), description="Range for the node count; min <= max."
    )
    price_per_node_hour_usd: float = Field(
        ge=0,
        alias="pricePerNodeHourUSD",
        description="Price of one node for one hour in US dollars; used for cost per 1k tokens.",
    )
    capacity_type: CapacityType = Field(
        default=CapacityType.ON_DEMAND, description="OnDemand or Spot (Spot nodes may be pre-empted)."
    )
    provisioning_seconds: int = Field(
        default=300,
        ge=0,
        le=7200,
        description="Expected time from asking for a node to a GPU pod running on it; node counts lead "
        "demand by this much.",
    )
    namespace_selector: LabelSelector | None = Field(
        default=None,
        description="Namespaces whose InferencePools may draw on this pool. Unset admits NO namespace "
        "(cost safety); {} admits every namespace.",
    )

    def admits_namespace(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with `labels` may draw on this pool: unset selector admits none, {} all."""
        return self.namespace_selector is not None and self.namespace_selector.matches(labels)


# -------------------------------------------------------------------------------------------- status


class Condition(_StatusModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(
        max_length=316, pattern=_CONDITION_TYPE, description="Type of condition in CamelCase, e.g. Ready."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=_CONDITION_REASON,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable detail.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed from."
    )


class StatusBatching(_StatusModel):
    """Batching settings last applied (Auto) or recommended (Recommend) for every pod of the pool."""

    max_queue_delay_microseconds: int | None = Field(
        default=None, ge=0, description="Triton max_queue_delay_microseconds."
    )
    max_batch_size: int | None = Field(default=None, ge=0, description="Triton max_batch_size.")
    preferred_batch_size: list[int] | None = Field(
        default=None,
        max_length=PREFERRED_BATCH_SIZES_MAX_ITEMS,
        description="Triton preferred_batch_size (a list, as in Triton's model config).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    instance_count: int | None = Field(default=None, ge=0, description="Triton instance_group count.")
    queue_timeout_microseconds: int | None = Field(
        default=None, ge=0, description="Triton default_queue_policy.default_timeout_microseconds."
    )
    max_queue_size: int | None = Field(
        default=None, ge=0, description="Triton default_queue_policy.max_queue_size (absent = unbounded)."
    )


class StatusSignals(_StatusModel):
    """What the last tick measured; a field is absent when its series was missing."""

    p99_ms: float | None = Field(
        default=None, ge=0, description="Measured latency at spec.slo.latencyQuantile, in milliseconds."
    )
    request_rate_per_second: float | None = Field(
        default=None, ge=0, description="Requests per second over the whole pool."
    )
    gpu_utilization: float | None = Field(default=None, ge=0, description="Mean GPU busy fraction, 0..1.")
    queue_time_ms: float | None = Field(
        default=None, ge=0, description="Mean time a request waited in Triton's queue, in milliseconds."
    )
    avg_batch_size: float | None = Field(default=None, ge=0, description="Inferences per execution.")
    observed_at: datetime | None = Field(default=None, description="Time of the newest sample used.")

    @field_validator(
        "p99_ms",
        "request_rate_per_second",
        "gpu_utilization",
        "queue_time_ms",
        "avg_batch_size",
        mode="before",
    )
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return _finite_or_none(value)


class StatusLatencyModel(_StatusModel):
    """The fitted latency model (a summary for people; the full state is in `policyState`)."""

    a_ms: float = Field(description="Fixed cost of one execution, in milliseconds.")
    b_ms: float = Field(description="Added cost per request in the batch, in milliseconds.")
    correction: float = Field(default=1.0, gt=0, description="Measured / predicted p99 ratio applied.")
    offset_ms: float | None = Field(
        default=None, description="Measured minus predicted p99 added to predictions, in milliseconds."
    )

    @field_validator("offset_ms", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return _finite_or_none(value)


class RolloutPhase(StrEnum):
    """Where a batching rollout stands (absent rollout = every Ready pod runs `status.batching`)."""

    PROGRESSING = "Progressing"
    ROLLING_BACK = "RollingBack"


class Rollout(_StatusModel):
    """A batching change being rolled out pod by pod (or rolled back); survives operator restarts."""

    phase: RolloutPhase = Field(description="Progressing (to target) or RollingBack (to previous).")
    target: StatusBatching = Field(description="The setting being rolled out.")
    previous: StatusBatching | None = Field(
        default=None, description="The setting the pods ran before; what a failure rolls back to."
    )
    started_at: datetime = Field(description="When the rollout started.")
    updated_replicas: int = Field(default=0, ge=0, description="Ready pods already running the target.")
    total_replicas: int = Field(default=0, ge=0, description="Ready pods the rollout must reach.")
    message: str = Field(default="", max_length=4096, description="Progress, or why it is rolling back.")


class NodeDemand(_StatusModel):
    """GPUs this pool needs from its GPUNodePool; the node-pool reconcile sums these over all pools."""

    node_pool: str = Field(max_length=253, description="The GPUNodePool the demand is on.")
    gpus_now: int = Field(ge=0, alias="gpusNow", description="GPUs the pool needs now.")
    gpus_ahead: int = Field(
        ge=0, alias="gpusAhead", description="GPUs the pool needs one node lead time from now (forecast)."
    )
    gpus_per_replica: int = Field(default=1, ge=1, description="GPUs of one replica (the packing unit).")
    hold: bool = Field(
        default=False,
        description="True when the pool cannot decide (metrics missing, Recommend mode): the node pool "
        "must not shrink on its account.",
    )
    time: datetime = Field(description="When the demand was computed; an old demand is treated as hold.")


class LastDecision(_StatusModel):
    """The last decision and why it was made."""

    time: datetime = Field(description="When the decision was made.")
    action: str = Field(
        max_length=128, description="What was decided, e.g. ScaleUp, ScaleDown, ChangeBatching, Hold."
    )
    reasons: list[Annotated[str, Field(max_length=1024)]] = Field(
        default=[],
        max_length=REASONS_MAX_ITEMS,
        description="Why, in terms a person can check (figures included).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )


class InferencePoolStatus(_StatusModel):
    """Observed state of an InferencePool, written by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation of the spec the operator last acted on."
    )
    mode: Mode | None = Field(default=None, description="Mode the last tick ran in.")
    replicas: int | None = Field(default=None, ge=0, description="Replicas of the target now (spec).")
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Ready pods that run the pool's batching setting (the capacity)."
    )
    desired_replicas: int | None = Field(
        default=None, ge=0, description="Replicas the last decision asked for (or recommended)."
    )
    batching: StatusBatching | None = Field(
        default=None, description="Batching setting the pool's pods run (or are being rolled out to)."
    )
    recommended_batching: StatusBatching | None = Field(
        default=None, description="Batching setting the last decision chose (applied in Auto mode only)."
    )
    rollout: Rollout | None = Field(default=None, description="The batching rollout in progress, if any.")
    node_demand: NodeDemand | None = Field(
        default=None, description="GPUs this pool needs from its GPUNodePool (absent without nodePool)."
    )
    signals: StatusSignals | None = Field(default=None, description="Signals of the last tick.")
    predicted_p99_ms: float | None = Field(
        default=None, ge=0, description="Latency quantile predicted for the chosen settings, in milliseconds."
    )
    cost_per_1k_tokens_usd: float | None = Field(
        default=None,
        ge=0,
        alias="costPer1kTokensUSD",
        description="GPU cost per 1000 tokens served at the current rate, in US dollars (absent when no "
        "token metric is available).",
    )
    latency_model: StatusLatencyModel | None = Field(default=None, description="Fitted latency model.")
    last_decision: LastDecision | None = Field(default=None, description="Last decision and its reasons.")
    last_batching_change_time: datetime | None = Field(
        default=None, description="When batching was last changed (rate limit)."
    )
    last_scale_time: datetime | None = Field(default=None, description="When replicas were last changed.")
    policy_state: dict[str, Any] | None = Field(
        default=None,
        description="The policy's memory (latency-model fit sums, offsets, floors, tabu list, history with "
        "rates, cooldown times), persisted so a restarted operator decides as if it had never stopped. "
        "Written by the operator; its shape is versioned (`version`) and may change between releases.",
    )
    conditions: list[Condition] = Field(
        default=[],
        max_length=CONDITIONS_MAX_ITEMS,
        description="Standard conditions: Ready, Active, MetricsAvailable, BatchingApplied, ScalingLimited, "
        "CostLimited, ...",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )

    @field_validator("predicted_p99_ms", "cost_per_1k_tokens_usd", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return _finite_or_none(value)


class PoolDemand(_StatusModel):
    """GPU demand one InferencePool puts on a node pool."""

    namespace: str = Field(max_length=63, description="Namespace of the InferencePool.")
    name: str = Field(max_length=253, description="Name of the InferencePool.")
    gpus: int = Field(ge=0, description="GPUs the pool needs now (replicas x gpusPerReplica).")
    gpus_ahead: int | None = Field(
        default=None, ge=0, alias="gpusAhead", description="GPUs the pool needs one node lead time ahead."
    )
    gpus_per_replica: int | None = Field(
        default=None,
        ge=1,
        alias="gpusPerReplica",
        description="GPUs of one of the pool's replicas (the packing unit); absent means 1.",
    )
    hold: bool | None = Field(
        default=None, description="True when the pool's demand may not shrink the node pool (see NodeDemand)."
    )


class GPUNodePoolStatus(_StatusModel):
    """Observed state of a GPUNodePool, written by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation of the spec the operator last acted on."
    )
    provider: str | None = Field(
        default=None,
        max_length=63,
        description="Which provider is configured (clusterAPI, placeholder, fake).",
    )
    nodes: int | None = Field(default=None, ge=0, description="Nodes the provider reports now.")
    desired_nodes: int | None = Field(default=None, ge=0, description="Nodes last asked of the provider.")
    ready_nodes: int | None = Field(default=None, ge=0, description="Nodes that are Ready.")
    gpus: int | None = Field(default=None, ge=0, description="GPUs on the current nodes.")
    demand_gpus: int | None = Field(
        default=None, ge=0, alias="demandGPUs", description="GPUs all admitted InferencePools need, summed."
    )
    last_scale_time: datetime | None = Field(
        default=None, description="When the operator last changed the node count (provisioning clock)."
    )
    pools: list[PoolDemand] = Field(
        default=[],
        max_length=POOLS_MAX_ITEMS,
        description="InferencePools drawing on this node pool and their GPU demand.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["namespace", "name"],
        },
    )
    conditions: list[Condition] = Field(
        default=[],
        max_length=CONDITIONS_MAX_ITEMS,
        description="Standard conditions: Ready, ProviderReady, NodesReady, NodesLimited.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
