"""A deployable plan: tensor-parallel groups of a power-of-two size, nodes of 8, replicas.

The reference page's GPU count pools memory (total ÷ usable per GPU). A real deployment cannot:
each TP group holds a full copy of the weights, splits KV heads only while TP ≤ n_kv (beyond
that each rank keeps a replicated head), and serves a share of the users. For every TP size
this module finds how many users one group fits at full context and how many groups (replicas)
the users need; the plan is the option with the fewest GPUs (ties: the smaller TP, which
communicates less).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sizing.errors import SizingError
from hardware.gpus import GPU
from sizing.kv import DEFAULT_USABLE_FRACTION, KVCacheSpec, usable_bytes
from sizing.models import ModelShape, check_int
from sizing.precisions import Precision

GPUS_PER_NODE = 8  # HGX/DGX nodes carry 8 GPUs on one NVLink domain
MAX_TP = 64  # largest TP group considered: 8 nodes


@dataclass(frozen=True, kw_only=True)
class TPOption:
    """One TP size: what a group of ``tp`` GPUs holds, and how many groups the users need."""

    tp: int
    kv_heads_per_gpu: int
    kv_replication: int  # copies of each KV head (or MLA latent) across the group
    weights_per_gpu_bytes: int
    kv_per_user_per_gpu_bytes: int  # one user at full context, on one rank
    kv_budget_per_gpu_bytes: int  # usable − weights share; negative when weights do not fit
    users_per_replica: int
    replicas: int | None  # None: one group cannot hold even one user
    spans_nodes: bool  # the TP group crosses the node boundary (slow interconnect)

    @property
    def fits(self) -> bool:
        return self.replicas is not None

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.tp * self.replicas


@dataclass(frozen=True, kw_only=True)
class DeploymentPlan:
    """The chosen option (None when nothing fits up to :data:`MAX_TP`) and all those considered."""

    best: TPOption | None
    options: tuple[TPOption, ...]
    users: int
    context: int
    gpus_per_node: int

    @property
    def gpus(self) -> int | None:
        return None if self.best is None else self.best.gpus

    @property
    def nodes(self) -> int | None:
        return None if self.best is None else math.ceil(self.best.gpus / self.gpus_per_node)

    @property
    def summary(self) -> str:
        if self.best is None:
            return f"does not fit: even TP {self.options[-1].tp if self.options else MAX_TP} cannot hold one user"
        b = self.best
        nodes = self.nodes
        return (
            f"TP {b.tp} × {b.replicas} replica{'s' if b.replicas != 1 else ''} = {b.gpus} GPUs "
            f"on {nodes} node{'s' if nodes != 1 else ''} of {self.gpus_per_node}; "
            f"{b.users_per_replica:,} users per replica"
        )


def tp_sizes(model: ModelShape, max_tp: int = MAX_TP) -> tuple[int, ...]:
    """Powers of two up to ``max_tp`` that the model's KV heads allow (one divides the other)."""
    sizes = []
    tp = 1
    while tp <= max_tp:
        try:
            model.check_tp(tp)
        except SizingError:
            pass
        else:
            sizes.append(tp)
        tp *= 2
    return tuple(sizes)


def plan_deployment(
    *,
    model: ModelShape,
    kv_precision: Precision,
    weights_bytes: int,
    gpu: GPU,
    context: int,
    users: int,
    usable_fraction: float | Fraction = DEFAULT_USABLE_FRACTION,
    gpus_per_node: int = GPUS_PER_NODE,
    max_tp: int = MAX_TP,
) -> DeploymentPlan:
    """Options for every power-of-two TP and the cheapest one (fewest GPUs, then smaller TP).

    Weights are split evenly across the group (embeddings too: a close approximation).
    """
    check_int("context", context, high=1 << 40)
    check_int("users", users, high=1 << 40)
    check_int("gpus_per_node", gpus_per_node, high=1 << 10)
    usable = usable_bytes(gpu, usable_fraction)
    options = []
    for tp in tp_sizes(model, max_tp):
        spec = KVCacheSpec(model=model, precision=kv_precision, tp=tp)
        weights_per_gpu = Fraction(weights_bytes, tp)
        budget = usable - weights_per_gpu
        per_user = spec.sequence_bytes_per_gpu(context)
        per_replica = max(0, math.floor(budget / per_user)) if budget > 0 else 0
        options.append(
            TPOption(
                tp=tp,
                kv_heads_per_gpu=model.kv_heads_per_gpu(tp),
                kv_replication=model.kv_replication(tp),
                weights_per_gpu_bytes=math.ceil(weights_per_gpu),
                kv_per_user_per_gpu_bytes=math.ceil(per_user),
                kv_budget_per_gpu_bytes=math.floor(budget),
                users_per_replica=per_replica,
                replicas=math.ceil(users / per_replica) if per_replica else None,
                spans_nodes=tp > gpus_per_node,
            )
        )
    fitting = [o for o in options if o.fits]
    best = min(fitting, key=lambda o: (o.gpus, o.tp)) if fitting else None
    return DeploymentPlan(best=best, options=tuple(options), users=users, context=context, gpus_per_node=gpus_per_node)
