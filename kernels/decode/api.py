"""The decode entries: ``paged_decode_attention`` takes any K/V pool this package stores (16-bit,
FP8, INT4) and runs the kernel :mod:`kernels.decode.backends` picks for it; ``mla_decode_attention``
takes an MLA latent cache (:mod:`kernels.cache.mla`), whose heads share one latent instead of K/V.

The Triton kernels (:mod:`kernels.decode.paged` for 16-bit and FP8 pools, :mod:`kernels.decode.int4`
for INT4 ones) run everywhere, the interpreter included; the register-dequant kernel
(:mod:`kernels.decode.rdq`) runs on Hopper and is imported only when a call runs it. Each
kernel plans its launch once per call signature (its split count, merge and compile-time
values: :mod:`kernels.decode.launch`); :func:`decode_plan` says what a call would run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.attention_span import FULL, span_of
from kernels.cache.int4 import Int4Pool
from kernels.cache.mla import MlaLatentCache
from kernels.decode.backends import choose_kernel, default_rdq_config
from kernels.decode.config import DecodeConfig
from kernels.decode.int4 import default_int4_config, int4_num_splits, triton_int4_decode
from kernels.decode.mla import MlaConfig, check_mla_call, triton_mla_decode
from kernels.decode.mla_gluon import gluon_mla_decode, routes_to_gluon
from kernels.decode.paged import decode_num_splits, default_config, triton_decode
from kernels.decode.rdq_config import RdqConfig

__all__ = ["paged_decode_attention", "DecodePlan", "decode_plan", "mla_decode_attention"]


def paged_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor | Int4Pool,
    v: torch.Tensor | Int4Pool,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
    num_splits: int | None = None,
    config: DecodeConfig | RdqConfig | None = None,
    dequant: int | None = None,
    validate: bool = True,
    backend: str = "auto",
    sliding_window: int | None = None,
    chunk_size: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention of one query token per sequence over a paged KV cache.

    ``backend="auto"`` runs FP8 and INT4 pools through the register-dequant warp-MMA kernel where
    it applies and was measured faster (:func:`kernels.decode.backends.rdq_preferred`: Hopper,
    head dim 128, pools on the 16-byte grid), everything else through the Triton kernels;
    ``"triton"`` and ``"rdq"`` force one (the rdq kernel refuses where it cannot run: no Hopper
    GPU, a 16-bit pool).

    Parameters
    ----------
    q : Tensor [batch, n_q_heads, head_dim], bf16 or fp16, last dim contiguous
        The new token's query for every sequence.
    k, v : Tensor [num_blocks, n_kv_heads, block_size, head_dim], or Int4Pool
        The pool of KV blocks: the dtype of ``q`` or ``torch.float8_e4m3fn``, last dim contiguous;
        or INT4 pools (``data [num_blocks, n_kv_heads, block_size, head_dim // 2]`` uint8 and
        ``scales [.., block_size, 2]`` fp16, :func:`kernels.cache.int4.quantize_pool_int4`).
        ``n_q_heads`` must be a multiple of ``n_kv_heads`` (MHA, GQA, MQA).
    block_tables : Tensor [batch, max_blocks_per_seq], int32
        ``block_tables[b, j]`` is the pool index of sequence ``b``'s ``j``-th block. Entries past
        a sequence's last block are never read (any value, e.g. -1).
    seq_lens : Tensor [batch], int32
        Tokens in each sequence, ``1 <= seq_lens[b] <= max_blocks_per_seq * block_size``.
    sm_scale : float, optional
        Softmax scale; default ``1 / sqrt(head_dim)``.
    k_scale, v_scale : float or Tensor [1] or [n_kv_heads] (fp32), optional
        FP8 dequantisation scales (real value = stored value * scale); only for an FP8 cache,
        default 1. INT4 pools carry their own.
    num_splits : int, optional
        Parts each sequence is cut into (split-KV); default: the kernel's plan for the shape.
    config : DecodeConfig or RdqConfig, optional
        Launch parameters of the Triton kernels or of the rdq kernel (which one also picks the
        kernel); default: the measured default of the kernel that runs.
    dequant : {0, 1}, optional
        INT4 on the Triton kernel: 0, integer -> fp16 converts; 1 (default), the fp16 bit trick.
    validate : bool
        Check table entries and lengths against the pool (costs one device-to-host sync). Shapes,
        dtypes and strides are always checked (once per call signature). The benchmark validates
        once, then times with False.
    backend : {"auto", "triton", "rdq"}
        Which kernel runs (see above).
    sliding_window, chunk_size : int, optional (at most one)
        Keys the query sees (:mod:`kernels.attention_span`): the last ``sliding_window`` tokens,
        or the tokens of its own ``chunk_size``-token chunk; default all. Only the pages holding
        them are read, and only their table entries need to index the pool. 16-bit and FP8
        pools, on the Triton kernel.
    sinks : Tensor [n_q_heads] (fp32, bf16 or fp16), optional
        One learned logit per query head (natural log) that joins the softmax denominator and
        carries no value (gpt-oss): ``out = Σ e^{s_j} v_j / (e^{sink} + Σ e^{s_j})``. 16-bit
        and FP8 pools, on the Triton kernel.

    Returns
    -------
    Tensor [batch, n_q_heads, head_dim], dtype of ``q``

    Raises
    ------
    ValueError
        For wrong dtypes, shapes, strides, devices, scales, table entries outside the pool,
        lengths beyond a table, head counts that do not divide, or options of another kernel
        than the forced one; before any launch.
    """
    int4 = isinstance(k, Int4Pool) or isinstance(v, Int4Pool)
    span = span_of(sliding_window, chunk_size)
    if span != FULL or sinks is not None:
        _check_span_kernel(int4, backend, config)
        return triton_decode(q, k, v, block_tables, seq_lens, sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale,
                             num_splits=num_splits, config=config, validate=validate, span=span, sinks=sinks)
    if int4:
        if k_scale is not None or v_scale is not None:
            raise ValueError("k_scale and v_scale are for FP8 caches; INT4 pools carry their own scales")
        kernel = choose_kernel(q, k, v, backend=backend, config=config, dequant=dequant)
        if kernel == "triton":
            return triton_int4_decode(q, k, v, block_tables, seq_lens, sm_scale=sm_scale, num_splits=num_splits,
                                      config=config, dequant=1 if dequant is None else dequant, validate=validate)
    else:
        if dequant is not None:
            raise ValueError("dequant is for INT4 pools")
        kernel = choose_kernel(q, k, v, backend=backend, config=config, dequant=None)
        if kernel == "triton":
            return triton_decode(q, k, v, block_tables, seq_lens, sm_scale=sm_scale, k_scale=k_scale,
                                 v_scale=v_scale, num_splits=num_splits, config=config, validate=validate)
    from kernels.decode.rdq import rdq_decode  # Hopper only: not on the path of the other kernels

    return rdq_decode(q, k, v, block_tables, seq_lens, k_scale=k_scale, v_scale=v_scale, sm_scale=sm_scale,
                      num_splits=num_splits, config=config or default_rdq_config("int4" if int4 else "fp8"),
                      validate=validate)


def _check_span_kernel(int4: bool, backend: str, config: object) -> None:
    """Windows, chunks and sinks run on the 16-bit/FP8 Triton kernel only: refuse the rest."""
    if int4:
        raise ValueError("sliding_window, chunk_size and sinks take a 16-bit or FP8 pool, not INT4")
    if backend not in ("auto", "triton") or isinstance(config, RdqConfig):
        raise ValueError("sliding_window, chunk_size and sinks run on the Triton kernel: use backend='auto' "
                         "or 'triton' and a DecodeConfig")


@dataclass(frozen=True, kw_only=True)
class DecodePlan:
    """What a :func:`paged_decode_attention` call with these inputs and options runs: the kernel
    (``"triton"`` or ``"rdq"``), its launch configuration and the split count it cuts each
    sequence into."""

    kernel: str
    config: DecodeConfig | RdqConfig
    num_splits: int


def decode_plan(q: torch.Tensor, k: torch.Tensor | Int4Pool, v: torch.Tensor | Int4Pool, block_tables: torch.Tensor,
                seq_lens: torch.Tensor, *, config: DecodeConfig | RdqConfig | None = None, dequant: int | None = None,
                backend: str = "auto", in_graph: bool = False, sliding_window: int | None = None,
                chunk_size: int | None = None, sinks: torch.Tensor | None = None) -> DecodePlan:
    """The plan of a call (arguments as :func:`paged_decode_attention`), made eagerly or
    (``in_graph``) as inside a CUDA graph capture, where the Triton kernels may merge otherwise
    and so plan another split count. Nothing is launched; on a GPU the kernel is compiled, as the
    call itself would."""
    int4 = isinstance(k, Int4Pool) or isinstance(v, Int4Pool)
    span = span_of(sliding_window, chunk_size)
    if span != FULL or sinks is not None:
        _check_span_kernel(int4, backend, config)
        cfg = config or default_config(q.shape[-1], k.dtype)
        return DecodePlan(kernel="triton", config=cfg, num_splits=decode_num_splits(
            q, k, v, block_tables, seq_lens, config=cfg, in_graph=in_graph, span=span, sinks=sinks))
    kernel = choose_kernel(q, k, v, backend=backend, config=config, dequant=dequant)
    if kernel == "rdq":
        from kernels.decode.rdq import rdq_plan

        cfg = config or default_rdq_config("int4" if int4 else "fp8")
        return DecodePlan(kernel="rdq", config=cfg, num_splits=rdq_plan(q, k, v, block_tables, seq_lens, config=cfg)[0])
    head_dim = q.shape[-1]
    if int4:
        cfg = config or default_int4_config(head_dim)
        splits = int4_num_splits(q, k, v, block_tables, seq_lens, config=cfg, dequant=1 if dequant is None else dequant,
                                 in_graph=in_graph)
    else:
        cfg = config or default_config(head_dim, k.dtype)
        splits = decode_num_splits(q, k, v, block_tables, seq_lens, config=cfg, in_graph=in_graph)
    return DecodePlan(kernel="triton", config=cfg, num_splits=splits)


def mla_decode_attention(q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *, sm_scale: float,
                         num_splits: int | None = None, config: MlaConfig | None = None,
                         validate: bool = True) -> torch.Tensor:
    """MLA decode in the absorbed form (:mod:`kernels.reference.mla`): one query token per
    sequence, every head against the sequence's shared latent.

    Parameters
    ----------
    q_latent : Tensor [batch, n_heads, kv_lora_rank], bf16 or fp16, last dim contiguous
        The query's no-rope part already multiplied by W_UK (``q_nope W_UK^T`` per head).
    q_rope : Tensor [batch, n_heads, rope_dim], same dtype
        The query's rope part.
    cache : MlaLatentCache
        The latent pool ``[num_blocks, block_size, kv_lora_rank + rope_dim]`` (the query's dtype
        or float8_e4m3fn with its scale), tables and lengths; rank and rope dim powers of two >= 16.
    sm_scale : float
        Softmax scale: MLA's is ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)`` (DeepSeek-V3:
        1 / sqrt(192)) times any YaRN factor, not a function of the latent's width, so it is required.
    num_splits, config, validate
        As :func:`paged_decode_attention` (``config`` an :class:`~kernels.decode.mla.MlaConfig`). Without
        a config, a call the Gluon kernel takes (:func:`~kernels.decode.mla_gluon.gluon_mla_supported`:
        Hopper, a 16-bit 512 + 64 latent, heads in 64s, block size 64-256) runs there; a config asks
        for the Triton kernel.

    Returns
    -------
    Tensor [batch, n_heads, kv_lora_rank], dtype of ``q_latent``: the attention over the latent,
    which the model multiplies by W_UV per head.
    """
    if routes_to_gluon(q_latent, cache, config):
        # Hopper, 16-bit latent of 512 + 64, heads in 64s: the two-warpgroup Gluon kernel
        # (:mod:`kernels.decode.mla_gluon`), 2.3-2.6x the Triton kernel at 128 heads on the H200.
        sm_scale = check_mla_call(q_latent, q_rope, cache, sm_scale=sm_scale, num_splits=num_splits, config=None,
                                  validate=validate)
        return gluon_mla_decode(q_latent, q_rope, cache, sm_scale=sm_scale, num_splits=num_splits)
    return triton_mla_decode(q_latent, q_rope, cache, sm_scale=sm_scale, num_splits=num_splits, config=config,
                             validate=validate)
