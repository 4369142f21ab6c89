"""One recommended deployment in engine terms: TP × replicas, with the engine's per-GPU figures
and launch command at that TP.

For each TP size vLLM accepts (a power of two dividing the query heads, KV heads split or
replicated), one replica of ``tp`` GPUs serves as many concurrent requests of ``max_model_len``
tokens as its KV pool holds — ``floor(Maximum concurrency)`` — but never more than
``max_num_seqs``, the engine's own cap on running requests. The users need
``ceil(users / per replica)`` replicas. The recommendation is the option with the fewest GPUs
(ties: the smaller TP, which communicates less), as :mod:`sizing.plan` chooses for pooled
memory; its report is computed at that TP for the users one replica carries, so the figures,
the utilisation asked and the launch command on screen all describe the same replica.

This differs from the sizer's pooled GPU count, which divides total bytes by usable memory per
GPU: that count ignores that each replica holds its own copy of the weights and runs its own
activation and CUDA-graph reserve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from sizing.engine.capacity import MAX_ENGINE_TP, EngineReport, EngineRequest, plan_engine
from sizing.errors import SizingError
from sizing.models import check_int


@dataclass(frozen=True, kw_only=True)
class EngineOption:
    """One TP size: what one replica holds and how many replicas the users need.

    ``report`` is None when vLLM would refuse the TP (heads) or the KV pool holds no block;
    ``reason`` then says why.
    """

    tp: int
    report: EngineReport | None
    users_per_replica: int
    replicas: int | None
    reason: str = ""

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.tp * self.replicas

    def as_record(self) -> dict[str, Any]:
        r = self.report
        return {"tp": self.tp, "users_per_replica": self.users_per_replica, "replicas": self.replicas,
                "gpus": self.gpus, "max_concurrency": None if r is None else r.max_concurrency,
                "available_kv_bytes_per_gpu": None if r is None else r.available_kv_bytes_per_gpu,
                "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class EngineDeployment:
    """The options considered and the recommended one (None when no TP up to 64 serves one
    request). ``report`` is the engine at the recommended TP for the users one replica carries."""

    users: int
    options: tuple[EngineOption, ...]
    best: EngineOption | None
    report: EngineReport | None

    @property
    def gpus(self) -> int | None:
        return None if self.best is None else self.best.gpus

    @property
    def summary(self) -> str:
        if self.best is None:
            return "no TP up to 64 holds one request of this length"
        b = self.best
        return (f"TP {b.tp} × {b.replicas} replica{'s' if b.replicas != 1 else ''} = {b.gpus} GPUs; "
                f"{b.users_per_replica:,} concurrent requests per replica")

    def as_dict(self) -> dict[str, Any]:
        best = self.best
        return {"users": self.users, "summary": self.summary,
                "tp": None if best is None else best.tp, "replicas": None if best is None else best.replicas,
                "gpus": self.gpus, "users_per_replica": None if best is None else best.users_per_replica,
                "launch_command": None if self.report is None else self.report.launch_command,
                "launch_command_sglang": None if self.report is None else self.report.launch_command_sglang,
                "options": [o.as_record() for o in self.options]}


def _option(request: EngineRequest, tp: int, users: int) -> EngineOption:
    try:
        report = plan_engine(replace(request, tp=tp, users=None))
    except SizingError as exc:
        # At this TP the engine refuses the heads, or the weights leave no room for a block.
        budget = exc.field in ("gpu_memory_utilization", "kv_budget_gib_per_gpu")
        return EngineOption(tp=tp, report=None, users_per_replica=0, replicas=None,
                            reason="no KV block fits beside the weights" if budget else exc.message)
    per_replica = min(math.floor(report.max_concurrency), request.max_num_seqs) if report.fits_one_request else 0
    replicas = math.ceil(users / per_replica) if per_replica else None
    reason = "" if per_replica else "one request of max_model_len does not fit"
    return EngineOption(tp=tp, report=report, users_per_replica=per_replica, replicas=replicas, reason=reason)


def recommend_deployment(request: EngineRequest, users: int | None = None) -> EngineDeployment:
    """Every power-of-two TP up to :data:`MAX_ENGINE_TP` for ``users`` (default: the request's,
    else 1) concurrent requests of ``max_model_len`` tokens, and the cheapest.

    A measured ``kv_budget_bytes_per_gpu`` belongs to the request's own TP, so it is only
    applied there; the other TP sizes use the estimated profile.
    """
    wanted = users if users is not None else (request.users or 1)
    check_int("users", wanted, high=1 << 30)
    utilization = request.gpu_memory_utilization
    if not (isinstance(utilization, float | int) and not isinstance(utilization, bool) and 0 < utilization <= 1):
        raise SizingError("gpu_memory_utilization", f"must be above 0 and at most 1, got {utilization!r:.40}")
    options = []
    tp = 1
    while tp <= MAX_ENGINE_TP:
        at_tp = request if tp == request.tp else replace(request, kv_budget_bytes_per_gpu=None)
        options.append(_option(at_tp, tp, wanted))
        tp *= 2
    fitting = [o for o in options if o.replicas is not None]
    best = min(fitting, key=lambda o: (o.gpus, o.tp)) if fitting else None
    report = None
    if best is not None:
        at_best = request if best.tp == request.tp else replace(request, kv_budget_bytes_per_gpu=None)
        report = plan_engine(replace(at_best, tp=best.tp, users=math.ceil(wanted / best.replicas)))
    return EngineDeployment(users=wanted, options=tuple(options), best=best, report=report)


__all__ = ["EngineDeployment", "EngineOption", "recommend_deployment"]
