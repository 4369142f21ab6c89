"""The benchmark's contenders as tables: name → what it runs, on which KV layout, what its rate counts.

Decode (one query token per sequence, paged KV, d = 128): this package's kernel on the shape's
dtype and on an FP8 (e4m3, per-head scales) copy of the cache; gather the pages then SDPA; SDPA
with each backend (FLASH, CUDNN, EFFICIENT via ``sdpa_kernel``) on the same KV stored
contiguously; cuDNN's paged SDPA graph and FlashInfer's paged decode (bf16 and FP8, tensor-core
and CUDA-core paths) on the same pool, where they import (:mod:`kernels.bench.peers`); naive
attention. Rate: TB/s of KV read (``decode_kv_bytes`` at the contender's
bytes per value; gather-then-SDPA is credited with the bf16 KV bytes only).

Prefill: the tiled forward kernel against the SDPA backends and naive attention. Rate: TFLOP/s
(``prefill_flops``, for every contender).

A decode contender may *prepare* something before it is timed (the FP8 copy, the contiguous
KV); a failure there (usually out of memory) becomes its record, status "oom" or "error".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernels.runtime import ensure_triton_backend

ensure_triton_backend()  # before the kernel modules: the interpreter is chosen at decoration

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernels.bench import peers  # noqa: E402
from kernels.bench.records import DecodeShape, PrefillShape  # noqa: E402
from kernels.bench.timing import Rotation, sdpa_context  # noqa: E402
from kernels.bench.variants import VARIANT_PREFIX, DecodeVariant  # noqa: E402
from kernels.prefill.flash import flash_attention_forward  # noqa: E402
from kernels.cache.int4 import dequantize_int4, quantize_pool_int4  # noqa: E402
from kernels.cache.paged import quantize_kv_fp8  # noqa: E402
from kernels.decode.api import paged_decode_attention  # noqa: E402
from kernels.reference.paged import gather_kv_padded, paged_attention_reference  # noqa: E402
from kernels.reference.dense import naive_attention_native  # noqa: E402
from kernels.theory import decode_int4_kv_bytes, decode_kv_bytes  # noqa: E402
from units import cdiv  # noqa: E402

__all__ = ["DTYPES", "SDPA_BACKENDS", "DecodeInputs", "Timed", "DecodeContender", "DECODE", "PrefillInputs",
           "PrefillContender", "PREFILL", "variant_contender", "random_paged_tensors"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION"}
ErrCheck = Callable[[], tuple[float, str]]


# ----------------------------------------------------------------------------------------------
# Decode
# ----------------------------------------------------------------------------------------------


def random_paged_tensors(batch: int, context: int, n_q_heads: int, n_kv_heads: int, head_dim: int, block_size: int,
                         dtype: torch.dtype, n_rot: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """``(q, k, v, tables, lens)`` of a decode sweep: one pool of random K/V ``[n_rot × batch ×
    blocks, n_kv_heads, block_size, head_dim]`` on ``gen``'s device, ``n_rot`` sets of queries
    ``[n_rot, batch, n_q_heads, head_dim]`` and tables ``[n_rot, batch, blocks]``, every sequence
    ``context`` tokens. Every rotation's tables are a random slice of one permutation of the pool:
    blocks of a sequence are scattered, as an allocator serving many requests leaves them."""
    dev, blocks = gen.device, cdiv(context, block_size)
    num_blocks = n_rot * batch * blocks
    k = torch.randn(num_blocks, n_kv_heads, block_size, head_dim, device=dev, dtype=dtype, generator=gen)
    v = torch.randn(num_blocks, n_kv_heads, block_size, head_dim, device=dev, dtype=dtype, generator=gen)
    perm = torch.randperm(num_blocks, device=dev, generator=gen).to(torch.int32)
    q = torch.randn(n_rot, batch, n_q_heads, head_dim, device=dev, dtype=dtype, generator=gen)
    lens = torch.full((batch,), context, dtype=torch.int32, device=dev)
    return q, k, v, perm.reshape(n_rot, batch, blocks), lens


@dataclass(kw_only=True)
class DecodeInputs:
    """One decode shape's tensors, shared by every contender (same KV values for all of them).

    ``q`` is ``[rotations, batch, n_q_heads, head_dim]``, ``tables`` ``[rotations, batch,
    blocks]``; ``ref`` is the float32 paged reference on ``check_rows`` of rotation 0.
    """

    shape: DecodeShape
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    tables: torch.Tensor
    lens: torch.Tensor
    rot: Rotation
    check_rows: list[int]
    state: dict[str, object] = field(default_factory=dict)  # tensors built on demand, freed with the shape
    ref: torch.Tensor | None = None

    def reference(self, kc: torch.Tensor, vc: torch.Tensor, ks=None, vs=None) -> torch.Tensor:
        rows = self.check_rows
        return paged_attention_reference(self.q[0, rows], kc, vc, self.tables[0, rows], self.lens[rows],
                                         k_scale=ks, v_scale=vs)

    def err_of(self, out: torch.Tensor, reference: torch.Tensor | None = None) -> tuple[float, str]:
        s = self.shape
        o = out.reshape(s.batch, s.n_q_heads, s.head_dim)[self.check_rows].float()
        ref = self.ref if reference is None else reference
        return float((o - ref).abs().max()), f"vs fp32 paged reference, sequences {self.check_rows}"

    def contiguous(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rotation's KV gathered once into ``[rotations, batch, n_kv_heads, L, d]``.

        Built for the first contiguous contender and kept for the others; a failure is kept too,
        so each of them reports the same one.
        """
        if "contiguous_error" in self.state:
            raise self.state["contiguous_error"]
        if "kc" not in self.state:
            try:
                n_rot, b = self.q.shape[:2]
                L, hkv, d = self.shape.context, self.shape.n_kv_heads, self.shape.head_dim
                kc = torch.empty(n_rot, b, hkv, L, d, dtype=self.k.dtype, device=self.k.device)
                vc = torch.empty_like(kc)
                for i in range(n_rot):
                    kc[i] = gather_kv_padded(self.k, self.tables[i], L)
                    vc[i] = gather_kv_padded(self.v, self.tables[i], L)
                self.state["kc"], self.state["vc"] = kc, vc
            except Exception as exc:
                self.state["contiguous_error"] = exc
                raise
        return self.state["kc"], self.state["vc"]


@dataclass(frozen=True, kw_only=True)
class Timed:
    """What one contender runs: the timed call and its error check against the reference."""

    run: Callable[[], object]
    check: ErrCheck


@dataclass(frozen=True, kw_only=True)
class DecodeContender:
    name: str
    layout: str  # how its KV is stored
    kv_bytes_per_value: int  # its rate counts decode_kv_bytes at this many bytes per value
    build: Callable[[DecodeInputs, object], Timed]  # (inputs, what prepare made) -> the timed call
    prepare: Callable[[DecodeInputs], object] | None = None  # built before timing; failure = record
    prepares: str = ""  # what prepare builds, for the failure note
    graph: bool = True  # timed on CUDA-graph replays when the sweep asks for them
    int4: bool = False  # its bytes are the INT4 layout's (codes + scales), not bytes per value
    needs: str = ""  # the optional package it runs on (kernels.bench.peers); absent: "not_available"

    def work(self, shape: DecodeShape) -> int:
        if self.int4:
            return decode_int4_kv_bytes(shape.batch, shape.context, shape.n_kv_heads, shape.head_dim)
        return decode_kv_bytes(shape.batch, shape.context, shape.n_kv_heads, shape.head_dim,
                               self.kv_bytes_per_value)


def _triton_paged(x: DecodeInputs, _: object) -> Timed:
    q, k, v, tables, lens, rot = x.q, x.k, x.v, x.tables, x.lens, x.rot
    paged_decode_attention(q[0], k, v, tables[0], lens)  # validated call (values checked once)
    return Timed(run=lambda: paged_decode_attention(q[(i := rot.next())], k, v, tables[i], lens, validate=False),
                 check=lambda: x.err_of(paged_decode_attention(q[0], k, v, tables[0], lens)))


def _fp8_pool(x: DecodeInputs) -> tuple[torch.Tensor, ...]:
    return quantize_kv_fp8(x.k, x.v)


def _triton_paged_fp8(x: DecodeInputs, pool: tuple[torch.Tensor, ...]) -> Timed:
    k8, v8, ks, vs = pool
    q, tables, lens, rot = x.q, x.tables, x.lens, x.rot
    ref8 = x.reference(k8, v8, ks, vs)

    def check() -> tuple[float, str]:
        out = paged_decode_attention(q[0], k8, v8, tables[0], lens, k_scale=ks, v_scale=vs)
        err, _ = x.err_of(out, ref8)
        return err, "vs fp32 reference on the dequantised FP8 cache"

    return Timed(run=lambda: paged_decode_attention(q[(i := rot.next())], k8, v8, tables[i], lens,
                                                    k_scale=ks, v_scale=vs, validate=False),
                 check=check)


def _int4_pool(x: DecodeInputs) -> tuple:
    return quantize_pool_int4(x.k), quantize_pool_int4(x.v)


def _triton_paged_int4(x: DecodeInputs, pools: tuple) -> Timed:
    k4, v4 = pools
    q, tables, lens, rot = x.q, x.tables, x.lens, x.rot
    ref4 = x.reference(dequantize_int4(k4), dequantize_int4(v4))

    def check() -> tuple[float, str]:
        err, _ = x.err_of(paged_decode_attention(q[0], k4, v4, tables[0], lens), ref4)
        return err, "vs fp32 reference on the dequantised INT4 cache"

    return Timed(run=lambda: paged_decode_attention(q[(i := rot.next())], k4, v4, tables[i], lens, validate=False),
                 check=check)


def _gather_sdpa(x: DecodeInputs, _: object) -> Timed:
    q4, k, v, tables, L, rot = x.q.unsqueeze(3), x.k, x.v, x.tables, x.shape.context, x.rot  # q4 [rot, B, Hq, 1, D]

    def run() -> torch.Tensor:
        i = rot.next()
        kg = gather_kv_padded(k, tables[i], L)
        vg = gather_kv_padded(v, tables[i], L)
        return F.scaled_dot_product_attention(q4[i], kg, vg, enable_gqa=True)

    def check() -> tuple[float, str]:
        out = F.scaled_dot_product_attention(q4[0], gather_kv_padded(k, tables[0], L),
                                             gather_kv_padded(v, tables[0], L), enable_gqa=True)
        return x.err_of(out)

    return Timed(run=run, check=check)


def _contiguous(x: DecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
    return x.contiguous()


def _sdpa_on_contiguous(backend: str) -> Callable[[DecodeInputs, object], Timed]:
    def build(x: DecodeInputs, kv: tuple[torch.Tensor, torch.Tensor]) -> Timed:
        (kc, vc), q4, rot = kv, x.q.unsqueeze(3), x.rot

        def run() -> torch.Tensor:
            i = rot.next()
            with sdpa_context(backend):  # a fresh context each call: sdpa_kernel is single-use
                return F.scaled_dot_product_attention(q4[i], kc[i], vc[i], enable_gqa=True)

        def check() -> tuple[float, str]:
            with sdpa_context(backend):
                return x.err_of(F.scaled_dot_product_attention(q4[0], kc[0], vc[0], enable_gqa=True))

        return Timed(run=run, check=check)

    return build


def _naive_on_contiguous(x: DecodeInputs, kv: tuple[torch.Tensor, torch.Tensor]) -> Timed:
    (kc, vc), q4, rot = kv, x.q.unsqueeze(3), x.rot
    return Timed(run=lambda: naive_attention_native(q4[(i := rot.next())], kc[i], vc[i]),
                 check=lambda: x.err_of(naive_attention_native(q4[0], kc[0], vc[0])))


_CONTIGUOUS = "contiguous [B, Hkv, L, D]"
# In the order of the report's rows.
DECODE: dict[str, DecodeContender] = {c.name: c for c in (
    DecodeContender(name="triton_paged", layout="paged", kv_bytes_per_value=2, build=_triton_paged),
    DecodeContender(name="triton_paged_fp8", layout="paged, e4m3", kv_bytes_per_value=1, build=_triton_paged_fp8,
                    prepare=_fp8_pool, prepares="the FP8 cache"),
    DecodeContender(name="triton_paged_int4", layout="paged, int4 + fp16 scale per half head", kv_bytes_per_value=1,
                    build=_triton_paged_int4, prepare=_int4_pool, prepares="the INT4 cache", int4=True),
    DecodeContender(name="gather_sdpa", layout="paged, gathered per call", kv_bytes_per_value=2,
                    build=_gather_sdpa),
    *(DecodeContender(name=name, layout=_CONTIGUOUS, kv_bytes_per_value=2, build=_sdpa_on_contiguous(backend),
                      prepare=_contiguous, prepares="the contiguous KV")
      for name, backend in SDPA_BACKENDS.items()),
    # The CUDA libraries' paged kernels on the same pool and tables, where they import.
    DecodeContender(name="cudnn_paged", layout="paged", kv_bytes_per_value=2, build=peers.build_cudnn,
                    prepare=peers.prepare_cudnn, prepares="cuDNN's paged SDPA graph", needs=peers.CUDNN_PACKAGE),
    *(DecodeContender(name=f"flashinfer_{path}{'_fp8' if fp8 else ''}", layout="paged, e4m3" if fp8 else "paged",
                      kv_bytes_per_value=1 if fp8 else 2, build=peers.build_flashinfer,
                      prepare=peers.prepare_flashinfer(path == "tc", fp8), prepares="FlashInfer's decode plans",
                      needs=peers.FLASHINFER_PACKAGE)
      for fp8 in (False, True) for path in ("tc", "cuda")),
    # Milliseconds per call: launch overhead is noise, so timed on plain calls.
    DecodeContender(name="naive", layout=_CONTIGUOUS, kv_bytes_per_value=2, build=_naive_on_contiguous,
                    prepare=_contiguous, prepares="the contiguous KV", graph=False),
)}


def variant_contender(variant: DecodeVariant) -> DecodeContender:
    """A tuning variant as a decode contender: the one entry with the variant's config, on the
    shape's cache (bf16) or on the harness's FP8 or INT4 copy of it, checked like the shipped row."""

    def build(x: DecodeInputs, pools: tuple | None) -> Timed:
        q, tables, lens, rot, cfg = x.q, x.tables, x.lens, x.rot, variant.config
        if variant.kv == "bf16":
            kp, vp, scales, ref = x.k, x.v, {}, None
        elif variant.kv == "fp8":
            kp, vp, ks, vs = pools
            scales, ref = dict(k_scale=ks, v_scale=vs), x.reference(kp, vp, ks, vs)
        else:
            kp, vp = pools
            scales, ref = {}, x.reference(dequantize_int4(kp), dequantize_int4(vp))

        def check() -> tuple[float, str]:
            err, note = x.err_of(paged_decode_attention(q[0], kp, vp, tables[0], lens, config=cfg, **scales), ref)
            return err, note if ref is None else f"vs fp32 reference on the dequantised {variant.kv.upper()} cache"

        return Timed(run=lambda: paged_decode_attention(q[(i := rot.next())], kp, vp, tables[i], lens, config=cfg,
                                                        validate=False, **scales), check=check)

    prepare = {"bf16": None, "fp8": _fp8_pool, "int4": _int4_pool}[variant.kv]
    return DecodeContender(name=VARIANT_PREFIX + variant.name, layout="paged" if variant.kv == "bf16" else
                           f"paged, {variant.kv}", kv_bytes_per_value=2 if variant.kv == "bf16" else 1, build=build,
                           prepare=prepare, prepares=f"the {variant.kv.upper()} cache", int4=variant.kv == "int4")


# ----------------------------------------------------------------------------------------------
# Prefill
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PrefillInputs:
    shape: PrefillShape
    q: torch.Tensor  # [B, Hq, N, D]
    k: torch.Tensor  # [B, Hkv, N, D]
    v: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class PrefillContender:
    name: str
    run: Callable[[PrefillInputs], torch.Tensor]  # one forward pass; the output is what is checked


def _sdpa_prefill(backend: str) -> Callable[[PrefillInputs], torch.Tensor]:
    def run(x: PrefillInputs) -> torch.Tensor:
        s = x.shape
        with sdpa_context(backend):  # a fresh context each call: sdpa_kernel is single-use
            return F.scaled_dot_product_attention(x.q, x.k, x.v, is_causal=s.causal,
                                                  enable_gqa=s.n_q_heads != s.n_kv_heads)

    return run


PREFILL: dict[str, PrefillContender] = {c.name: c for c in (
    # The shipped forward: the Gluon kernel on Hopper from GLUON_MIN_TOKENS, the Triton one elsewhere.
    PrefillContender(name="triton_flash", run=lambda x: flash_attention_forward(x.q, x.k, x.v,
                                                                                causal=x.shape.causal)[0]),
    # The triton.language kernel alone, for comparison where the Gluon one is the default.
    PrefillContender(name="triton_flash_tl", run=lambda x: flash_attention_forward(
        x.q, x.k, x.v, causal=x.shape.causal, backend="triton")[0]),
    *(PrefillContender(name=name, run=_sdpa_prefill(backend)) for name, backend in SDPA_BACKENDS.items()),
    PrefillContender(name="naive", run=lambda x: naive_attention_native(x.q, x.k, x.v, causal=x.shape.causal)),
)}
