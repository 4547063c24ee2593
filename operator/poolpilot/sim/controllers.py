"""Controllers owned by the simulator core: PoolPilot's real policy in the loop, and a fixed fleet.

`PoolPilotController` drives the operator's own pool tick (`poolpilot.policy.pool_tick`): every tick
it passes the workload's replicas (`obs.replicas`) and the `PoolState` the previous tick returned
(history, last changes, the fitted latency model, the last applied batching — what the operator keeps
in status), applies only `Decision.actions`, and sizes the node pool with
`poolpilot.policy.size_node_pool` from the decision's node demand, as the operator's GPUNodePool
reconcile does. The simulated node pool has one tenant (`paid_replicas_on` with no other GPUs). The spec
(`InferencePoolSpec`, `GPUNodePoolSpec`) is built from `SimParams`, i.e. from the CLI flags.
"""

from __future__ import annotations

from poolpilot.api.types import (
    BatchingSpec,
    GPUNodePoolSpec,
    InferencePoolSpec,
    IntRange,
    Mode,
    ModelSpec,
    NodePoolRef,
    ProviderSpec,
    QueuePolicySpec,
    ReplicaSpec,
    Shedding,
    SLOSpec,
    TargetRef,
)
from poolpilot.policy import paid_replicas_on, pool_tick, size_node_pool
from poolpilot.policy.types import BatchingConfig, PoolState
from poolpilot.sim.params import SimParams
from poolpilot.sim.protocol import Action, Observation

NODE_POOL_NAME = "sim-gpus"


def pool_spec(params: SimParams, *, mode: Mode = Mode.AUTO) -> InferencePoolSpec:
    """The InferencePool a user would write for the simulated pool (defaults elsewhere)."""
    return InferencePoolSpec(
        mode=mode,
        target_ref=TargetRef(name="sim-triton"),
        model=ModelSpec(name="sim-model", max_batch_size=params.model_max_batch_size),
        slo=SLOSpec(
            latency_quantile=params.latency_quantile,
            latency_target_ms=params.slo_ms,
            margin_ratio=params.margin_ratio,
            **(
                {}
                if params.pool_target_gpu_utilization is None
                else {"target_gpu_utilization": params.pool_target_gpu_utilization}
            ),
        ),
        replicas=ReplicaSpec(min=params.min_replicas, max=params.max_replicas),
        batching=BatchingSpec(queue_policy=QueuePolicySpec(shedding=Shedding(params.shedding))),
        node_pool=NodePoolRef(name=NODE_POOL_NAME, gpus_per_replica=params.gpus_per_replica),
    )


def node_pool_spec(params: SimParams) -> GPUNodePoolSpec:
    """The GPUNodePool the simulated pool draws on."""
    return GPUNodePoolSpec(
        provider=ProviderSpec(fake={}),
        gpus_per_node=params.gpus_per_node,
        nodes=IntRange(min=params.min_nodes, max=params.max_nodes),
        price_per_node_hour_usd=params.price_per_node_hour_usd,
        provisioning_seconds=round(params.node_provisioning_s),
    )


class PoolPilotController:
    """The operator's pool tick in the loop, state carried like the operator's status.

    `spec`, `node_pool` and `node_pool_name` replace the ones built from `SimParams` (the sandbox demo passes
    the InferencePool and GPUNodePool it applies, so both run the same spec); `initial_batching` is the
    batching the pods start with (Triton's default when None).
    """

    def __init__(
        self,
        params: SimParams,
        *,
        mode: Mode = Mode.AUTO,
        name: str = "poolpilot",
        spec: InferencePoolSpec | None = None,
        node_pool: GPUNodePoolSpec | None = None,
        node_pool_name: str = NODE_POOL_NAME,
        initial_batching: BatchingConfig | None = None,
    ) -> None:
        self.name = name
        self.spec = spec if spec is not None else pool_spec(params, mode=mode)
        self.node_pool = node_pool if node_pool is not None else node_pool_spec(params)
        self.node_pool_name = node_pool_name
        self.initial_batching = initial_batching
        self.interval_s = float(self.spec.tick_seconds)
        self.state: PoolState | None = None
        self.last_reasons: tuple[str, ...] = ()

    def step(self, obs: Observation) -> Action:
        # The simulated node pool has one tenant: every GPU on its requested nodes is this pool's.
        gpr = self.spec.node_pool.gpus_per_replica if self.spec.node_pool else 1
        paid = paid_replicas_on(self.node_pool, obs.nodes, 0, gpr)
        result = pool_tick(
            self.spec,
            self.state,
            obs.signals,
            obs.now_s,
            replicas=obs.replicas,
            batching=obs.batching,
            node_pool=self.node_pool,
            paid_replicas=paid,
        )
        decision, self.state = result.decision, result.state
        nodes: int | None = None
        reasons = decision.reasons
        if decision.node_demand is not None and self.spec.mode == Mode.AUTO:
            sized = size_node_pool(
                self.node_pool, [decision.node_demand], obs.nodes, name=self.node_pool_name
            )
            if sized.changed:
                nodes = sized.nodes
                reasons = (*reasons, *sized.reasons)
        self.last_reasons = reasons
        return Action(
            replicas=decision.replicas if "scale" in decision.actions else None,
            batching=decision.batching if "batching" in decision.actions else None,
            nodes=nodes,
            reasons=reasons,
        )


class FixedController:
    """A fleet that never changes: `replicas` pods with `batching` from t=0 (tests, what-if runs)."""

    def __init__(
        self,
        replicas: int,
        batching: BatchingConfig | None = None,
        *,
        name: str = "fixed",
        interval_s: float = 15.0,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.initial_replicas = replicas
        self.initial_batching = batching

    def step(self, obs: Observation) -> Action:
        return Action()
