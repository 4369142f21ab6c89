"""Mixed chunked-prefill batches: which batches run, their contenders, one batch's records.

A batch is prompt chunks (many query tokens over a cached prefix) and decode rows (one query
token) reading one paged pool (``kernels.prefill.chunked``). Contenders, all on the same pool
and queries in the same run:

* ``triton_chunked``: the whole batch in one launch (the plan is built once, before timing, as
  a serving engine's scheduler does);
* ``triton_chunked_split``: the same kernel on the chunks and on the decode rows, two launches
  (batches holding both kinds only);
* ``gather_sdpa``: gather every sequence's pages into padded contiguous tensors, then one SDPA
  call for the chunks (a boolean mask: the prefix plus causal inside the chunk) and one for the
  decode rows (a mask of each row's length), what a PyTorch program without a paged kernel does;
* prefill-only batches (equal chunks, no prefix): the dense tiled forward and SDPA-cuDNN on
  the same tokens stored contiguously ``[B, H, N, D]``.

Rate: TFLOP/s of the batch's visible (query, key) pairs (``kernels.theory.varlen_flops``) for
every contender. Timed on CUDA-graph replays when the sweep asks for them (each contender alike).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernels.bench.records import Ceilings, Measurement, MixedResult, MixedShape  # noqa: E402
from kernels.bench.timing import free_cuda_memory, measure, sdpa_context  # noqa: E402
from kernels.prefill.chunked import BatchPlan, chunked_prefill_attention, plan_batch  # noqa: E402
from kernels.prefill.flash import flash_attention_forward  # noqa: E402
from kernels.reference.paged import gather_kv_padded  # noqa: E402
from kernels.theory import varlen_flops, varlen_hbm_bytes  # noqa: E402
from kernels.reference.varlen import cu_seqlens, varlen_attention_reference  # noqa: E402
from units import cdiv  # noqa: E402

__all__ = ["MIXED_PRESETS", "mixed_batch", "mixed_batches", "MixedInputs", "mixed_inputs", "MIXED", "bench_mixed_shape", "DEFAULT_MIXED_CONTENDERS"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_MIXED_CONTENDERS = ("triton_chunked", "triton_chunked_split", "gather_sdpa", "triton_flash", "triton_flash_tl",
                            "sdpa_cudnn")


def _spread(lo: int, hi: int, n: int) -> tuple[int, ...]:
    """``n`` lengths evenly from ``lo`` to ``hi`` (both included), as a scheduler's mix of ages."""
    return tuple(lo + round(i * (hi - lo) / max(n - 1, 1)) for i in range(n))


MIXED_PRESETS = ("busy", "one_chunk", "prefill_only")  # the order of mixed_batches()


def mixed_batch(preset: str, **shape) -> MixedShape:
    """One of :func:`mixed_batches` by name (``MIXED_PRESETS``), e.g. for the live page."""
    if preset not in MIXED_PRESETS:
        raise ValueError(f"preset must be one of {MIXED_PRESETS}, got {preset!r}")
    return mixed_batches(**shape)[MIXED_PRESETS.index(preset)]


def mixed_batches(*, n_q_heads: int = 32, n_kv_heads: int = 8, head_dim: int = 128, block_size: int = 16,
                  dtype: str = "bf16", quick: bool = False) -> tuple[MixedShape, ...]:
    """The harness's mixed batches (``quick``: the two smaller ones).

    1. four 512-token chunks over prefixes of 0, 4K, 8K and 16K tokens, with 64 decode rows over
       4K-32K (a busy server mid-prompt);
    2. one 2,048-token first chunk with 256 decode rows over 4K;
    3. prefill only: four first chunks of 2,048 tokens (comparable with the dense forward).
    """
    common = dict(n_q_heads=n_q_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, block_size=block_size,
                  dtype=dtype)
    prefixes = (0, 4096, 8192, 16384)
    busy = MixedShape(name="4x512 chunks over 0-16K + 64 decode over 4K-32K",
                      q_lens=(512,) * 4 + (1,) * 64,
                      seq_lens=tuple(p + 512 for p in prefixes) + _spread(4096, 32768, 64), **common)
    one_chunk = MixedShape(name="1x2048 chunk + 256 decode over 4K", q_lens=(2048,) + (1,) * 256,
                           seq_lens=(2048,) + (4096,) * 256, **common)
    prefill = MixedShape(name="4x2048 prefill-only", q_lens=(2048,) * 4, seq_lens=(2048,) * 4, **common)
    return (one_chunk, prefill) if quick else (busy, one_chunk, prefill)


@dataclass(kw_only=True)
class MixedInputs:
    """One batch's tensors, shared by every contender: a pool, tables, packed queries, the plan."""

    shape: MixedShape
    q: torch.Tensor  # [total_q, Hq, D]
    k: torch.Tensor  # [num_blocks, Hkv, block_size, D]
    v: torch.Tensor
    tables: torch.Tensor  # [batch, max_blocks] int32
    plan: BatchPlan
    check_seqs: list[int]  # sequences checked against the fp32 reference (first and last)
    ref: torch.Tensor | None = None  # [rows of check_seqs, Hq, D] fp32
    state: dict[str, object] = field(default_factory=dict)

    def rows_of(self, seqs: Sequence[int]) -> torch.Tensor:
        starts = cu_seqlens(self.shape.q_lens)
        return torch.cat([torch.arange(starts[b], starts[b + 1]) for b in seqs]).to(self.q.device)

    def err_of(self, out: torch.Tensor) -> tuple[float, str]:
        """Max abs error of packed outputs ``[total_q, Hq, D]`` on the checked sequences."""
        got = out[self.rows_of(self.check_seqs)].float()
        return float((got - self.ref).abs().max()), f"vs fp32 varlen reference, sequences {self.check_seqs}"


def mixed_inputs(shape: MixedShape, seed: int = 0, device: str | torch.device = "cuda") -> MixedInputs:
    """Random pool, scattered tables and queries for ``shape``, and the fp32 reference on the
    first and last sequences (CPU tensors run the kernels under the Triton interpreter)."""
    dev, dtype = torch.device(device), DTYPES[shape.dtype]
    hq, hkv, d, bs = shape.n_q_heads, shape.n_kv_heads, shape.head_dim, shape.block_size
    gen = torch.Generator(device=dev).manual_seed(seed)
    need = [cdiv(s, bs) for s in shape.seq_lens]
    k = torch.randn(sum(need), hkv, bs, d, device=dev, dtype=dtype, generator=gen)
    v = torch.randn(sum(need), hkv, bs, d, device=dev, dtype=dtype, generator=gen)
    # Blocks scattered over the pool, as an allocator serving many requests leaves them.
    perm = torch.randperm(sum(need), device=dev, generator=gen).to(torch.int32)
    tables = torch.full((len(need), max(need)), -1, dtype=torch.int32, device=dev)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[start:start + n]
        start += n
    q = torch.randn(sum(shape.q_lens), hq, d, device=dev, dtype=dtype, generator=gen)
    plan = plan_batch(shape.q_lens, shape.seq_lens, n_q_heads=hq, n_kv_heads=hkv, head_dim=d, device=dev)
    x = MixedInputs(shape=shape, q=q, k=k, v=v, tables=tables, plan=plan,
                    check_seqs=sorted({0, len(need) - 1}))
    sub = x.check_seqs
    x.ref, _ = varlen_attention_reference(q[x.rows_of(sub)], k, v, tables[sub],
                                          [shape.q_lens[b] for b in sub], [shape.seq_lens[b] for b in sub])
    return x


@dataclass(frozen=True, kw_only=True)
class MixedContender:
    name: str
    build: Callable[[MixedInputs], Callable[[], torch.Tensor]]  # -> the timed call (returns packed output)
    applies: Callable[[MixedShape], bool] = lambda s: True


def _chunked(x: MixedInputs) -> Callable[[], torch.Tensor]:
    chunked_prefill_attention(x.q, x.k, x.v, x.tables, x.plan)  # validated once; timed calls skip the sync
    return lambda: chunked_prefill_attention(x.q, x.k, x.v, x.tables, x.plan, validate=False)[0]


def _part(x: MixedInputs, seqs: list[int]):
    """A sub-batch's queries, tables and plan (built before timing)."""
    s = x.shape
    rows = x.rows_of(seqs)
    plan = plan_batch([s.q_lens[b] for b in seqs], [s.seq_lens[b] for b in seqs], n_q_heads=s.n_q_heads,
                      n_kv_heads=s.n_kv_heads, head_dim=s.head_dim, device=x.q.device)
    return rows, x.q[rows].contiguous(), x.tables[seqs].contiguous(), plan


def _chunked_split(x: MixedInputs) -> Callable[[], torch.Tensor]:
    chunks = [b for b, q in enumerate(x.shape.q_lens) if q > 1]
    rows_ = [b for b, q in enumerate(x.shape.q_lens) if q == 1]
    parts = [_part(x, chunks), _part(x, rows_)]
    out = torch.empty_like(x.q)

    def run() -> torch.Tensor:
        for rows, q, tables, plan in parts:
            out[rows] = chunked_prefill_attention(q, x.k, x.v, tables, plan, validate=False)[0]
        return out

    return run


def _gather_sdpa(x: MixedInputs) -> Callable[[], torch.Tensor]:
    s, dev = x.shape, x.q.device
    groups = [g for g in ([b for b, q in enumerate(s.q_lens) if q > 1], [b for b, q in enumerate(s.q_lens) if q == 1])
              if g]
    plans = []
    for seqs in groups:
        n_q = max(s.q_lens[b] for b in seqs)
        n_k = max(s.seq_lens[b] for b in seqs)
        qpos = torch.arange(n_q, device=dev)
        kpos = torch.arange(n_k, device=dev)
        ctx = torch.tensor([s.seq_lens[b] - s.q_lens[b] for b in seqs], device=dev)
        lens = torch.tensor([s.seq_lens[b] for b in seqs], device=dev)
        # Row i of sequence b sees keys <= context + i inside its length; padded rows see key 0 on.
        mask = (kpos[None, None, :] <= (ctx[:, None] + qpos[None, :])[..., None]) & (kpos < lens[:, None, None])
        qp = torch.zeros(len(seqs), s.n_q_heads, n_q, s.head_dim, dtype=x.q.dtype, device=dev)
        dst = [(i, t) for i, b in enumerate(seqs) for t in range(s.q_lens[b])]
        di = torch.tensor([d[0] for d in dst], device=dev)
        dt = torch.tensor([d[1] for d in dst], device=dev)
        rows = x.rows_of(seqs)
        # Index tensors are made here: a host-to-device copy inside a CUDA-graph capture would fail.
        plans.append((x.tables[seqs].contiguous(), n_k, mask[:, None], qp, di, dt, rows))
    out = torch.empty_like(x.q)

    def run() -> torch.Tensor:
        for tables, n_k, mask, qp, di, dt, rows in plans:
            qp[di, :, dt] = x.q[rows]
            kg = gather_kv_padded(x.k, tables, n_k)
            vg = gather_kv_padded(x.v, tables, n_k)
            o = F.scaled_dot_product_attention(qp, kg, vg, attn_mask=mask, enable_gqa=True)
            out[rows] = o[di, :, dt]
        return out

    return run


def _contiguous(x: MixedInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A prefill-only batch as ``[B, H, N, D]`` tensors (equal chunks, no prefix)."""
    s = x.shape
    b, n = len(s.q_lens), s.q_lens[0]
    q = x.q.reshape(b, n, s.n_q_heads, s.head_dim).transpose(1, 2).contiguous()
    k = gather_kv_padded(x.k, x.tables, n).contiguous()
    v = gather_kv_padded(x.v, x.tables, n).contiguous()
    return q, k, v


def _dense(backend: str) -> Callable[[MixedInputs], Callable[[], torch.Tensor]]:
    def build(x: MixedInputs) -> Callable[[], torch.Tensor]:
        q, k, v = _contiguous(x)
        s = x.shape

        def packed(o: torch.Tensor) -> torch.Tensor:
            return o.transpose(1, 2).reshape(-1, s.n_q_heads, s.head_dim)

        if backend in ("auto", "triton"):  # ours: the shipped dispatch, or the triton.language kernel
            return lambda: packed(flash_attention_forward(q, k, v, causal=True, backend=backend)[0])

        def run() -> torch.Tensor:
            with sdpa_context(backend):
                return packed(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))

        return run

    return build


def _equal_first_chunks(s: MixedShape) -> bool:
    return s.prefill_only and len(set(s.q_lens)) == 1


MIXED: dict[str, MixedContender] = {c.name: c for c in (
    MixedContender(name="triton_chunked", build=_chunked),
    MixedContender(name="triton_chunked_split", build=_chunked_split,
                   applies=lambda s: 0 < s.n_decode < len(s.q_lens)),
    MixedContender(name="gather_sdpa", build=_gather_sdpa, applies=lambda s: s.n_decode > 0),
    MixedContender(name="triton_flash", build=_dense("auto"), applies=_equal_first_chunks),
    MixedContender(name="triton_flash_tl", build=_dense("triton"), applies=_equal_first_chunks),
    MixedContender(name="sdpa_cudnn", build=_dense("CUDNN_ATTENTION"), applies=_equal_first_chunks),
)}


def bench_mixed_shape(shape: MixedShape, ceilings: Ceilings, *, warmup_ms: float = 10.0, rep_ms: float = 40.0,
                      cuda_graphs: bool = True, contenders: Sequence[str] | None = None,
                      seed: int = 0) -> MixedResult:
    """Time every contender that applies to ``shape`` (same pool and queries for all of them)."""
    wanted = set(DEFAULT_MIXED_CONTENDERS if contenders is None else contenders)
    flops = varlen_flops(shape.q_lens, shape.seq_lens, shape.n_q_heads, shape.head_dim)
    nbytes = varlen_hbm_bytes(shape.q_lens, shape.seq_lens, shape.n_q_heads, shape.n_kv_heads, shape.head_dim,
                              torch.tensor([], dtype=DTYPES[shape.dtype]).element_size())
    m_args = dict(measured_ceiling=ceilings.matmul_tflops, datasheet_ceiling=ceilings.datasheet_tflops,
                  warmup_ms=warmup_ms, rep_ms=rep_ms, unit="TFLOP/s", graph_calls=1 if cuda_graphs else 0)
    results: list[Measurement] = []
    x = None
    try:
        x = mixed_inputs(shape, seed)
        for name, c in MIXED.items():
            if name not in wanted or not c.applies(shape):
                continue
            try:
                run = c.build(x)
            except Exception as exc:  # noqa: BLE001 - building its inputs failed (memory): its record
                free_cuda_memory()
                results.append(Measurement(contender=name, status="error", unit="TFLOP/s", work=flops,
                                           note=f"building inputs: {type(exc).__name__}: {str(exc)[:200]}"))
                continue
            results.append(measure(name, run, work=flops, check=lambda run=run: x.err_of(run()), **m_args))
    finally:
        if x is not None:
            x.state.clear()
        x = None
        free_cuda_memory()
    return MixedResult(shape=shape, flops=flops, hbm_bytes=nbytes, measurements=tuple(results))
