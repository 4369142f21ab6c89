"""Compile the Gluon INT4 decode kernel for sm_90 without a GPU, and read what it compiled to.

Used by the CPU tests and the tuning notes: registers and spills from the cubin (Triton's
bundled ``cuobjdump``), shared memory from the compiled metadata, and instruction counts from
the PTX (which ``wgmma`` kinds, how wide the copies and the shared-memory accesses are, how many
dequantisation bodies), so a change that brings back byte loads or spills fails on CI.
"""

from __future__ import annotations

import dataclasses

from kernels.paged_decode_gluon import GluonDecodeConfig
from kernels.paged_decode_gluon_int4 import _check_int4_config, _constexprs, _gluon_int4_decode_kernel, _options

__all__ = ["compile_int4_decode_for_sm90", "int4_decode_sm90_build", "Int4DecodeSm90Build"]

# Arguments the JIT marks divisible by 16 when they are (every pool, table and buffer built here).
_POINTERS = ("q_ptr", "k_codes_ptr", "v_codes_ptr", "k_scales_ptr", "v_scales_ptr", "block_tables_ptr",
             "seq_lens_ptr", "out_ptr", "part_out_ptr", "part_lse_ptr")
_STRIDES = tuple(f"stride_{name}" for name in ("qb", "qh", "kb", "kh", "kt", "vb", "vh", "vt", "ksb", "ksh",
                                               "vsb", "vsh", "btb", "ob", "oh", "pob", "poh", "pos", "plb",
                                               "plh"))
# The scales' token stride is 1 (one 32-bit word per token): the JIT specialises it as 1.
_UNIT_STRIDES = ("stride_kst", "stride_vst")


def compile_int4_decode_for_sm90(cfg: GluonDecodeConfig, *, head_dim: int = 128, group: int = 4,
                                 block_size: int = 16, split: bool = True, q_dtype: str = "bf16"):
    """Compile the kernel for sm_90 without a GPU (Triton's bundled ptxas).

    Pointers and strides are marked divisible by 16 (and the scales' unit token stride as the
    constant 1), as the JIT specialises them for the real launch on this project's pools, so
    the compiled code is the one that runs. Returns Triton's ``CompiledKernel`` (``.asm``:
    ``ttgir``/``ptx``/``cubin``).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    _check_int4_config(cfg, head_dim)
    elem = {"bf16": "bf16", "fp16": "fp16"}[q_dtype]
    types = {"q_ptr": f"*{elem}", "k_codes_ptr": "*u8", "v_codes_ptr": "*u8", "k_scales_ptr": "*i32",
             "v_scales_ptr": "*i32", "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "out_ptr": f"*{elem}",
             "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "qk_scale": "fp32", "num_splits": "i32",
             **{name: "i32" for name in _STRIDES}}
    constexprs = _constexprs(cfg, group=group, head_dim=head_dim, block_size=block_size, split=split,
                             early_merge=split and cfg.pdl)
    constexprs.update({name: 1 for name in _UNIT_STRIDES}, num_warps=cfg.num_warps)
    signature_ = {**types, **{name: "constexpr" for name in constexprs}}
    names = _gluon_int4_decode_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in _POINTERS + _STRIDES}
    src = GluonASTSource(_gluon_int4_decode_kernel, signature_, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=_options(cfg))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Int4DecodeSm90Build:
    """What ptxas made of one configuration, and what its PTX does (no GPU needed)."""

    config: str
    head_dim: int
    block_size: int
    group: int
    registers: int  # per thread
    spill_bytes: int  # local memory per thread (stack frame: spills); 0 means no spills
    shared_bytes: int  # dynamic shared memory per program
    wgmma_f16: int  # fp16 wgmma.mma_async instructions (q.k^T and p.v)
    wgmma_other: int  # any other wgmma (none expected)
    cp_async_16: int  # 16-byte cp.async copies (the code gathers)
    cp_async_narrow: int  # cp.async copies of fewer than 16 bytes (none expected)
    byte_loads: int  # ld.global/ld.shared of single bytes (none expected)
    shared_loads_v4: int  # 16-byte ld.shared (the dequantisation's reads)
    shared_loads_narrow: int  # ld.shared of fewer than 16 bytes
    shared_stores_v4: int  # 16-byte st.shared (the dequantised tiles' writes)
    dequant_calls: int  # inlined DEQUANT_PTX bodies (four codes each)
    f16x2_ops: int  # sub/fma/mul.f16x2 (the dequantisation's arithmetic)
    global_loads: int  # ld.global of any width (tables, scales, query)
    bar_sync: int  # CTA barriers
    resident_per_sm: int  # programs an SM holds (registers, shared memory, warps)


def _ptx_counts(ptx: str) -> dict:
    import re

    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m\d+n\d+k\d+\.f32\.(\w+)\.(\w+)", ptx)
    copies = [int(n, 0) for n in re.findall(
        r"cp\.async\.c[ga]\.shared\.global(?:\.L2::\d+B)?\s*\[[^\]]+\],\s*\[[^\]]+\],\s*(0x[0-9a-fA-F]+|\d+)", ptx)]
    shared_loads = re.findall(r"ld\.shared((?:\.v\d)?)\.(?:[bsuf])(\d+)\b", ptx)
    shared_stores = re.findall(r"st\.shared((?:\.v\d)?)\.(?:[bsuf])(\d+)\b", ptx)
    return dict(
        wgmma_f16=sum(m == ("f16", "f16") for m in mma), wgmma_other=sum(m != ("f16", "f16") for m in mma),
        cp_async_16=sum(c == 16 for c in copies), cp_async_narrow=sum(c != 16 for c in copies),
        byte_loads=len(re.findall(r"ld\.(?:global|shared)(?:\.\w+)*\.[bsu]8\b", ptx)),
        shared_loads_v4=sum(int(v[2:] or 1) * int(bits) == 128 for v, bits in shared_loads),
        shared_loads_narrow=sum(int(v[2:] or 1) * int(bits) < 128 for v, bits in shared_loads),
        shared_stores_v4=sum(int(v[2:] or 1) * int(bits) == 128 for v, bits in shared_stores),
        dequant_calls=len(re.findall(r"prmt\.b32 t0, ", ptx)),
        f16x2_ops=len(re.findall(r"\b(?:sub|fma\.rn|mul)\.f16x2\b", ptx)),
        global_loads=len(re.findall(r"\bld\.global\b", ptx)),
        bar_sync=len(re.findall(r"\bbar\.sync\b|\bbarrier\.sync\b", ptx)))


def int4_decode_sm90_build(cfg: GluonDecodeConfig, *, head_dim: int = 128, block_size: int = 16, group: int = 4,
                           split: bool = True, q_dtype: str = "bf16") -> Int4DecodeSm90Build:
    """Compile for sm_90 and read registers and spills off the cubin with Triton's cuobjdump.

    Must run with ``TRITON_INTERPRET`` off (Gluon cannot compile the interpreter's objects).
    """
    from kernels.occupancy import cubin_resources, resident_programs

    kernel = compile_int4_decode_for_sm90(cfg, head_dim=head_dim, block_size=block_size, group=group, split=split,
                                          q_dtype=q_dtype)
    registers, spill_bytes = cubin_resources(kernel.asm["cubin"])
    shared = int(kernel.metadata.shared)
    return Int4DecodeSm90Build(
        config=cfg.name, head_dim=head_dim, block_size=block_size, group=group, registers=registers,
        spill_bytes=spill_bytes, shared_bytes=shared, **_ptx_counts(kernel.asm["ptx"]),
        resident_per_sm=resident_programs(registers_per_thread=registers, shared_bytes=shared,
                                          num_warps=cfg.num_warps))
