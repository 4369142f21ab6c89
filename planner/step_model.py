"""Time of one serving step on one GPU of a tensor-parallel replica, from the terms a step has.

A decode step runs, for every decoder layer and in this order, kernels whose times add (a GPU
runs one kernel of a stream after another)::

    layer = attention GEMMs (QKV, O; MLA: its five)         measured weight-read curve
          + attention kernel by layer kind                   KV bytes ÷ read rate, or FLOPs ÷ rate
          + MLP: dense GEMMs, or router + shared experts + the fused MoE call over the experts
            the batch routes to: E·(1 − (1 − k/E)^tokens)   (E ÷ imbalance when routing is skewed)
          + small kernels (norms, rotary, cache write, activation) × the in-graph kernel floor
          + 2 all-reduces at TP > 1 (Megatron-LM: after attention and after the MLP)

    step  = layers + LM head GEMM + sampling + input copies (+ logits gather at TP > 1)

and in eager mode the host must also launch every kernel: step = max(GPU time, kernels × one
eager launch). Prefill tokens mixed into the step (chunked prefill) pass through the same GEMMs
at their token count and add causal attention FLOPs at the prefill rate. Every rate and fixed
cost comes from :mod:`planner.efficiency`, where each figure names its source.

Modelled per GPU: weights split by TP (MLA's down-projections replicated, as vLLM and SGLang
load them), KV heads per GPU as :mod:`sizing.models` splits them, the MLA latent replicated.
Not modelled: expert parallelism's all-to-all, pipeline parallelism, speculative decoding, and
the engine's CPU scheduling when it does not overlap the GPU (vLLM ≥ 0.14 and SGLang overlap it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hardware.gpus import GPU
from planner import efficiency as eff
from planner.cluster.parallel import routed_expert_params
from planner.decode_rates import ATTENTION_BACKENDS, AttentionBackend, read_efficiency
from sizing.hf_config import estimate_params, load_config, parse_hf_config
from sizing.layers import LayerKind
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.weights import quant_format

Grid = Literal["bf16", "fp8"]
_US = 1e-6
ACTIVATION_BYTES = 2  # bf16 hidden states: what the all-reduces move
LOGIT_BYTES = 4  # the sampler reads fp32 logits
# Small kernels outside the layers per step: the final norm, the sampler's temperature, softmax
# and top-k/top-p kernels, and the input copies (token ids, positions, slot mapping, sequence
# lengths, block table) — counted from vllm/v1/worker/gpu_model_runner.py and
# vllm/v1/sample/sampler.py; labelled an estimate in the breakdown.
STEP_SMALL_KERNELS = 10
SAMPLER_LOGIT_PASSES = 3  # softmax, top-p/top-k, the draw: each reads the fp32 logits once


@dataclass(frozen=True, kw_only=True)
class AttentionGroup:
    """Layers of one attention kind on one GPU: ``count`` layers caching ``kv_bytes_per_token``
    each (MLA: the latent), spending ``flops_per_context_token`` per cached token per query."""

    kind: LayerKind
    count: int
    window: int | None
    kv_bytes_per_token: float
    flops_per_context_token: float
    prefill_flops_per_pair: float
    state_bytes: float = 0.0  # recurrent kinds: state read and written once per sequence


@dataclass(frozen=True, kw_only=True)
class StepShape:
    """What one GPU of a ``tp``-way replica reads and computes per layer (values, not bytes,
    where a format applies; bytes per value are in ``dense_bytes`` and ``expert_bytes``)."""

    name: str
    tp: int
    layers: int
    hidden: int
    attention_gemms: tuple[float, ...]  # one layer's mixer projections, values on this GPU
    dense_mlp_gemms: tuple[float, ...]  # one dense layer's MLP (gate-up, down), values
    dense_layers: int
    moe_layers: int
    moe_gemms: tuple[float, ...]  # one MoE layer's router and shared experts, values
    experts: int
    top_k: int
    expert_values: float  # one routed expert's share on this GPU
    lm_head_values: float
    groups: tuple[AttentionGroup, ...]
    small_kernels_per_layer: int
    dense_bytes: float  # bytes per weight of the attention, dense MLP and shared experts
    expert_bytes: float
    dense_grid: Grid
    expert_grid: Grid
    weight_format: str


@dataclass(frozen=True, kw_only=True)
class ServingSetup:
    """How the replica runs: GPU, engine, CUDA graphs, KV dtype, routing skew."""

    gpu: GPU
    engine: eff.Engine = "vllm"
    cuda_graphs: bool = True
    routing_imbalance: float = 1.0  # ≥ 1; tokens route as if to experts ÷ this many equal experts
    # Whose paged decode reads the KV (planner.decode_rates): the engines' FlashInfer, or this
    # project's Triton kernel, which the serving anchor runs.
    attention_backend: AttentionBackend = "flashinfer"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.routing_imbalance) and self.routing_imbalance >= 1):
            raise ValueError(f"routing_imbalance must be ≥ 1, got {self.routing_imbalance!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {tuple(ATTENTION_BACKENDS)}, "
                             f"got {self.attention_backend!r}")


@dataclass(frozen=True, kw_only=True)
class StepTerms:
    """One step's time by term (seconds on one GPU); ``total_s`` is what the step takes."""

    attention_gemms_s: float
    attention_s: float
    mlp_gemms_s: float
    experts_s: float
    small_kernels_s: float
    allreduce_s: float
    lm_head_s: float
    sampling_s: float
    host_s: float  # eager mode: kernels × one launch; 0 under CUDA graphs
    kernels: int
    experts_touched: float  # per MoE layer
    notes: tuple[str, ...] = field(default=())

    @property
    def gpu_s(self) -> float:
        return (self.attention_gemms_s + self.attention_s + self.mlp_gemms_s + self.experts_s
                + self.small_kernels_s + self.allreduce_s + self.lm_head_s + self.sampling_s)

    @property
    def total_s(self) -> float:
        return max(self.gpu_s, self.host_s)

    def as_record(self) -> dict[str, float]:
        names = ("attention_gemms_s", "attention_s", "mlp_gemms_s", "experts_s", "small_kernels_s",
                 "allreduce_s", "lm_head_s", "sampling_s", "host_s")
        return {name: getattr(self, name) for name in names} | {"total_s": self.total_s}


# ---------------------------------------------------------------------------------------------
# The model's shape on one GPU
# ---------------------------------------------------------------------------------------------


def _formats(weight_format: str, gpu: GPU, attention_quantised: bool) -> tuple[float, float, Grid, Grid]:
    """(dense bytes per weight, expert bytes per weight, dense curve, expert curve)."""
    name = weight_format.lower()
    if name in ("bf16", "fp16", "auto"):
        return 2.0, 2.0, "bf16", "bf16"
    precision = float(get_precision(name, field="weight_dtype").bytes_per_value)
    grid: Grid = "fp8" if name.startswith("fp8") and eff.has_fp8(gpu) else "bf16"
    dense = precision if attention_quantised else 2.0
    return dense, precision, (grid if attention_quantised else "bf16"), grid


def _moe_layer_count(layers: int, routed: int, per_expert: int, experts: int) -> int:
    """Decoder layers with routed experts: routed parameters ÷ (experts × one expert), which is
    exact for every gated MoE config ``sizing.hf_config`` counts (dense leading layers, Llama 4's
    interleave); falls back to all layers when the ratio is not whole."""
    if not routed or not per_expert:
        return 0
    ratio = routed / (experts * per_expert)
    return round(ratio) if abs(ratio - round(ratio)) < 0.01 and 0 < round(ratio) <= layers else layers


def step_shape(config: bytes | str | Mapping[str, Any], *, tp: int, gpu: GPU, weight_format: str | None = None,
               kv_bytes: float = 2.0, name: str | None = None) -> StepShape:
    """The per-GPU shape of a Hugging Face config at tensor parallelism ``tp``.

    ``weight_format``: a name from :mod:`sizing.precisions` (``bf16``, ``fp8``, ``fp8_block``,
    ``mxfp4``, ``awq_int4``, …); default the config's own (bf16 without a quantisation config).
    A format given by hand quantises every linear layer; the config's own keeps what its
    ``quantization_config`` leaves out (gpt-oss: attention and router in bf16). ``kv_bytes``:
    bytes per cached value (2 bf16, 1 FP8).
    """
    cfg = load_config(config)
    shape = parse_hf_config(cfg, name=name)
    shape.check_tp(tp)
    text = {**cfg, "vision_config": None}  # a vision tower is not read by a text decode step
    full = estimate_params(text)
    none_active = estimate_params({**text, "num_experts_per_tok": 0}) if shape.num_experts else full
    routed = routed_expert_params(cfg) if shape.num_experts else 0
    hidden = int(cfg.get("hidden_size") or cfg.get("d_model"))
    moe_width = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    per_expert = 3 * hidden * moe_width  # gate, up and down projections
    moe_layers = _moe_layer_count(shape.layers, routed, per_expert, shape.num_experts)
    experts_per_layer_values = routed / moe_layers if moe_layers else 0.0
    # Linear weights every token passes through: attention (mixers) and the MLPs that are not
    # routed experts (dense layers, shared experts, routers).
    mixer = full.attention / shape.layers
    always_mlp = none_active.active - full.embedding - full.lm_head - full.attention - full.norms
    lm_head = full.embedding  # the LM head has the embedding's shape, tied or not
    own = weight_format is None
    fmt = (shape.weight_format or "bf16") if own else weight_format
    # The config's own format quantises what its quantization_config says (gpt-oss keeps
    # attention and the router in bf16); a format given by hand converts every linear layer.
    quant = quant_format(cfg) if own else None
    attention_quantised = quant.attention_quantised if quant is not None else True
    dense_bytes, expert_bytes, dense_grid, expert_grid = _formats(fmt, gpu, attention_quantised)
    attention = _attention_gemms(cfg, shape, mixer, tp)
    dense_layers = shape.layers - moe_layers
    if moe_layers:
        # Of the always-read MLP weights: routers (hidden × experts per MoE layer), the dense
        # leading layers' gated MLPs, and what is left: shared experts.
        router = hidden * shape.num_experts
        dense_total = dense_layers * 3 * hidden * int(cfg.get("intermediate_size") or 0)
        shared = max(always_mlp - moe_layers * router - dense_total, 0.0) / moe_layers / tp
        moe_gemms = (float(router),) + ((shared * 2 / 3, shared / 3) if shared else ())
        dense_mlp = dense_total / max(dense_layers, 1) / tp
    else:
        moe_gemms = ()
        dense_mlp = always_mlp / shape.layers / tp
    return StepShape(
        name=shape.name, tp=tp, layers=shape.layers, hidden=hidden,
        attention_gemms=attention,
        dense_mlp_gemms=(dense_mlp * 2 / 3, dense_mlp / 3) if dense_layers else (),
        dense_layers=dense_layers, moe_layers=moe_layers, moe_gemms=moe_gemms,
        experts=shape.num_experts, top_k=shape.experts_per_token,
        expert_values=experts_per_layer_values / max(shape.num_experts, 1) / tp,
        lm_head_values=lm_head / tp, groups=_attention_groups(shape, tp, kv_bytes),
        # Norms before attention and MLP, rotary, KV-cache write, activation; MLA adds the
        # norms of its two latents (vllm/model_executor/models/llama.py, deepseek_v2.py).
        small_kernels_per_layer=7 if shape.kv_lora_rank else 5,
        dense_bytes=dense_bytes, expert_bytes=expert_bytes, dense_grid=dense_grid, expert_grid=expert_grid,
        weight_format=fmt,
    )


def _attention_gemms(cfg: Mapping[str, Any], shape: ModelShape, mixer: float, tp: int) -> tuple[float, ...]:
    """One layer's mixer projections on one GPU (values). GQA: QKV and O, split in proportion to
    their widths. MLA: the down-projections of the query and the latent are replicated on every
    rank; the up-projections and O split by TP (two absorbed BMMs, Q up, O)."""
    if shape.kv_lora_rank:
        hidden = int(cfg["hidden_size"])
        replicated = hidden * (int(cfg.get("q_lora_rank") or 0) + shape.kv_lora_rank + shape.qk_rope_head_dim)
        rest = max(mixer - replicated, 0.0) / tp
        return (float(replicated), rest / 4, rest / 4, rest / 4, rest / 4)
    q, kv = shape.q_heads, shape.kv_heads
    qkv_share = (q + 2 * kv) / (2 * q + 2 * kv)
    return (mixer * qkv_share / tp, mixer * (1 - qkv_share) / tp)


def _attention_groups(shape: ModelShape, tp: int, kv_bytes: float) -> tuple[AttentionGroup, ...]:
    heads = shape.q_heads / tp
    if shape.kv_lora_rank:
        # Absorbed MLA decode: scores against the latent and its RoPE part, then the weighted sum
        # of latents, per query head; prefill runs plain MHA (K = nope + rope, V = v_head_dim).
        per_token = heads * (2 * (shape.kv_lora_rank + shape.qk_rope_head_dim) + 2 * shape.kv_lora_rank)
        per_pair = heads * (2 * shape.head_dim + 2 * (shape.v_head_dim or shape.head_dim))
    else:
        per_token = per_pair = heads * 4 * shape.head_dim  # QKᵀ and PV, 2 FLOPs a multiply-add
    groups = []
    for group in shape.layer_groups(tp):
        if group.is_attention:
            groups.append(AttentionGroup(kind=group.kind, count=group.count, window=group.window,
                                         kv_bytes_per_token=group.kv_values_per_token * kv_bytes,
                                         flops_per_context_token=per_token, prefill_flops_per_pair=per_pair))
        else:
            groups.append(AttentionGroup(kind=group.kind, count=group.count, window=None, kv_bytes_per_token=0.0,
                                         flops_per_context_token=0.0, prefill_flops_per_pair=0.0,
                                         state_bytes=group.state_bytes_per_sequence))
    return tuple(groups)


# ---------------------------------------------------------------------------------------------
# One step
# ---------------------------------------------------------------------------------------------


def experts_touched(experts: int, top_k: int, tokens: float, imbalance: float = 1.0) -> float:
    """Expected distinct experts ``tokens`` tokens route to, each choosing ``top_k`` of
    ``experts``: E·(1 − (1 − k/E)^tokens), with E shrunk to E ÷ ``imbalance`` (skewed routing
    concentrates tokens on fewer experts; 1 is uniform routing, the most experts)."""
    if experts == 0 or tokens <= 0:
        return 0.0
    pool = max(experts / imbalance, float(top_k))
    return min(pool * (1 - (1 - top_k / pool) ** tokens), float(experts))


def step_time(shape: StepShape, setup: ServingSetup, *, decode_batch: int, context: float,
              prefill_tokens: float = 0.0, prefill_pairs: float = 0.0, prefill_requests: int = 0) -> StepTerms:
    """One step: ``decode_batch`` sequences each attending over ``context`` cached tokens, plus
    ``prefill_tokens`` prompt tokens (``prefill_pairs`` causal query–key pairs in all, from
    ``prefill_requests`` prompts whose last token is sampled this step)."""
    if decode_batch < 0 or prefill_tokens < 0 or context < 0:
        raise ValueError("decode_batch, prefill_tokens and context must be ≥ 0")
    gpu, tp = setup.gpu, shape.tp
    tokens = decode_batch + prefill_tokens
    dense_rate = eff.matmul_flops_per_s(gpu, fp8=shape.dense_grid == "fp8")
    expert_rate = eff.matmul_flops_per_s(gpu, fp8=shape.expert_grid == "fp8")
    bf16_rate = eff.matmul_flops_per_s(gpu)

    def gemms(values: tuple[float, ...], bytes_per: float, grid: Grid, rate: float, rows: float) -> float:
        return sum(eff.gemm_seconds(v * bytes_per, v, rows, grid=grid, gpu=gpu, flops_per_s=rate) for v in values)

    attention_gemms = shape.layers * gemms(shape.attention_gemms, shape.dense_bytes, shape.dense_grid,
                                           dense_rate, tokens)
    attention = sum(_attention_seconds(g, gpu, decode_batch, context, prefill_pairs, setup.attention_backend)
                    for g in shape.groups)
    mlp = shape.dense_layers * gemms(shape.dense_mlp_gemms, shape.dense_bytes, shape.dense_grid, dense_rate, tokens)
    touched = experts_touched(shape.experts, shape.top_k, tokens, setup.routing_imbalance)
    experts = 0.0
    if shape.moe_layers:
        router, *shared = shape.moe_gemms
        mlp += shape.moe_layers * (gemms((router,), 2.0, "bf16", bf16_rate, tokens)
                                   + gemms(tuple(shared), shape.dense_bytes, shape.dense_grid, dense_rate, tokens))
        read = eff.moe_seconds(touched, shape.expert_values * shape.expert_bytes, gpu)
        compute = 2 * tokens * shape.top_k * shape.expert_values / expert_rate
        experts = shape.moe_layers * max(read, compute)
    activation_kernels = shape.dense_layers + (shape.moe_layers if len(shape.moe_gemms) > 1 else 0)
    small = shape.layers * shape.small_kernels_per_layer + activation_kernels + STEP_SMALL_KERNELS
    small_s = small * eff.KERNEL_FLOOR.value * _US
    message = tokens * shape.hidden * ACTIVATION_BYTES
    per_reduce, carried = eff.allreduce_seconds(message, tp, setup.engine)
    sampled = decode_batch + prefill_requests
    # At TP > 1 each rank holds a vocabulary slice of the logits; gathering them moves about one
    # slice per rank, timed as an all-reduce of that size.
    gather, _ = eff.allreduce_seconds(sampled * shape.lm_head_values / shape.hidden * LOGIT_BYTES, tp, setup.engine)
    allreduce = 2 * shape.layers * per_reduce + gather
    lm_head = eff.gemm_seconds(shape.lm_head_values * 2.0, shape.lm_head_values, sampled, grid="bf16",
                               gpu=gpu, flops_per_s=bf16_rate)
    vocab = shape.lm_head_values * tp / shape.hidden
    sampling = SAMPLER_LOGIT_PASSES * sampled * vocab * LOGIT_BYTES / eff.read_rate(gpu)
    # Kernels launched per step: the small ones, each GEMM, one attention call per layer, the
    # fused MoE call's five (top-k, align, two grouped GEMMs, sum), the all-reduces and gather.
    kernels = (small + shape.layers * (len(shape.attention_gemms) + 1)
               + shape.dense_layers * len(shape.dense_mlp_gemms) + shape.moe_layers * (len(shape.moe_gemms) + 5)
               + (2 * shape.layers + 1 if tp > 1 else 0) + 1)
    host = 0.0 if setup.cuda_graphs else kernels * eff.EAGER_OP.value * _US
    notes = ["all-reduce: TP degree not in the published table, the nearest used"] if carried else []
    return StepTerms(attention_gemms_s=attention_gemms, attention_s=attention, mlp_gemms_s=mlp, experts_s=experts,
                     small_kernels_s=small_s, allreduce_s=allreduce, lm_head_s=lm_head, sampling_s=sampling,
                     host_s=host, kernels=int(kernels), experts_touched=touched, notes=tuple(notes))


def _attention_seconds(group: AttentionGroup, gpu: GPU, batch: int, context: float, pairs: float,
                       backend: AttentionBackend = "flashinfer") -> float:
    """All layers of one group: decode reads (or recurrent state updates) plus prefill FLOPs."""
    floor = eff.DECODE_ATTENTION_FLOOR.value * _US
    if group.state_bytes:  # read and write each sequence's state once per layer
        per_layer = max(floor, 2 * batch * group.state_bytes / eff.read_rate(gpu))
        return group.count * per_layer
    seen = min(context, group.window) if group.window else context
    peak = gpu.bf16_tflops * 1e12
    if group.kind is LayerKind.MLA:
        read_rate = gpu.bandwidth_bytes_per_s * eff.MLA_DECODE_BANDWIDTH.value
        compute_rate = peak * eff.MLA_DECODE_COMPUTE.value
    else:
        read_rate = gpu.bandwidth_bytes_per_s * read_efficiency(backend, batch, seen)
        compute_rate = peak * eff.MATMUL_EFFICIENCY[eff.gpu_family(gpu)].value
    decode = max(batch * seen * group.kv_bytes_per_token / read_rate,
                 batch * seen * group.flops_per_context_token / compute_rate) if batch else 0.0
    # Causal prefill pairs beyond a window are masked away; the share kept is ≈ window ÷ context.
    kept = pairs if not group.window else pairs * min(1.0, group.window / max(context, 1.0))
    prefill = kept * group.prefill_flops_per_pair / (peak * eff.PREFILL_ATTENTION.value)
    return group.count * max(floor, decode + prefill)
