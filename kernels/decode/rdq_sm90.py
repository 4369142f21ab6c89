"""Compile the register-dequant decode kernel (:mod:`kernels.decode.rdq`) for sm_90 without a
GPU, and read what it compiled to.

Used by the CPU tests and the tuning notes: registers and spills from the cubin (Triton's bundled
``cuobjdump``), shared memory from the compiled metadata, instruction counts from the PTX (how
many ``mma.sync``, how wide the copies and shared loads are, whether anything but the query's
one-off layout change touches shared memory, shuffles, the swapped design's ``movmatrix``, the
PDL merge's early start) and from the SASS the instructions of the main loop's body, the issue
cost of one tile.
"""

from __future__ import annotations

import dataclasses
import re

from kernels.decode.rdq import RdqConfig, _constexprs, _options, _rdq_decode_kernel

__all__ = ["compile_rdq_for_sm90", "rdq_sm90_build", "RdqSm90Build"]

# Arguments the JIT marks divisible by 16 when they are (every pool, table and buffer built here).
_POINTERS = ("q_ptr", "k_codes_ptr", "v_codes_ptr", "k_scales_ptr", "v_scales_ptr", "block_tables_ptr",
             "seq_lens_ptr", "out_ptr", "part_out_ptr", "part_lse_ptr")
_STRIDES = tuple(f"stride_{name}" for name in ("qb", "qh", "kb", "kh", "kt", "vb", "vh", "vt", "ksb", "ksh",
                                               "vsb", "vsh", "btb", "ob", "oh", "pob", "poh", "pos", "plb",
                                               "plh"))


def compile_rdq_for_sm90(cfg: RdqConfig, *, fmt: str = "int4", head_dim: int = 128, group: int = 4,
                         block_size: int = 16, split: bool = True, q_dtype: str = "bf16"):
    """Compile the kernel for sm_90 without a GPU (Triton's bundled ptxas).

    Pointers and strides are marked divisible by 16 as the JIT marks them for this project's
    pools; the INT4 scale words' token stride is the constant 1, FP8's per-head scales have
    constant strides (0, 1, 0), as the JIT specialises them. Returns Triton's ``CompiledKernel``
    (``.asm``: ``ttgir``/``ptx``/``cubin``).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    elem = {"bf16": "bf16", "fp16": "fp16"}[q_dtype]
    scale_type = "*i32" if fmt == "int4" else "*fp32"
    types = {"q_ptr": f"*{elem}", "k_codes_ptr": "*u8", "v_codes_ptr": "*u8", "k_scales_ptr": scale_type,
             "v_scales_ptr": scale_type, "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "out_ptr": f"*{elem}",
             "part_out_ptr": "*bf16" if cfg.bf16_partials and fmt == "int4" else "*fp32",
             "part_lse_ptr": "*fp32", "qk_scale": "fp32", "num_splits": "i32",
             **{name: "i32" for name in _STRIDES}}
    # Split builds launch the merge as a PDL dependent where the config asks, as on the H200.
    constexprs = _constexprs(cfg, fmt=fmt, group=group, head_dim=head_dim, block_size=block_size, split=split,
                             early_merge=split and cfg.pdl)
    if fmt == "int4":
        constexprs.update(stride_kst=1, stride_vst=1)
    else:
        constexprs.update(stride_ksb=0, stride_ksh=1, stride_kst=0, stride_vsb=0, stride_vsh=1, stride_vst=0)
    constexprs["num_warps"] = cfg.num_warps
    for name in constexprs:
        types.pop(name, None)
    names = _rdq_decode_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in _POINTERS + _STRIDES if n in types}
    src = GluonASTSource(_rdq_decode_kernel, {**types, **{n: "constexpr" for n in constexprs}},
                         constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=_options(cfg))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RdqSm90Build:
    """What ptxas made of one configuration, and what its PTX and SASS do (no GPU needed)."""

    config: str
    fmt: str
    head_dim: int
    block_size: int
    group: int
    registers: int  # per thread
    spill_bytes: int  # local memory per thread (stack frame: spills); 0 means no spills
    shared_bytes: int  # dynamic shared memory per program (the code ring + the query's layout change)
    resident_per_sm: int  # programs (= warps) an SM holds
    mma_sync: int  # mma.sync.aligned.m16n8k16 f16 x f16 -> f32 in the PTX (all in the loop body)
    mma_other: int  # any other mma (none expected)
    cp_async: dict  # copy width (bytes) -> cp.async count
    shared_loads: dict  # load width (bytes) -> ld.shared count
    global_stores: dict  # store width (bytes) -> st.global count (the output or partial and its lse)
    shared_stores: int  # st.shared of any width
    shared_stores_in_loop: int  # st.shared inside the main loop (none expected: operands stay in registers)
    byte_loads: int  # ld.global/ld.shared of single bytes (none expected)
    shfl: int  # shuffles (the softmax's row max and sum across the four lanes of a row)
    shfl_in_loop: int
    movmatrix: int  # movmatrix.trans in the PTX (the swapped design's P^T; all in the loop body)
    movmatrix_in_loop: int
    launch_dependents: int  # griddepcontrol.launch_dependents (the PDL merge's early start)
    loop_sass: int  # SASS instructions of the main loop's body: one tile's issue cost per warp
    loop_sass_ops: dict  # opcode -> count in that body
    loop_sass_skippable: int  # of those, instructions that conditional forward branches jump over
    # (the swapped design's rescale, skipped while no head's running max grows): loop_sass minus
    # this is the common tile's issue cost


def _loop_body(ptx: str) -> str:
    """The PTX between the main loop's header label and its backward branch (the longest loop)."""
    best = ""
    for label in re.findall(r"^(\$L__BB\d+_\d+):", ptx, re.M):
        start = ptx.index(label + ":")
        branch = re.search(r"bra(?:\.uni)?\s+" + re.escape(label) + r";", ptx[start:])
        if branch and branch.end() > len(best):
            best = ptx[start:start + branch.end()]
    return best


def _widths(matches) -> dict:
    counts: dict = {}
    for vec, bits in matches:
        width = int(vec[2:] or 1) * int(bits) // 8
        counts[width] = counts.get(width, 0) + 1
    return counts


def _sass_loop(sass: str) -> tuple[dict, int]:
    """Opcode counts of the longest backward-branching SASS range (the main loop), and how many of
    its instructions lie between a predicated forward branch inside it and that branch's target."""
    instrs = [(int(a, 16), body) for a, body in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    branches = [(addr, int(m.group(1), 16), body.startswith("@")) for addr, body in instrs
                for m in [re.search(r"\bBRA\b.*?0x([0-9a-f]+)", body)] if m]
    loops = [(target, addr) for addr, target, _ in branches if target < addr]
    if not loops:
        return {}, 0
    first, last = max(loops, key=lambda r: r[1] - r[0])
    skips = [(addr, target) for addr, target, predicated in branches
             if predicated and first <= addr < target <= last]
    ops: dict = {}
    skippable = 0
    for addr, body in instrs:
        if first <= addr <= last:
            op = re.sub(r"^@!?U?P\w+\s+", "", body).split()[0].split(".")[0]
            ops[op] = ops.get(op, 0) + 1
            skippable += any(branch < addr < target for branch, target in skips)
    return ops, skippable


def rdq_sm90_build(cfg: RdqConfig, *, fmt: str = "int4", head_dim: int = 128, block_size: int = 16,
                   group: int = 4, split: bool = True, q_dtype: str = "bf16") -> RdqSm90Build:
    """Compile for sm_90 and read the cubin, PTX and SASS. Must run with ``TRITON_INTERPRET`` off
    (Gluon cannot compile the interpreter's objects)."""
    import subprocess
    import tempfile
    from pathlib import Path

    import triton.backends.nvidia as nvidia_backend

    from kernels.occupancy import cubin_resources, resident_programs

    kernel = compile_rdq_for_sm90(cfg, fmt=fmt, head_dim=head_dim, block_size=block_size, group=group, split=split,
                                  q_dtype=q_dtype)
    ptx, cubin = kernel.asm["ptx"], kernel.asm["cubin"]
    registers, spill_bytes = cubin_resources(cubin)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([str(Path(nvidia_backend.__file__).parent / "bin" / "cuobjdump"), "-sass", str(path)],
                              capture_output=True, text=True, check=True, timeout=120).stdout
    loop = _loop_body(ptx)
    mma = re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.(\w+)\.(\w+)\.(\w+)\.(\w+)", ptx)
    ops, skippable = _sass_loop(sass)
    shared = int(kernel.metadata.shared)
    return RdqSm90Build(
        config=cfg.name, fmt=fmt, head_dim=head_dim, block_size=block_size, group=group, registers=registers,
        spill_bytes=spill_bytes, shared_bytes=shared,
        resident_per_sm=resident_programs(registers_per_thread=registers, shared_bytes=shared,
                                          num_warps=cfg.num_warps),
        mma_sync=sum(m == ("m16n8k16", "f32", "f16", "f16", "f32") for m in mma),
        mma_other=sum(m != ("m16n8k16", "f32", "f16", "f16", "f32") for m in mma),
        cp_async={int(n, 0): len(re.findall(
            r"cp\.async\.c[ga]\.shared\.global(?:\.L2::\d+B)?\s*\[[^\]]+\],\s*\[[^\]]+\],\s*" + n + r"\b", ptx))
            for n in sorted(set(re.findall(
                r"cp\.async\.c[ga]\.shared\.global(?:\.L2::\d+B)?\s*\[[^\]]+\],\s*\[[^\]]+\],\s*(0x[0-9a-fA-F]+|\d+)",
                ptx)))},
        shared_loads=_widths(re.findall(r"ld\.shared((?:\.v\d)?)\.(?:[bsuf])(\d+)\b", ptx)),
        global_stores=_widths(re.findall(r"st\.global(?:\.L1::\w+)?((?:\.v\d)?)\.(?:[bsuf])(\d+)\b", ptx)),
        shared_stores=len(re.findall(r"\bst\.shared", ptx)), shared_stores_in_loop=len(re.findall(r"\bst\.shared", loop)),
        byte_loads=len(re.findall(r"ld\.(?:global|shared)(?:\.\w+)*\.[bsu]8\b", ptx)),
        shfl=len(re.findall(r"\bshfl\.sync", ptx)), shfl_in_loop=len(re.findall(r"\bshfl\.sync", loop)),
        movmatrix=len(re.findall(r"\bmovmatrix\.sync", ptx)),
        movmatrix_in_loop=len(re.findall(r"\bmovmatrix\.sync", loop)),
        launch_dependents=len(re.findall(r"\bgriddepcontrol\.launch_dependents", ptx)),
        loop_sass=sum(ops.values()), loop_sass_ops=ops,
        loop_sass_skippable=skippable)
