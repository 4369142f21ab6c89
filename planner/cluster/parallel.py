"""Per-GPU memory of one model under a vLLM parallel layout, each figure with its formula.

A layout is ``tp`` tensor-parallel ranks × ``pp`` pipeline stages × ``dp`` data-parallel
attention ranks; GPUs in all = TP × PP × DP. Expert parallelism adds no GPUs (it changes how the
routed experts are spread over a stage's TP × DP ranks), and neither does decode context
parallelism (it reuses the TP ranks). Per GPU of pipeline stage ``s``, which holds ``L_s`` of the
model's ``L`` layers as vLLM splits them (:mod:`sizing.engine.pipeline`)::

    weights           = dense × L_s/L ÷ TP + routed experts × L_s/L ÷ (TP × DP)
    KV per token      = the stage's per-token KV on one TP rank (sizing.kv) ÷ DCP
    users per DP rank = min over stages ⌊KV budget ÷ one sequence's KV on one GPU⌋
    users in all      = DP × users per DP rank

* **dense** — every weight outside the routed experts (attention, embeddings, dense MLPs, shared
  experts, norms): split by TP; each DP rank keeps its own copy, because each runs attention for
  its own sequences. Without experts, DP ranks are plain replicas.
* **routed experts** — vLLM's fused MoE shards them over all TP × DP ranks of a stage: whole
  experts per rank with ``--enable-expert-parallel`` (EP size = TP × DP), each expert's matrices
  split without it (vllm/model_executor/layers/fused_moe/config.py, ``FusedMoEParallelConfig``).
* **KV** — GQA heads split by TP while TP ≤ n_kv, replicated beyond; the MLA latent is replicated
  on every TP rank (:mod:`sizing.models`). A DP rank holds whole sequences of its own, so an MLA
  model at TP 1 × DP 8 holds eight times the sequences of TP 8 at the same per-GPU budget.
* **DCP** — ``--decode-context-parallel-size`` spreads one sequence's tokens over the TP ranks that
  would otherwise hold copies of the same heads: per-GPU KV ÷ DCP (an even share; vLLM's token
  interleave leaves one rank at most one token more per layer). A recurrent state has no tokens
  to spread and stays as TP leaves it.

Each stage's weights are a proportional share by layers, as :func:`~sizing.engine.pipeline.pipeline_stage`
places parameters (embeddings and the dense leading layers of a MoE are not placed exactly).
``router_imbalance`` (≥ 1) only reports the most-loaded EP rank's share of routed tokens; it
changes no memory figure. Bytes are exact :class:`~fractions.Fraction` s, as in :mod:`sizing.kv`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizing.engine.pipeline import MAX_PP, parse_layer_partition, pipeline_stage, stage_layer_counts
from sizing.errors import SizingError
from sizing.hf_config import estimate_params, load_config, parse_hf_config
from sizing.kv import KVCacheSpec, exact
from sizing.models import MAX_TOKENS, MAX_TP_RANKS, ModelShape, check_int
from sizing.precisions import Precision
from sizing.weights import engine_weight_bytes
from units import format_number, format_up_to_giga

MAX_DP = 1024  # data-parallel ranks: several times the widest expert-parallel deployments published


@dataclass(frozen=True, kw_only=True)
class ParallelLayout:
    """How one model is spread over GPUs, as vLLM's launch options name it.

    Attributes
    ----------
    tp : int
        ``--tensor-parallel-size``: ranks splitting each layer (attention heads, dense matrices).
    pp : int
        ``--pipeline-parallel-size``: stages, each holding consecutive layers.
    pp_layer_partition : str or None
        ``VLLM_PP_LAYER_PARTITION`` ("16,15,15,15"): layers per stage; None: vLLM's default split.
    dp : int
        ``--data-parallel-size``: attention ranks, each with its own sequences and KV cache.
    ep : bool or int
        ``--enable-expert-parallel``: True, or the EP size, which vLLM fixes at TP × DP.
    dcp : int
        ``--decode-context-parallel-size``: TP ranks sharing one sequence's tokens.
    router_imbalance : float or Fraction
        The most-loaded EP rank's routed tokens ÷ the even share (1: perfectly balanced).
    """

    tp: int = 1
    pp: int = 1
    pp_layer_partition: str | None = None
    dp: int = 1
    ep: bool | int = False
    dcp: int = 1
    router_imbalance: float | Fraction = 1

    def __post_init__(self) -> None:
        check_int("tp", self.tp, high=MAX_TP_RANKS)
        check_int("pp", self.pp, high=MAX_PP)
        check_int("dp", self.dp, high=MAX_DP)
        check_int("dcp", self.dcp, high=MAX_TP_RANKS)
        if not isinstance(self.ep, bool):
            check_int("ep", self.ep, high=MAX_TP_RANKS * MAX_DP)
            # vLLM has no EP size of its own: the expert-parallel group is every TP × DP rank.
            if self.ep != self.tp * self.dp:
                raise SizingError("ep", f"EP {self.ep} must equal TP {self.tp} × DP {self.dp} = "
                                        f"{self.tp * self.dp}: vLLM's expert-parallel group is every TP × DP rank")
        # vLLM refuses a DCP size that does not divide the TP size, since DCP reuses the TP
        # ranks (vllm/config/parallel.py).
        if self.tp % self.dcp:
            raise SizingError("dcp", f"DCP {self.dcp} must divide TP {self.tp}: decode context parallelism "
                                     f"reuses the TP ranks")
        imbalance = exact(self.router_imbalance, "router_imbalance")
        if imbalance < 1:
            raise SizingError("router_imbalance", f"must be at least 1 (an even load), got {float(imbalance):g}")
        if imbalance > self.ep_size:
            # The most-loaded rank takes imbalance ÷ EP of the routed tokens, at most all of them;
            # without EP every rank holds a slice of every expert and sees every token.
            raise SizingError("router_imbalance", f"{float(imbalance):g} exceeds the EP size, {self.ep_size}: the "
                                                  f"most-loaded rank would take more than all routed tokens")
        object.__setattr__(self, "router_imbalance", imbalance)

    @property
    def gpus(self) -> int:
        """GPUs in all: TP × PP × DP (expert and decode context parallelism add none)."""
        return self.tp * self.pp * self.dp

    @property
    def expert_parallel(self) -> bool:
        """Whether experts are spread whole over ranks; vLLM uses EP only over more than one rank."""
        return bool(self.ep) and self.tp * self.dp > 1

    @property
    def ep_size(self) -> int:
        """Ranks of one stage that share the routed experts as whole experts (1 without EP)."""
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def hottest_rank_share(self) -> Fraction:
        """The most-loaded EP rank's share of the routed tokens: imbalance ÷ EP (without EP, 1:
        every rank sees every token). A load figure only; no memory term uses it."""
        return self.router_imbalance / self.ep_size


@dataclass(frozen=True, kw_only=True)
class UsableMemory:
    """Weights + KV memory of one GPU of a stage: ``bytes`` (exact) and ``basis``, the words of
    the rule that gave it, which the KV budget's formula quotes ("reference formula: 0.9 × the
    vendor's 141 GB", "vLLM's memory profile at TP 2: …")."""

    bytes: Fraction
    basis: str


# A stage's usable memory from its index and the part of the model it holds
# (:func:`~sizing.engine.pipeline.pipeline_stage`); called once the layout is validated.
UsableForStage = Callable[[int, ModelShape], UsableMemory]


@dataclass(frozen=True, kw_only=True)
class Term:
    """One figure: ``value`` in ``unit`` and the ``formula`` that gives it, numbers substituted."""

    name: str
    value: Fraction
    unit: str  # "bytes", "bytes/token", "sequences", "GPUs", "parameters", "share"
    formula: str

    @property
    def text(self) -> str:
        """``"KV per token per GPU: 80 layers × … = 20 KiB"``."""
        return f"{self.name}: {self.formula} = {_show(self.value, self.unit)}"


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """One pipeline stage, per GPU of it. Bytes are exact; ``concurrency`` is sequences.

    Attributes
    ----------
    stage, first_layer, layers : int
        0-based stage, its first decoder layer, and how many layers it holds.
    dense_weight_bytes_per_gpu, expert_weight_bytes_per_gpu : Fraction
        Bytes of the dense weights and of the routed experts one GPU of the stage holds.
    kv_bytes_per_token_per_gpu : Fraction
        KV bytes one token costs on one GPU (while within every sliding window), after DCP.
    kv_bytes_per_sequence_per_gpu : Fraction
        One sequence of ``context`` tokens on one GPU: windows capped, recurrent state included.
    kv_budget_bytes_per_gpu : Fraction or None
        KV memory of one GPU (given, or usable memory less the weights); None when neither given.
    concurrency : Fraction or None
        Budget ÷ per-sequence bytes: sequences of ``context`` tokens one DP rank holds here.
    """

    stage: int
    first_layer: int
    layers: int
    dense_weight_bytes_per_gpu: Fraction
    expert_weight_bytes_per_gpu: Fraction
    kv_bytes_per_token_per_gpu: Fraction
    kv_bytes_per_sequence_per_gpu: Fraction
    kv_budget_bytes_per_gpu: Fraction | None
    concurrency: Fraction | None
    terms: tuple[Term, ...]

    @property
    def weight_bytes_per_gpu(self) -> Fraction:
        return self.dense_weight_bytes_per_gpu + self.expert_weight_bytes_per_gpu


@dataclass(frozen=True, kw_only=True)
class ParallelMemory:
    """A layout's per-GPU memory: one :class:`StageMemory` per stage and the layout-wide figures.

    ``routed_expert_params`` (parameters, not bytes) came from ``expert_params_source``:
    ``"given"`` (the caller's count, e.g. :func:`routed_expert_params` of the config),
    ``"estimate"`` (from the shape's total and active parameters) or ``"dense"`` (no experts).
    """

    model: str
    layout: ParallelLayout
    context: int
    routed_expert_params: int
    expert_params_source: str
    stages: tuple[StageMemory, ...]
    terms: tuple[Term, ...]

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def weight_bytes_per_gpu(self) -> Fraction:
        """The heaviest stage's weights on one GPU, bytes."""
        return max(s.weight_bytes_per_gpu for s in self.stages)

    @property
    def kv_bytes_per_token_per_gpu(self) -> Fraction:
        """The heaviest stage's KV bytes per token on one GPU."""
        return max(s.kv_bytes_per_token_per_gpu for s in self.stages)

    @property
    def concurrency_per_dp_rank(self) -> Fraction | None:
        """Sequences of ``context`` tokens one DP rank holds (unrounded): its sequences pass
        through every stage, so the stage that holds the fewest sets it; None without a budget."""
        if self.stages[0].concurrency is None:
            return None
        return max(Fraction(0), _fewest(self.stages).concurrency)

    @property
    def users_per_dp_rank(self) -> int | None:
        """Whole sequences of ``context`` tokens per DP rank (per replica for a dense model)."""
        c = self.concurrency_per_dp_rank
        return None if c is None else math.floor(c)

    @property
    def concurrency_total(self) -> Fraction | None:
        """DP × sequences per DP rank, unrounded (vLLM prints each DP rank's own figure)."""
        c = self.concurrency_per_dp_rank
        return None if c is None else self.layout.dp * c

    @property
    def users_total(self) -> int | None:
        u = self.users_per_dp_rank
        return None if u is None else self.layout.dp * u


def routed_expert_params(config: bytes | str | Mapping[str, Any]) -> int:
    """Parameters in the routed experts of every MoE layer of a Hugging Face config (0: dense).

    :mod:`sizing.hf_config` owns the count: its estimate with every expert active less its
    estimate with none leaves exactly experts × per-expert parameters × MoE layers.
    """
    cfg = load_config(config)
    experts = parse_hf_config(cfg).num_experts
    if not experts:
        return 0
    every = estimate_params({**cfg, "num_experts_per_tok": experts}).active
    return every - estimate_params({**cfg, "num_experts_per_tok": 0}).active


def parallel_memory(
    model: ModelShape,
    layout: ParallelLayout,
    *,
    kv_precision: Precision,
    weight_precision: Precision,
    context: int,
    routed_params: int | None = None,
    kv_budget_bytes_per_gpu: int | float | Fraction | None = None,
    usable_bytes_per_gpu: int | float | Fraction | UsableForStage | None = None,
    auto_weights: bool = False,
) -> ParallelMemory:
    """Per-GPU weights, KV bytes and users of ``model`` under ``layout`` (module docstring).

    ``routed_params``: the routed experts' parameters (:func:`routed_expert_params`); None for a
    MoE estimates them from the shape. Give at most one of ``kv_budget_bytes_per_gpu`` (the KV
    memory of every GPU, e.g. vLLM's "Available KV cache memory") and ``usable_bytes_per_gpu``
    (weights + KV memory of one GPU; the budget is what each stage's weights leave of it): bytes,
    the same on every stage, or a function of the stage's index and model part giving its
    :class:`UsableMemory` (the cluster plan's engine profile, whose last stage runs the sampler).
    ``auto_weights``: the checkpoint's own weight bytes (:func:`sizing.weights.engine_weight_bytes`).
    Invalid combinations raise :class:`~sizing.errors.SizingError` naming the layout field.
    """
    check_int("context", context, high=MAX_TOKENS)
    partition = _validate(model, layout)
    experts, source = _expert_params(model, routed_params)
    total = Fraction(engine_weight_bytes(model, weight_precision, auto=auto_weights).bytes)
    expert_bytes = min(total, experts * weight_precision.bytes_per_value)
    budget, usable = _budget_inputs(kv_budget_bytes_per_gpu, usable_bytes_per_gpu)
    counts = stage_layer_counts(model.layers, layout.pp, partition)
    stages = tuple(
        _stage(model, layout, stage, counts, partition, kv_precision, context,
               dense=total - expert_bytes, experts=expert_bytes, budget=budget, usable=usable)
        for stage in range(layout.pp))
    return ParallelMemory(model=model.name, layout=layout, context=context, routed_expert_params=experts,
                          expert_params_source=source, stages=stages,
                          terms=_layout_terms(layout, model, stages, experts, source))


def _validate(model: ModelShape, layout: ParallelLayout) -> tuple[int, ...] | None:
    """The model-dependent refusals; returns the PP partition as layer counts (None: default)."""
    tp, dcp = layout.tp, layout.dcp
    # vLLM refuses a TP size that does not divide the query heads (vllm/config/model.py).
    if model.q_heads % tp:
        raise SizingError("tp", f"TP {tp} does not divide the {model.q_heads} query heads")
    model.check_tp(tp)  # the KV heads (and a recurrent state) must split or replicate evenly
    partition = None
    if layout.pp_layer_partition is not None:
        partition = parse_layer_partition(layout.pp_layer_partition, model.layers, layout.pp)
    if layout.ep and not model.is_moe:
        # vLLM refuses expert parallelism on a model without experts (vllm/config/model.py).
        raise SizingError("ep", f"expert parallelism needs routed experts; {model.name[:40]} is dense")
    if layout.expert_parallel and model.num_experts % layout.ep_size:
        # vLLM itself would give the first ranks one expert more; one per-GPU figure needs
        # equal ranks, so an uneven split is refused here.
        raise SizingError("ep", f"EP {layout.ep_size} (TP × DP) does not divide the {model.num_experts} "
                                f"experts evenly")
    if dcp > 1 and not model.kv_lora_rank:
        # vLLM refuses DCP on GQA/MQA unless TP replicates the KV heads, and then caps it at
        # the copies TP makes and at a divisor of the query heads per KV head (vllm/config/model.py).
        kv = model.kv_heads
        if tp <= kv:
            raise SizingError("dcp", f"DCP needs TP > the {kv} KV heads (TP {tp} replicates none of them)")
        if dcp > tp // kv:
            raise SizingError("dcp", f"DCP {dcp} exceeds TP {tp} ÷ {kv} KV heads = {tp // kv} copies of each head")
        if (model.q_heads // kv) % dcp:
            raise SizingError("dcp", f"DCP {dcp} does not divide the {model.q_heads // kv} query heads per KV head")
    return partition


def _expert_params(model: ModelShape, given: int | None) -> tuple[int, str]:
    if not model.is_moe:
        if given:
            raise SizingError("routed_params", f"{model.name[:40]} has no routed experts")
        return 0, "dense"
    if given is not None:
        return check_int("routed_params", given, low=0, high=model.params), "given"
    inactive = model.num_experts - model.experts_per_token
    if model.active_params is None or inactive <= 0:
        raise SizingError("routed_params", "needed: the shape gives no inactive experts to estimate them from")
    # total − active = (experts − top-k) × one expert's parameters × MoE layers.
    return (model.params - model.active_params) * model.num_experts // inactive, "estimate"


def _budget_inputs(kv_budget: object, usable: object) -> tuple[Fraction | None, Fraction | UsableForStage | None]:
    if kv_budget is not None and usable is not None:
        raise SizingError("kv_budget_bytes_per_gpu", "give the KV budget or the usable memory, not both")
    return (None if kv_budget is None else exact(kv_budget, "kv_budget_bytes_per_gpu"),
            None if usable is None else usable if callable(usable) else exact(usable, "usable_bytes_per_gpu"))


def _usable(usable: Fraction | UsableForStage, stage: int, part: ModelShape) -> tuple[Fraction, str]:
    """A stage's usable bytes and the words its budget formula adds after "usable"."""
    if not callable(usable):
        return usable, ""
    given = usable(stage, part)
    if not isinstance(given, UsableMemory):
        raise SizingError("usable_bytes_per_gpu", f"the stage function must return UsableMemory, "
                                                  f"got {type(given).__name__}")
    return exact(given.bytes, "usable_bytes_per_gpu"), f" ({given.basis})"


def _stage(model: ModelShape, layout: ParallelLayout, stage: int, counts: tuple[int, ...],
           partition: tuple[int, ...] | None, kv_precision: Precision, context: int, *,
           dense: Fraction, experts: Fraction, budget: Fraction | None,
           usable: Fraction | UsableForStage | None) -> StageMemory:
    tp, dp, dcp = layout.tp, layout.dp, layout.dcp
    held = counts[stage]
    share = Fraction(held, model.layers)
    dense_gpu = dense * share / tp
    expert_gpu = experts * share / (tp * dp)
    spec = KVCacheSpec(model=pipeline_stage(model, layout.pp, stage, partition), precision=kv_precision, tp=tp)
    per_token = spec.bytes_per_token_per_gpu / dcp
    state = spec.state_bytes_per_sequence_per_gpu
    per_sequence = (spec.sequence_bytes_per_gpu(context) - state) / dcp + state
    span = f" × {held}/{model.layers} layers" if layout.pp > 1 else ""
    how = (f"EP {layout.ep_size}: {model.num_experts // layout.ep_size} whole experts per rank"
           if layout.expert_parallel else "each expert's matrices split")
    terms = [
        Term(name="dense weights per GPU", value=dense_gpu, unit="bytes",
             formula=f"{_show(dense, 'bytes')}{span} ÷ TP {tp}"),
        Term(name="routed-expert weights per GPU", value=expert_gpu, unit="bytes",
             formula=f"{_show(experts, 'bytes')}{span} ÷ (TP {tp} × DP {dp}) ({how})"),
        Term(name="KV per token per GPU", value=per_token, unit="bytes/token",
             formula=_kv_formula(spec, dcp)),
        Term(name="KV per sequence per GPU", value=per_sequence, unit="bytes",
             formula=f"{context:,} tokens{' (windows capped)' if model.n_sliding_layers + model.n_chunked_layers else ''}"
                     f" of KV on one GPU ÷ DCP {dcp}" + (f" + {_show(state, 'bytes')} state" if state else "")),
    ]
    if usable is not None:
        usable, basis = _usable(usable, stage, spec.model)
        budget = usable - dense_gpu - expert_gpu
        weights = _show(dense_gpu + expert_gpu, "bytes")
        terms.append(Term(name="KV budget per GPU", value=budget, unit="bytes",
                          formula=f"{_show(usable, 'bytes')} usable{basis} − {weights} weights"))
    concurrency = None
    if budget is not None:
        concurrency = budget / per_sequence if per_sequence else Fraction(0)
        terms.append(Term(name="sequences per DP rank", value=concurrency, unit="sequences",
                          formula=f"{_show(budget, 'bytes')} ÷ {_show(per_sequence, 'bytes')} per sequence"))
    return StageMemory(stage=stage, first_layer=sum(counts[:stage]), layers=held, dense_weight_bytes_per_gpu=dense_gpu,
                       expert_weight_bytes_per_gpu=expert_gpu, kv_bytes_per_token_per_gpu=per_token,
                       kv_bytes_per_sequence_per_gpu=per_sequence, kv_budget_bytes_per_gpu=budget,
                       concurrency=concurrency, terms=tuple(terms))


def _kv_formula(spec: KVCacheSpec, dcp: int) -> str:
    """``"80 layers × 1 of 8 KV heads × (128 + 128) values × 1 B ÷ DCP 1"`` for one TP rank."""
    m, tp = spec.model, spec.tp
    layers = m.n_kv_layers
    if not layers:
        return "0: no layer caches per-token KV"
    bpv = format_number(float(spec.precision.bytes_per_value), 4)
    if m.kv_lora_rank:
        what = f"({m.kv_lora_rank} + {m.qk_rope_head_dim}) latent values"
        what += f", the same on each of the {tp} TP ranks" if tp > 1 else ""
    else:
        copies = m.kv_replication(tp)
        what = (f"{m.kv_heads_per_gpu(tp)} of {m.kv_heads} KV heads{f' (each on {copies} ranks)' if copies > 1 else ''}"
                f" × ({m.head_dim} + {m.v_head_dim or m.head_dim}) values")
    return f"{layers} layers × {what} × {bpv} B ÷ DCP {dcp}"


def _layout_terms(layout: ParallelLayout, model: ModelShape, stages: tuple[StageMemory, ...], experts: int,
                  source: str) -> tuple[Term, ...]:
    terms = [Term(name="GPUs", value=Fraction(layout.gpus), unit="GPUs",
                  formula=f"TP {layout.tp} × PP {layout.pp} × DP {layout.dp}")]
    if model.is_moe:
        basis = ("given" if source == "given" else
                 f"({model.params:,} − {model.active_params:,} active) × {model.num_experts} ÷ "
                 f"{model.num_experts - model.experts_per_token} inactive experts")
        terms.append(Term(name="routed-expert parameters", value=Fraction(experts), unit="parameters", formula=basis))
    if layout.expert_parallel:
        terms.append(Term(name="most-loaded EP rank's share of routed tokens", value=layout.hottest_rank_share,
                          unit="share", formula=f"imbalance {format_number(float(layout.router_imbalance), 3)} "
                                                f"÷ EP {layout.ep_size}"))
    if stages[0].concurrency is not None:
        worst = _fewest(stages)
        per_rank = max(Fraction(0), worst.concurrency)
        terms.append(Term(name="sequences per DP rank", value=per_rank, unit="sequences",
                          formula=f"the fewest of the {layout.pp} stage{'s' if layout.pp > 1 else ''} "
                                  f"(stage {worst.stage})"))
        whole = math.floor(per_rank)
        terms.append(Term(name="sequences in all", value=Fraction(layout.dp * whole), unit="sequences",
                          formula=f"DP {layout.dp} × {whole:,} whole sequences"))
    return tuple(terms)


def _fewest(stages: tuple[StageMemory, ...]) -> StageMemory:
    """The stage that holds the fewest sequences (every stage has a budget)."""
    return min(stages, key=lambda s: s.concurrency)


def _show(value: Fraction, unit: str) -> str:
    if unit == "bytes":
        return format_up_to_giga(value)
    if unit == "bytes/token":
        return f"{format_up_to_giga(value)}/token"
    if unit == "share":
        return f"{format_number(float(value) * 100, 2)} %"
    return f"{format_number(float(value), 2)} {unit}"


__all__ = ["MAX_DP", "ParallelLayout", "ParallelMemory", "StageMemory", "Term", "UsableForStage", "UsableMemory",
           "parallel_memory", "routed_expert_params"]
