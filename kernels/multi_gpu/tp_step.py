"""One tensor-parallel decode step of one attention layer: each rank's share of the KV heads in
the project's paged pool, the project's paged decode kernel on it, then the all-reduce of the
output projection's partial sums.

The layer (Megatron-style TP, as vLLM's ``QKVParallelLinear`` / ``RowParallelLinear`` split it)::

    q      [batch, n_q_heads, head_dim]                 the new token's queries
    k, v   [num_blocks, n_kv_heads, block_size, head_dim]  the paged pool (kernels.cache.paged)
    w_o    [hidden, n_q_heads × head_dim]               the output projection (row-parallel)

    out = attention(q, k, v) reshaped to [batch, n_q_heads × head_dim]  @  w_oᵀ    -> [batch, hidden]

Rank ``r`` of ``tp`` holds query heads ``r × n_q / tp`` .. ``(r + 1) × n_q / tp − 1``, the KV heads
those query heads read, and the columns of ``w_o`` that multiply their outputs. Each rank's
product is a partial sum over its heads; the all-reduce adds the ``tp`` partials, so every rank
ends with the whole layer's output. Its message is ``batch × hidden`` values: ``batch × hidden ×
2`` bytes in bf16 (:func:`allreduce_bytes`).

KV heads split while ``tp ≤ n_kv_heads`` (``n_kv / tp`` heads a rank; ``tp`` must divide it);
beyond that each rank holds one KV head, replicated on ``tp / n_kv`` ranks (``n_kv`` must divide
``tp``), as vLLM replicates them. ``tp`` must divide the query heads.

:func:`shard_layer` cuts one rank's shard out of a full-size layer, so a test (or the bench)
can build the whole layer once, shard it on every rank, and compare the reduced output with
:func:`reference_output` of the unsharded layer in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernels.cache.paged import PagedKVCache, build_paged_cache, quantize_fp8
from kernels.decode.api import paged_decode_attention
from kernels.reference.paged import paged_attention_reference

__all__ = ["DecodeLayer", "build_layer", "q_heads_of_rank", "kv_heads_of_rank", "shard_layer", "local_partial",
           "tp_decode_step", "reference_output", "allreduce_bytes", "ATTENTION_PATHS", "KV_DTYPES"]

ATTENTION_PATHS = ("kernel", "reference")  # the project's decode kernel, or its float32 reference
KV_DTYPES = ("bf16", "fp8")  # the pool as stored: the query's dtype, or e4m3 with per-head scales
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, kw_only=True)
class DecodeLayer:
    """One attention layer's decode inputs: the whole layer (``tp = 1``) or rank ``rank``'s shard.

    Attributes
    ----------
    q : Tensor [batch, n_q_heads (of this rank), head_dim], bf16 or fp16
    cache : PagedKVCache, pools [num_blocks, n_kv_heads (of this rank), block_size, head_dim]
    w_o : Tensor [hidden, n_q_heads (of this rank) × head_dim], the dtype of ``q``
    tp, rank : the tensor-parallel degree the layer was cut for, and which shard this is
    """

    q: torch.Tensor
    cache: PagedKVCache
    w_o: torch.Tensor
    tp: int = 1
    rank: int = 0

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def hidden(self) -> int:
        return self.w_o.shape[0]


def build_layer(seq_lens: list[int], *, n_q_heads: int, n_kv_heads: int, head_dim: int, hidden: int,
                block_size: int, dtype: str = "bf16", kv_dtype: str = "bf16", device: str | torch.device = "cpu",
                generator: torch.Generator) -> DecodeLayer:
    """A full-size layer of random data: a shuffled pool with NaN in every unused slot (a kernel
    that reads past a sequence shows it), queries, and ``w_o`` scaled by 1/√(fan-in) so that the
    output is O(1) like the attention's."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r:.40}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r:.40}")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"hidden must be a whole number >= 1, got {hidden!r:.40}")
    torch_dtype = _DTYPES[dtype]
    cache = build_paged_cache(seq_lens, block_size=block_size, n_kv_heads=n_kv_heads, head_dim=head_dim,
                              dtype=torch_dtype, device=device, shuffle=True, generator=generator,
                              spare_blocks=2, poison_unused=True)
    if kv_dtype == "fp8":
        cache = quantize_fp8(cache, per_head=True)
    gen_device = generator.device
    q = torch.randn(len(seq_lens), n_q_heads, head_dim, generator=generator, device=gen_device)
    fan_in = n_q_heads * head_dim
    w_o = torch.randn(hidden, fan_in, generator=generator, device=gen_device) / fan_in**0.5
    return DecodeLayer(q=q.to(device=device, dtype=torch_dtype), cache=cache,
                       w_o=w_o.to(device=device, dtype=torch_dtype))


def _check_tp(n_q_heads: int, n_kv_heads: int, tp: int, rank: int) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a whole number >= 1, got {tp!r:.40}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp:
        raise ValueError(f"rank must be in 0..{tp - 1}, got {rank!r:.40}")
    if n_q_heads % tp:
        raise ValueError(f"tp={tp} must divide the {n_q_heads} query heads")
    if n_q_heads % n_kv_heads:
        raise ValueError(f"the {n_kv_heads} KV heads must divide the {n_q_heads} query heads")
    if tp <= n_kv_heads and n_kv_heads % tp:
        raise ValueError(f"tp={tp} must divide the {n_kv_heads} KV heads")
    if tp > n_kv_heads and tp % n_kv_heads:
        raise ValueError(f"tp={tp} above the {n_kv_heads} KV heads must be a multiple of them (heads replicate)")


def q_heads_of_rank(n_q_heads: int, n_kv_heads: int, *, tp: int, rank: int) -> range:
    """The query heads rank ``rank`` of ``tp`` computes: a contiguous ``n_q_heads / tp`` of them."""
    _check_tp(n_q_heads, n_kv_heads, tp, rank)
    per = n_q_heads // tp
    return range(rank * per, (rank + 1) * per)


def kv_heads_of_rank(n_q_heads: int, n_kv_heads: int, *, tp: int, rank: int) -> range:
    """The KV heads rank ``rank`` of ``tp`` holds: ``n_kv / tp`` of them, or the one KV head its
    query heads share once ``tp`` exceeds the KV heads (replicated on ``tp / n_kv`` ranks)."""
    _check_tp(n_q_heads, n_kv_heads, tp, rank)
    if tp <= n_kv_heads:
        per = n_kv_heads // tp
        return range(rank * per, (rank + 1) * per)
    head = rank // (tp // n_kv_heads)
    return range(head, head + 1)


def shard_layer(full: DecodeLayer, *, tp: int, rank: int) -> DecodeLayer:
    """Rank ``rank``'s shard of the whole layer ``full``: its query heads, its KV heads (a pool of
    those heads only, same blocks and tables) and its columns of ``w_o``; contiguous copies, as
    each GPU would hold them. Per-head FP8 scales follow their heads."""
    if full.tp != 1:
        raise ValueError(f"shard_layer takes the whole layer (tp=1), got a shard of tp={full.tp}")
    n_q, head_dim = full.q.shape[1], full.q.shape[2]
    c = full.cache
    qs = q_heads_of_rank(n_q, c.n_kv_heads, tp=tp, rank=rank)
    kvs = kv_heads_of_rank(n_q, c.n_kv_heads, tp=tp, rank=rank)
    kv = slice(kvs.start, kvs.stop)

    def head_scale(scale: torch.Tensor | None) -> torch.Tensor | None:
        """Per-head scales follow their heads; a per-tensor scale (or none) is every rank's."""
        return scale[kv].contiguous() if scale is not None and scale.numel() > 1 else scale

    cache = PagedKVCache(k_cache=c.k_cache[:, kv].contiguous(), v_cache=c.v_cache[:, kv].contiguous(),
                         block_tables=c.block_tables, seq_lens=c.seq_lens,
                         k_scale=head_scale(c.k_scale), v_scale=head_scale(c.v_scale))
    cols = slice(qs.start * head_dim, qs.stop * head_dim)
    return DecodeLayer(q=full.q[:, qs.start:qs.stop].contiguous(), cache=cache,
                       w_o=full.w_o[:, cols].contiguous(), tp=tp, rank=rank)


def _attention(layer: DecodeLayer, attention: str, validate: bool) -> torch.Tensor:
    """[batch, n_q_heads, head_dim]: the kernel's, in the query's dtype, or the reference's in float32
    (rounded by the caller to the partial sums' dtype)."""
    c = layer.cache
    if attention == "kernel":
        return paged_decode_attention(layer.q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                      k_scale=c.k_scale, v_scale=c.v_scale, validate=validate)
    if attention == "reference":
        return paged_attention_reference(layer.q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                         k_scale=c.k_scale, v_scale=c.v_scale)
    raise ValueError(f"attention must be one of {', '.join(ATTENTION_PATHS)}, got {attention!r:.40}")


def local_partial(layer: DecodeLayer, *, attention: str = "kernel", partial_dtype: torch.dtype | None = None,
                  validate: bool = True) -> torch.Tensor:
    """This rank's partial sum of the output projection, ``[batch, hidden]``: its heads' attention
    times its columns of ``w_o``, in ``partial_dtype`` (default the query's dtype, what the
    all-reduce then moves)."""
    dtype = layer.q.dtype if partial_dtype is None else partial_dtype
    attn = _attention(layer, attention, validate)
    flat = attn.reshape(layer.batch, -1).to(dtype)
    return flat @ layer.w_o.to(dtype).t()


def tp_decode_step(layer: DecodeLayer, *, group: dist.ProcessGroup | None = None, attention: str = "kernel",
                   partial_dtype: torch.dtype | None = None, validate: bool = True) -> torch.Tensor:
    """The layer's decode output on this rank, ``[batch, hidden]``: :func:`local_partial`, then a
    sum all-reduce over ``group`` (the default group when None; none at all when ``tp = 1``)."""
    partial = local_partial(layer, attention=attention, partial_dtype=partial_dtype, validate=validate)
    if layer.tp > 1:
        dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=group)
    return partial


def reference_output(full: DecodeLayer, rows: list[int] | None = None) -> torch.Tensor:
    """The whole (unsharded) layer in one process, float32 throughout: the paged reference
    attention of every head, then ``w_o`` in float32. ``rows`` limits it to some sequences
    (the bench checks a subset of a large batch). Returns ``[len(rows) or batch, hidden]``."""
    if full.tp != 1:
        raise ValueError(f"reference_output takes the whole layer (tp=1), got a shard of tp={full.tp}")
    c = full.cache
    picked = list(range(full.batch)) if rows is None else [int(r) for r in rows]
    if not picked or not all(0 <= r < full.batch for r in picked):
        raise ValueError(f"rows must be sequences in 0..{full.batch - 1}, got {rows!r:.80}")
    index = torch.tensor(picked, device=full.q.device)
    attn = paged_attention_reference(full.q[index], c.k_cache, c.v_cache, c.block_tables[index], c.seq_lens[index],
                                     k_scale=c.k_scale, v_scale=c.v_scale)
    return attn.reshape(len(picked), -1) @ full.w_o.float().t()


def allreduce_bytes(batch: int, hidden: int, bytes_per_value: int = 2) -> int:
    """Bytes of one decode step's all-reduce message: ``batch × hidden`` values (2 bytes in bf16)."""
    return batch * hidden * bytes_per_value
