"""Whole decode steps of catalogue models on the attached GPU: the measured anchor the planner's
step model (``planner/step_model.py``) is set beside (``planner/anchor.py`` reads the file).

Each model is built from its catalogue config (the same ``data/models`` file and the same
``sizing.hf_config`` shape the step model reads) as a decoder with random bf16 weights; one
decode step of ``batch`` sequences over ``context`` cached tokens each runs::

    embedding → per layer: RMSNorm, QKV (+ bias), [Q/K RMSNorm: Qwen3], RoPE, KV write into the
    paged pool, paged decode attention (kernels.decode.api, sliding_window= on windowed layers,
    sinks on gpt-oss), O projection, RMSNorm, SwiGLU MLP or MoE → final RMSNorm, LM head, argmax

MoE: router logits, top-k, softmax over the k chosen (Qwen3's softmax-then-renormalise is the
same), the (token, expert) pairs grouped by expert and both expert GEMMs over them: the fused
build runs ``kernels.layer.moe``'s Triton expert GEMM over 16- to 64-row blocks of one expert
(as vLLM's fused MoE does), the unfused build one ``torch._grouped_mm`` per projection over the
experts' offsets (experts no token picks read nothing in either); where that op is missing, the
unfused build loops over every expert on all tokens (noted in each row).

Two builds of the same step (``--build``): ``fused`` (the default) launches what a serving engine
launches — residual add and RMSNorm as one kernel, RoPE with Qwen3's per-head norms and the KV
write as one, SiLU-and-mul as one, the routing and the weighted combine of the experts in the
kernels of ``kernels.layer`` (``decode_step_fused``); ``unfused`` runs each of those steps as its
own chain of PyTorch ops (``decode_step``), the build of the first shipped anchor.
Left out (a few elementwise kernels): RoPE scaling variants, gpt-oss's clamped SwiGLU and expert
biases, Gemma's extra norms and GeGLU. The KV pages hold random values (timing does not depend on
them); windowed layers keep only the pages of their last window (a ring per sequence).

Timing: the step is captured in a CUDA graph per (batch, context) after two warm-up calls, then
replayed (warm-up replays first) and the median of ``--replays`` CUDA-event timings is kept.
When every layer's KV cache does not fit, the first layers that fit (in the model's own mix of
layer kinds) are timed and scaled (``planner/anchor.py`` gives the formula). A shape that does
not fit or finds the time budget spent is recorded as skipped, with the reason. Run on the
device machine, from the project root::

    PYTHONPATH=. python3 benchmarks/bench_serving_anchor.py --json $OUT/serving-anchor-h200.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before triton is imported: the interpreter is chosen at decoration

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hardware.gpus import get_gpu  # noqa: E402
from kernels.bench.timing import replay_median_s  # noqa: E402
from kernels.decode.api import paged_decode_attention  # noqa: E402
from kernels.layer.activation import silu_and_mul  # noqa: E402
from kernels.layer.moe import routed_experts  # noqa: E402
from kernels.layer.norm import add_rms_norm  # noqa: E402
from kernels.layer.rope_cache import rope_and_cache  # noqa: E402
from planner.anchor import SCHEMA, SCHEMA_VERSION, AnchorReport, AnchorRow, write_anchor_json  # noqa: E402
from planner.step_model import step_shape  # noqa: E402
from sizing.catalogue import get_entry  # noqa: E402
from sizing.hf_config import load_config, parse_hf_config  # noqa: E402
from sizing.layers import LayerKind  # noqa: E402
from units import GiB, cdiv  # noqa: E402

DEFAULT_MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b")
BLOCK_SIZE = 16  # vLLM's default page
RESERVE_BYTES = 6 * GiB  # activations, fp32 logits, graph pools, cuBLAS and Triton workspaces
MIN_KV_BYTES = 8 * GiB  # what the weights must leave for the cache before fewer layers are built
MIN_MODEL_S = 30.0  # budget a model needs left to be built (random weights, first compiles)
_METHOD_COMMON = ("decoder from the catalogue config, random bf16 weights, bf16 paged KV cache of random values; "
                  "kernels.decode.api.paged_decode_attention (windows, sinks); final norm, LM head, argmax; "
                  "one CUDA graph per (batch, context), median of CUDA-event timed replays; left out: RoPE scaling, "
                  "gpt-oss's clamped SwiGLU and expert biases, Gemma's extra norms")
METHODS = {
    "fused": "fused build (kernels.layer: residual add + RMSNorm, RoPE + per-head norms + KV write, SiLU-and-mul, "
             "MoE routing and combine, one kernel each, as serving engines launch them; experts as kernels.layer.moe's "
             "Triton expert GEMM over 16- to 64-row blocks of one expert); " + _METHOD_COMMON,
    "unfused": "plain-PyTorch build (each norm, RoPE, KV write, activation and routing step its own PyTorch ops; "
               "experts as torch._grouped_mm over the routed pairs unless a row says otherwise); " + _METHOD_COMMON,
}


@dataclass(frozen=True, kw_only=True)
class DecoderSpec:
    """The decoder's sizes, from a config (values, not bytes)."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (0 for MoE layers)
    experts: int
    top_k: int
    moe_width: int
    vocab: int
    windows: tuple[int | None, ...]  # per layer: sliding window, None for full attention
    eps: float = 1e-5
    rope_theta: float = 10_000.0
    attention_bias: bool = False
    qk_norm: bool = False
    sinks: bool = False


def spec_from_config(config: bytes | str | Mapping[str, Any], name: str | None = None) -> DecoderSpec:
    """The spec of a Hugging Face config, heads and layer kinds as ``sizing.hf_config`` reads them
    (so as the step model does). Refuses what this builder does not build (MLA, recurrent or
    chunked layers, dense and MoE layers mixed), naming the config's field."""
    cfg = load_config(config)
    shape = parse_hf_config(cfg, name=name)
    kinds = shape.kinds
    if any(kind not in (LayerKind.FULL, LayerKind.SLIDING) for kind in kinds):
        raise ValueError(f"{shape.name}: layer kinds {sorted({str(k) for k in kinds})}: only full and sliding "
                         "attention are built")
    moe_layers = step_shape(cfg, tp=1, gpu=get_gpu("h200"), weight_format="bf16").moe_layers
    if moe_layers not in (0, shape.layers):
        raise ValueError(f"{shape.name}: {moe_layers} of {shape.layers} layers are MoE; mixed layers are not built")
    model_type = str(cfg.get("model_type", ""))
    hidden = int(cfg.get("hidden_size") or cfg["d_model"])
    return DecoderSpec(
        name=shape.name, layers=shape.layers, hidden=hidden, q_heads=shape.q_heads, kv_heads=shape.kv_heads,
        head_dim=shape.head_dim, intermediate=0 if moe_layers else int(cfg["intermediate_size"]),
        experts=shape.num_experts, top_k=shape.experts_per_token,
        moe_width=int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0) if moe_layers else 0,
        vocab=int(cfg["vocab_size"]),
        windows=tuple(shape.sliding_window if kind is LayerKind.SLIDING else None for kind in kinds),
        eps=float(cfg.get("rms_norm_eps") or 1e-5), rope_theta=float(cfg.get("rope_theta") or 10_000.0),
        attention_bias=bool(cfg.get("attention_bias")), qk_norm=model_type.startswith("qwen3"),
        sinks=model_type == "gpt_oss")


def layer_weight_bytes(spec: DecoderSpec, bytes_per: int = 2) -> int:
    """One decoder layer's weights (bytes)."""
    h, d = spec.hidden, spec.head_dim
    qkv = (spec.q_heads + 2 * spec.kv_heads) * d
    attention = qkv * h + spec.q_heads * d * h + (qkv if spec.attention_bias else 0)
    mlp = 3 * h * spec.intermediate if not spec.experts else spec.experts * (3 * h * spec.moe_width + h)
    return (attention + mlp + 2 * h) * bytes_per


def head_weight_bytes(spec: DecoderSpec, bytes_per: int = 2) -> int:
    return (2 * spec.vocab * spec.hidden + spec.hidden) * bytes_per  # embedding, LM head, final norm


def _param(shape: tuple[int, ...], fan_in: int, gen: torch.Generator, device, dtype) -> torch.Tensor:
    # Unit-variance outputs (RMSNorm keeps the stream bounded), so routing and argmax see
    # ordinary logits; the values themselves do not change the time.
    return torch.empty(shape, device=device, dtype=dtype).normal_(0.0, fan_in ** -0.5, generator=gen)


@dataclass(kw_only=True)
class Layer:
    ln1: torch.Tensor
    wqkv: torch.Tensor  # [(q + 2 kv) · d, hidden]
    bqkv: torch.Tensor | None
    q_norm: torch.Tensor | None  # [d]
    k_norm: torch.Tensor | None
    wo: torch.Tensor  # [hidden, q · d]
    sinks: torch.Tensor | None  # [q] fp32
    ln2: torch.Tensor
    qk_norm: torch.Tensor | None = None  # [2, d]: q_norm then k_norm, as the fused RoPE kernel reads them
    w_gate_up: torch.Tensor | None = None  # dense: [2 I, hidden]
    w_down: torch.Tensor | None = None  # dense: [hidden, I]
    router: torch.Tensor | None = None  # MoE: [E, hidden]
    w13: torch.Tensor | None = None  # MoE: [E, 2 I, hidden] (gate rows, then up rows)
    w2: torch.Tensor | None = None  # MoE: [E, hidden, I]
    window: int | None = None


@dataclass(kw_only=True)
class Decoder:
    spec: DecoderSpec
    embed: torch.Tensor  # [vocab, hidden]
    final_norm: torch.Tensor
    lm_head: torch.Tensor  # [vocab, hidden]
    inv_freq: torch.Tensor  # [d / 2] fp32
    layers: list[Layer] = field(default_factory=list)
    moe_impl: str = "grouped_mm"  # the unfused build's experts, or "all_experts"; "triton" in the fused build


def build_decoder(spec: DecoderSpec, *, layers: int | None = None, device="cpu", dtype=torch.bfloat16,
                  seed: int = 0) -> Decoder:
    """Random weights for the first ``layers`` layers (default all) of ``spec``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    h, d, q, kv = spec.hidden, spec.head_dim, spec.q_heads, spec.kv_heads
    ones = lambda n: torch.ones(n, device=device, dtype=dtype)  # noqa: E731
    built = []
    for i in range(spec.layers if layers is None else layers):
        layer = Layer(
            ln1=ones(h), wqkv=_param(((q + 2 * kv) * d, h), h, gen, device, dtype),
            bqkv=_param(((q + 2 * kv) * d,), 1, gen, device, dtype) * 0.1 if spec.attention_bias else None,
            q_norm=ones(d) if spec.qk_norm else None, k_norm=ones(d) if spec.qk_norm else None,
            wo=_param((h, q * d), q * d, gen, device, dtype),
            sinks=_param((q,), 1, gen, device, torch.float32) if spec.sinks else None,
            ln2=ones(h), window=spec.windows[i])
        if spec.qk_norm:
            layer.qk_norm = torch.stack((layer.q_norm, layer.k_norm))
        if spec.experts:
            e, w = spec.experts, spec.moe_width
            layer.router = _param((e, h), h, gen, device, dtype)
            layer.w13 = _param((e, 2 * w, h), h, gen, device, dtype)
            layer.w2 = _param((e, h, w), w, gen, device, dtype)
        else:
            layer.w_gate_up = _param((2 * spec.intermediate, h), h, gen, device, dtype)
            layer.w_down = _param((h, spec.intermediate), spec.intermediate, gen, device, dtype)
        built.append(layer)
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    return Decoder(spec=spec, embed=_param((spec.vocab, h), 1, gen, device, dtype), final_norm=ones(h),
                   lm_head=_param((spec.vocab, h), h, gen, device, dtype), inv_freq=inv_freq, layers=built)


# ---------------------------------------------------------------------------------------------
# The KV cache and the step
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class StepState:
    """Static buffers of one (batch, context) step: what a CUDA graph captures by address."""

    tokens: torch.Tensor  # [batch] int64, the input token of each sequence
    positions: torch.Tensor  # [batch] int64, context − 1: where the new token goes
    seq_lens: torch.Tensor  # [batch] int32, context
    tables: dict[int | None, torch.Tensor]  # per window (None: full): [batch, ⌈context ÷ page⌉] int32
    pools: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: K and V [blocks, kv heads, page, d]
    block_size: int


def kv_pages(window: int | None, context: int, block_size: int) -> int:
    """Pages one sequence holds in one layer: all its context, or a ring over its last window
    (one page more, for the window's ragged first page)."""
    need = cdiv(context, block_size)
    return need if window is None else min(need, cdiv(window, block_size) + 1)


def kv_layer_bytes(spec: DecoderSpec, window: int | None, batch: int, context: int, block_size: int) -> int:
    return 2 * batch * kv_pages(window, context, block_size) * spec.kv_heads * block_size * spec.head_dim * 2


def build_state(model: Decoder, batch: int, context: int, *, layers: int, block_size: int = BLOCK_SIZE,
                seed: int = 1) -> StepState:
    """Random K/V pages for the first ``layers`` layers, tables shared by the layers of one window
    (as an engine shares a KV group's tables), pages shuffled over each pool."""
    spec, device = model.spec, model.embed.device
    gen = torch.Generator(device=device).manual_seed(seed)
    need = cdiv(context, block_size)
    tables, pools = {}, []
    for window in sorted(set(spec.windows[:layers]), key=lambda w: -1 if w is None else w):
        ring = kv_pages(window, context, block_size)
        order = torch.randperm(batch * ring, generator=gen, device=device).to(torch.int32).view(batch, ring)
        logical = torch.arange(need, device=device) % ring  # page j of a sequence sits in ring slot j mod ring
        tables[window] = order[:, logical].contiguous()
    for layer in model.layers[:layers]:
        shape = (batch * kv_pages(layer.window, context, block_size), spec.kv_heads, block_size, spec.head_dim)
        pools.append(tuple(torch.empty(shape, device=device, dtype=model.embed.dtype).normal_(generator=gen)
                           for _ in range(2)))
    tokens = torch.randint(0, spec.vocab, (batch,), generator=gen, device=device)
    return StepState(tokens=tokens, positions=torch.full((batch,), context - 1, device=device),
                     seq_lens=torch.full((batch,), context, dtype=torch.int32, device=device),
                     tables=tables, pools=pools, block_size=block_size)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (Llama's layout) of ``x`` [batch, heads, d] by ``cos, sin`` [batch, 1, d/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def moe(x: torch.Tensor, layer: Layer, top_k: int, impl: str) -> torch.Tensor:
    """Routed experts of ``x`` [tokens, hidden]: top-k of the router logits, softmax over them."""
    tokens, hidden = x.shape
    experts, width = layer.w13.shape[0], layer.w13.shape[1] // 2
    logits = (x @ layer.router.T).float()
    top, ids = torch.topk(logits, top_k, dim=-1)
    weights = torch.softmax(top, dim=-1)  # [tokens, k]
    if impl == "all_experts":
        dense = torch.zeros(tokens, experts, device=x.device, dtype=torch.float32).scatter_(1, ids, weights)
        out = torch.zeros(tokens, hidden, device=x.device, dtype=torch.float32)
        for e in range(experts):
            gate, up = (x @ layer.w13[e].T).split(width, dim=-1)
            out += (F.silu(gate) * up @ layer.w2[e].T).float() * dense[:, e:e + 1]
        return out.to(x.dtype)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped by expert
    counts = torch.zeros(experts, device=x.device, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    offs = counts.cumsum(0).to(torch.int32)  # each expert's end row, no host sync
    xs = x[order // top_k]
    gate_up = torch._grouped_mm(xs, layer.w13.transpose(1, 2), offs=offs)
    act = F.silu(gate_up[:, :width]) * gate_up[:, width:]
    ys = torch._grouped_mm(act, layer.w2.transpose(1, 2), offs=offs)
    pairs = torch.empty_like(ys)
    pairs[order] = ys
    return (pairs.view(tokens, top_k, hidden).float() * weights[..., None]).sum(1).to(x.dtype)


def decode_step(model: Decoder, state: StepState, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step through the first ``layers`` layers: (next tokens [batch] int64, fp32
    logits [batch, vocab]). Writes the new token's K/V into the pools at ``positions``."""
    spec = model.spec
    q_n, kv_n, d = spec.q_heads, spec.kv_heads, spec.head_dim
    batch = state.tokens.shape[0]
    x = model.embed[state.tokens]
    angles = state.positions[:, None].float() * model.inv_freq[None]
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    page, slot = state.positions // state.block_size, state.positions % state.block_size
    for layer, (k_pool, v_pool) in zip(model.layers[:layers], state.pools):
        h = rms_norm(x, layer.ln1, spec.eps)
        qkv = F.linear(h, layer.wqkv, layer.bqkv)
        q, k, v = qkv.split((q_n * d, kv_n * d, kv_n * d), dim=-1)
        q, k, v = q.reshape(batch, q_n, d), k.reshape(batch, kv_n, d), v.reshape(batch, kv_n, d)
        if layer.q_norm is not None:
            q, k = rms_norm(q, layer.q_norm, spec.eps), rms_norm(k, layer.k_norm, spec.eps)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        table = state.tables[layer.window]
        blocks = table.gather(1, page[:, None]).squeeze(1).long()
        k_pool[blocks, :, slot] = k
        v_pool[blocks, :, slot] = v
        o = paged_decode_attention(q, k_pool, v_pool, table, state.seq_lens, validate=False,
                                   sliding_window=layer.window, sinks=layer.sinks)
        x = x + o.reshape(batch, q_n * d) @ layer.wo.T
        h = rms_norm(x, layer.ln2, spec.eps)
        if layer.w13 is not None:
            x = x + moe(h, layer, spec.top_k, model.moe_impl)
        else:
            gate, up = (h @ layer.w_gate_up.T).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.w_down.T
    logits = (rms_norm(x, model.final_norm, spec.eps) @ model.lm_head.T).float()
    return torch.argmax(logits, dim=-1), logits


def decode_step_fused(model: Decoder, state: StepState, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`decode_step` with the launches a serving engine makes: the residual add and RMSNorm
    as one kernel (the residual stream carried between them, as vLLM's layers pass it), RoPE with
    the per-head norms and the KV write as one, SiLU-and-mul as one, and the experts' routing in
    the kernels of ``kernels.layer.moe``. Same result as :func:`decode_step` within bf16 rounding."""
    spec = model.spec
    batch = state.tokens.shape[0]
    x, residual = model.embed[state.tokens], None
    for layer, (k_pool, v_pool) in zip(model.layers[:layers], state.pools):
        h, residual = add_rms_norm(x, layer.ln1, spec.eps, residual)
        qkv = F.linear(h, layer.wqkv, layer.bqkv)
        table = state.tables[layer.window]
        q = rope_and_cache(qkv, state.positions, model.inv_freq, k_pool, v_pool, table, q_heads=spec.q_heads,
                           kv_heads=spec.kv_heads, qk_norm=layer.qk_norm, eps=spec.eps)
        o = paged_decode_attention(q, k_pool, v_pool, table, state.seq_lens, validate=False,
                                   sliding_window=layer.window, sinks=layer.sinks)
        x = F.linear(o.reshape(batch, -1), layer.wo)
        h, residual = add_rms_norm(x, layer.ln2, spec.eps, residual)
        if layer.w13 is not None:
            x = routed_experts(h, F.linear(h, layer.router), layer.w13, layer.w2, spec.top_k)
        else:
            x = F.linear(silu_and_mul(F.linear(h, layer.w_gate_up)), layer.w_down)
    h, _ = add_rms_norm(x, model.final_norm, spec.eps, residual)
    logits = F.linear(h, model.lm_head).float()
    return torch.argmax(logits, dim=-1), logits


STEPS = {"fused": decode_step_fused, "unfused": decode_step}


# ---------------------------------------------------------------------------------------------
# Timing on the GPU
# ---------------------------------------------------------------------------------------------


def graph_ms(fn, replays: int) -> float:
    """Median ms of ``replays`` CUDA-graph replays of ``fn`` (two eager warm-ups off the capture
    stream compile the kernels and make the workspaces; three warm-up replays)."""
    return replay_median_s(fn, replays, eager_warmups=2) * 1e3


def timed_layers(spec: DecoderSpec, built: int, batch: int, context: int, kv_room: float,
                 block_size: int) -> tuple[int, str]:
    """The most layers (≤ ``built``) whose KV fits ``kv_room`` bytes, preferring a count whose
    mix of windowed and full layers is the model's own; (0, why) when not one fits."""
    sizes = [kv_layer_bytes(spec, w, batch, context, block_size) for w in spec.windows[:built]]
    fits, total = 0, 0
    for size in sizes:
        if total + size > kv_room:
            break
        total, fits = total + size, fits + 1
    if fits == 0:
        return 0, f"one layer's KV cache ({sizes[0] / GiB:.1f} GiB) does not fit the {kv_room / GiB:.1f} GiB left"
    windowed = sum(w is not None for w in spec.windows)
    for n in range(fits, 0, -1):
        if sum(w is not None for w in spec.windows[:n]) * spec.layers == windowed * n:
            return n, ""
    return fits, "the timed layers' mix of windowed and full layers differs from the model's"


def _probe_moe(model: Decoder) -> str:
    """``grouped_mm`` where the grouped GEMM runs on this device, else ``all_experts``."""
    layer, spec = model.layers[0], model.spec
    x = torch.randn(4, spec.hidden, device=model.embed.device, dtype=model.embed.dtype)
    try:
        moe(x, layer, spec.top_k, "grouped_mm")
        return "grouped_mm"
    except (RuntimeError, NotImplementedError, AttributeError):
        return "all_experts"


def run_model(model_id: str, batches: list[int], contexts: list[int], *, replays: int, deadline: float,
              block_size: int, build: str = "fused") -> list[AnchorRow]:
    entry = get_entry(model_id)
    spec = spec_from_config(entry.config_bytes, name=entry.name)
    free, _ = torch.cuda.mem_get_info()
    per_layer = layer_weight_bytes(spec)
    room = free - head_weight_bytes(spec) - RESERVE_BYTES - MIN_KV_BYTES
    built = max(0, min(spec.layers, int(room // per_layer)))
    base = dict(model=model_id, layers_total=spec.layers, step_ms=None, step_ms_measured=None, head_ms=None,
                replays=0)
    skip = ("one layer's weights do not fit" if built == 0 else
            "time budget spent before the model was built" if deadline - time.monotonic() < MIN_MODEL_S else "")
    if skip:
        return [AnchorRow(**base, layers_timed=0, batch=b, context=c, note=skip) for b in batches for c in contexts]
    model = build_decoder(spec, layers=built, device="cuda")
    # The fused build's experts are its own Triton kernels; only the unfused build needs the grouped GEMM.
    model.moe_impl = "none" if not spec.experts else "triton" if build == "fused" else _probe_moe(model)
    how = {"triton": "experts: kernels.layer.moe's Triton expert GEMM over 16- to 64-row blocks of one expert",
           "grouped_mm": "experts: one grouped GEMM per projection over the routed pairs",
           "all_experts": "experts: every expert on every token (no grouped GEMM on this torch)",
           "none": "dense SwiGLU MLP"}[model.moe_impl]
    rows, longest = [], 0.0
    for batch in batches:
        for context in contexts:
            row = dict(base, batch=batch, context=context)
            left = deadline - time.monotonic()
            if left < max(5.0, 1.5 * longest):
                rows.append(AnchorRow(**row, layers_timed=0, note=f"time budget spent ({left:.0f} s left)"))
                continue
            started = time.monotonic()
            rows.append(_measure(model, row, built, replays, block_size, how, STEPS[build]))
            longest = max(longest, time.monotonic() - started)
    del model
    torch.cuda.empty_cache()
    return rows


def _measure(model: Decoder, row: dict, built: int, replays: int, block_size: int, how: str, step) -> AnchorRow:
    spec, batch, context = model.spec, row["batch"], row["context"]
    torch.cuda.empty_cache()
    kv_room = torch.cuda.mem_get_info()[0] - RESERVE_BYTES
    n, caveat = timed_layers(spec, built, batch, context, kv_room, block_size)
    if n == 0:
        return AnchorRow(**row, layers_timed=0, note=caveat)
    state = None
    try:
        state = build_state(model, batch, context, layers=n, block_size=block_size)
        measured = graph_ms(lambda: step(model, state, n), replays)
        head = graph_ms(lambda: step(model, state, 0), replays)
    except Exception as exc:  # noqa: BLE001 - each failure becomes this shape's record
        why = " ".join(str(exc).split())[:300]
        return AnchorRow(**row, layers_timed=n, note=f"not measured: {type(exc).__name__}: {why}")
    finally:
        del state
        torch.cuda.empty_cache()
    scaled = measured if n == spec.layers else head + (measured - head) * spec.layers / n
    notes = [how]
    if n < spec.layers:
        notes.append(f"{n} of {spec.layers} layers timed (KV cache of all does not fit), layers' share scaled")
    if caveat:
        notes.append(caveat)
    return AnchorRow(**{**row, "step_ms": scaled, "step_ms_measured": measured, "head_ms": head,
                        "replays": replays}, layers_timed=n, note="; ".join(notes))


def _ints(text: str, name: str, high: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: comma-separated integers, got {text[:40]!r}") from None
    if not values or len(values) > 32 or any(not 1 <= v <= high for v in values):
        raise argparse.ArgumentTypeError(f"{name}: 1 to 32 integers in 1..{high}, got {text[:40]!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the record to this file")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated catalogue ids")
    ap.add_argument("--batches", type=lambda t: _ints(t, "--batches", 4096), default=[1, 8, 32, 128, 256])
    ap.add_argument("--contexts", type=lambda t: _ints(t, "--contexts", 1 << 20), default=[1024, 8192, 32768])
    ap.add_argument("--budget-s", type=float, default=240.0, help="the whole run's time budget (s)")
    ap.add_argument("--replays", type=int, default=20, help="timed replays per shape (median kept)")
    ap.add_argument("--gpu", default="h200", help="hardware catalogue id the rows are compared on")
    ap.add_argument("--build", choices=sorted(STEPS), default="fused",
                    help="fused: the launches a serving engine makes (default); unfused: plain PyTorch ops")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.budget_s) and 1 <= args.budget_s <= 3600):
        ap.error(f"--budget-s: between 1 and 3600 s, got {args.budget_s:g}")
    if not 1 <= args.replays <= 1000:
        ap.error(f"--replays: between 1 and 1000, got {args.replays}")
    get_gpu(args.gpu)  # an unknown id fails naming the catalogue's
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not 1 <= len(models) <= 16:
        ap.error(f"--models: 1 to 16 catalogue ids, got {len(models)}")
    for m in models:  # an unknown id or an architecture not built fails before any GPU work
        try:
            entry = get_entry(m)
            spec_from_config(entry.config_bytes, name=entry.name)
        except ValueError as exc:
            ap.error(f"--models: {exc}")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (the tests drive the builder and the step on CPU)")
    from kernels.bench.timing import environment

    started = time.monotonic()
    deadline = started + args.budget_s
    provenance = environment(" ".join([sys.executable, *sys.argv]))
    rows: list[AnchorRow] = []
    for model_id in models:
        rows += run_model(model_id, args.batches, args.contexts, replays=args.replays, deadline=deadline,
                          block_size=BLOCK_SIZE, build=args.build)
        for row in rows[-len(args.batches) * len(args.contexts):]:
            figure = f"{row.step_ms:.3f} ms" if row.step_ms is not None else "skipped"
            print(f"{row.model} batch {row.batch} context {row.context}: {figure} ({row.note})", flush=True)
        # Written after every model, so a run stopped from outside keeps the models it finished.
        report = AnchorReport(schema=SCHEMA, schema_version=SCHEMA_VERSION, provenance=provenance, gpu=args.gpu,
                              weight_format="bf16", kv_dtype="bf16", block_size=BLOCK_SIZE, method=METHODS[args.build],
                              budget_s=args.budget_s, wall_s=time.monotonic() - started, rows=tuple(rows))
        path = write_anchor_json(report, args.json)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
