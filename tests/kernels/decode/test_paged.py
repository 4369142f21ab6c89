"""Paged decode attention against the float32 paged reference.

CPU (CI): the kernel runs under TRITON_INTERPRET=1 (set by tests/conftest.py and by
kernels.runtime) on tiny shapes: tail lengths 1/17/97, partial last blocks, shuffled tables,
GQA ratios 1/4/8, block sizes 1 to 256, NaN in every unused slot, split-KV, FP8, fp16.
GPU (marked ``gpu``): the same checks at real sizes; skipped only when torch.cuda is unavailable.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.decode.launch import MIN_MERGE_COUNTERS, SplitPlan, merge_counters
from kernels.decode.config import MAX_SPLITS, single_wave_splits
from kernels.cache.int4 import dequantize_int4, quantize_int4
from kernels.cache.paged import build_paged_cache, paged_from_contiguous, quantize_fp8
from kernels.decode.merge import INLINE_MERGE_MAX_SPLITS, choose_merge_plan, merges_inline, pdl_merge
from kernels.decode.api import paged_decode_attention
from kernels.decode.paged import DecodeConfig, default_num_splits
from kernels.decode.rdq_config import RdqConfig
from kernels.reference.paged import paged_attention_reference
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"

# Max abs error against the float32 reference, per dtype: the project's tolerance table
# (kernels.tolerances, where the reason for each entry is).
TOLERANCE = {dtype: tolerance("paged_decode", dtype).atol for dtype in ("bf16", "fp16", "fp8")}
if not ON_GPU:  # the interpreter never quantises the query (its dots run in fp32): the tighter bound
    TOLERANCE["fp8"] = tolerance("paged_decode", "fp8 fp16 dots").atol
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _case(lens, *, block_size=16, hq=4, hkv=2, d=64, dtype="bf16", seed=0, shuffle=True, spare=3):
    g = _gen(seed)
    cache = build_paged_cache(lens, block_size=block_size, n_kv_heads=hkv, head_dim=d, dtype=DTYPES[dtype],
                              device=DEVICE, shuffle=shuffle, generator=g, spare_blocks=spare,
                              poison_unused=True)
    q = torch.randn(len(lens), hq, d, generator=g, device=DEVICE).to(DTYPES[dtype])
    return q, cache


def _run(q, c, **kw):
    return paged_decode_attention(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                  k_scale=c.k_scale, v_scale=c.v_scale, **kw)


def _ref(q, c, **kw):
    return paged_attention_reference(q, c.k_cache, c.v_cache, c.block_tables, c.seq_lens,
                                     k_scale=c.k_scale, v_scale=c.v_scale, **kw)


def _assert_close(out, ref, tol):
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "NaN/inf reached the output"
    err = (out.float() - ref).abs().max().item()
    assert err <= tol, f"max abs error {err:.3e} > {tol:.1e}"


# --------------------------------------------------------------------------------------------
# Interpreter (CPU) or GPU: small shapes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lens", [[1], [17], [97], [1, 17, 97]])
@pytest.mark.parametrize("hq,hkv", [(2, 2), (8, 2), (8, 1)])  # GQA ratios 1, 4, 8
def test_lengths_and_gqa_ratios(lens, hq, hkv):
    q, c = _case(lens, hq=hq, hkv=hkv)
    _assert_close(_run(q, c), _ref(q, c), TOLERANCE["bf16"])


@pytest.mark.parametrize("splits", [1, 2, 3, 16])  # 16 > tiles: empty splits must weigh nothing
def test_split_kv_matches_reference(splits):
    q, c = _case([97, 40, 1], hq=8, hkv=2)
    _assert_close(_run(q, c, num_splits=splits, config=DecodeConfig(block_n=16)), _ref(q, c),
                  TOLERANCE["bf16"])


def test_block_size_invariance():
    """The same logical K/V paged with block sizes 1 to 256 gives the same output."""
    g = _gen(3)
    lens = [97, 33]
    k = torch.randn(2, 2, 97, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    v = torch.randn(2, 2, 97, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    q = torch.randn(2, 8, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    outs = []
    for bs in (1, 8, 16, 32, 64, 128, 256):
        c = paged_from_contiguous(k, v, lens, block_size=bs, shuffle=True, generator=_gen(bs),
                                  spare_blocks=2, poison_unused=True)
        outs.append(_run(q, c, num_splits=2, config=DecodeConfig(block_n=32)).float())
    ref = _ref(q, c)
    for out in outs:
        _assert_close(out, ref, TOLERANCE["bf16"])
        # Same tiles in the same order whatever the page size: identical up to the fp32 rounding.
        assert (out - outs[0]).abs().max().item() <= 1e-6


def test_shuffled_and_in_order_tables_agree():
    g = _gen(5)
    k = torch.randn(1, 2, 50, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    v = torch.randn(1, 2, 50, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    q = torch.randn(1, 4, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    a = paged_from_contiguous(k, v, [50], block_size=16, shuffle=False)
    b = paged_from_contiguous(k, v, [50], block_size=16, shuffle=True, generator=_gen(9), spare_blocks=4)
    assert not torch.equal(a.block_tables[0, :4].cpu(), b.block_tables[0, :4].cpu())
    assert torch.allclose(_run(q, a).float(), _run(q, b).float(), atol=1e-6)


def test_nan_in_unused_slots_does_not_reach_output():
    q, c = _case([17, 3], block_size=16, hq=4, hkv=2, spare=2)
    assert torch.isnan(c.k_cache.float()).any() and torch.isnan(c.v_cache.float()).any()
    out = _run(q, c, num_splits=3, config=DecodeConfig(block_n=16))
    assert torch.isfinite(out).all()
    _assert_close(out, _ref(q, c), TOLERANCE["bf16"])


@pytest.mark.parametrize("d", [128, 256])
def test_head_dims(d):
    q, c = _case([40, 7], hq=4, hkv=1, d=d, block_size=32)
    _assert_close(_run(q, c), _ref(q, c), TOLERANCE["bf16"])


def test_fp16():
    q, c = _case([97, 17], hq=8, hkv=2, dtype="fp16")
    _assert_close(_run(q, c), _ref(q, c), TOLERANCE["fp16"])


@pytest.mark.parametrize("per_head", [True, False])
def test_fp8_within_tolerance_of_dequantised_reference(per_head):
    q, c16 = _case([97, 17], hq=8, hkv=2)
    c8 = quantize_fp8(c16, per_head=per_head)
    assert c8.k_cache.dtype == torch.float8_e4m3fn
    assert c8.k_scale.numel() == (2 if per_head else 1)
    out = _run(q, c8, num_splits=2)
    _assert_close(out, _ref(q, c8), TOLERANCE["fp8"])
    # And close to the unquantised answer (e4m3 keeps 4 bits: a looser, informative bound).
    assert (out.float() - _ref(q, c16)).abs().max().item() < 0.25


def test_pdl_merge_only_where_it_can_run():
    """The merge goes out as a programmatic dependent launch only for split calls compiled for a
    GPU of compute capability 9.0+ (griddepcontrol is Hopper's); never in the interpreter."""
    cfg = DecodeConfig()
    assert cfg.pdl
    assert not pdl_merge(cfg, True, torch.device("cpu"))
    assert not pdl_merge(cfg, False, torch.device(DEVICE))
    assert not pdl_merge(DecodeConfig(pdl=False), True, torch.device(DEVICE))
    if ON_GPU:
        hopper = torch.cuda.get_device_capability()[0] >= 9
        assert pdl_merge(cfg, True, torch.device("cuda")) == hopper


def test_auto_merges_inline_for_few_splits_in_a_graph_and_always_when_eager():
    """The default ("auto") merges inline up to INLINE_MERGE_MAX_SPLITS splits inside a CUDA graph
    (faster there on the H200) and in the merge kernel beyond (faster at 66); called eagerly it
    merges inline at any count (one launch fewer for a host-bound call); an unsplit call merges
    nothing."""
    auto = DecodeConfig()
    assert auto.merge == "auto"
    counts = (1, 2, INLINE_MERGE_MAX_SPLITS, INLINE_MERGE_MAX_SPLITS + 1, 66)
    assert [merges_inline(auto, n, in_graph=True) for n in counts] == [False, True, True, False, False]
    assert [merges_inline(auto, n, in_graph=False) for n in counts] == [False, True, True, True, True]
    for in_graph in (True, False):
        assert merges_inline(DecodeConfig(merge="inline"), 66, in_graph=in_graph)
        assert not merges_inline(DecodeConfig(merge="inline"), 1, in_graph=in_graph)
        assert not merges_inline(DecodeConfig(merge="kernel"), 2, in_graph=in_graph)
        assert not merges_inline(RdqConfig(), 2, in_graph=in_graph)  # the rdq kernel: the merge kernel only


def test_each_merge_variant_is_planned_with_its_own_residency():
    """The inline variant can fit fewer programs per SM, hence another split count; "auto" must
    not run the merge-kernel variant with a split count planned for the inline one (batch 8 x
    32K at block 1 once went from 8 splits to 10 that way: 1.2 waves, 4.00 -> 3.19 TB/s)."""
    def planner(kernel_splits: int, inline_splits: int):
        asked = []

        def plan_for(inline: bool) -> SplitPlan:
            asked.append(inline)
            n = inline_splits if inline else kernel_splits
            return SplitPlan(grid=(8, 8, n), num_splits=n)
        return plan_for, asked

    auto = DecodeConfig()
    plan_for, asked = planner(8, 10)  # the block-1 case: inline's plan no longer qualifies
    plan, inline = choose_merge_plan(auto, plan_for, in_graph=True)
    assert (plan.num_splits, inline, asked) == (8, False, [False, True])
    plan_for, asked = planner(8, 6)  # both qualify: the inline variant with its own plan
    assert choose_merge_plan(auto, plan_for, in_graph=True) == (SplitPlan(grid=(8, 8, 6), num_splits=6), True)
    plan_for, asked = planner(66, 66)  # batch 1: never asks for the inline variant
    assert choose_merge_plan(auto, plan_for, in_graph=True) == (SplitPlan(grid=(8, 8, 66), num_splits=66), False)
    assert asked == [False]
    plan_for, asked = planner(66, 66)  # the same call made eagerly: the inline variant's own plan
    assert choose_merge_plan(auto, plan_for, in_graph=False) == (SplitPlan(grid=(8, 8, 66), num_splits=66), True)
    assert asked == [False, True]
    plan_for, asked = planner(66, 1)
    assert choose_merge_plan(DecodeConfig(merge="inline"), plan_for, in_graph=True)[1] is False  # one split: nothing to merge
    assert choose_merge_plan(DecodeConfig(merge="kernel"), planner(2, 2)[0], in_graph=True)[1] is False


def test_auto_merge_equals_the_merge_kernel_on_both_sides_of_its_threshold():
    q, c = _case([97, 1, 17], block_size=16, hq=8, hkv=2, d=64, seed=21)
    for splits in (5, INLINE_MERGE_MAX_SPLITS + 2):
        auto = _run(q, c, num_splits=splits, config=DecodeConfig(block_n=16))
        kernel = _run(q, c, num_splits=splits, config=DecodeConfig(block_n=16, merge="kernel"))
        _assert_same_up_to_rounding(auto, kernel)
    assert _counters_all_zero(q.device)  # the inline calls left every ticket at 0


# Inline merge: the last split program of each (sequence, KV head) merges, found by a ticket.
# Each case: (splits, block size, query heads, KV heads, dtype or "fp8"); lengths 97, 1, 17 make
# tails, a one-token sequence and, at 66 splits, mostly empty splits.
INLINE_CASES = [
    (1, 16, 8, 2, "bf16"),
    (2, 1, 2, 2, "bf16"),
    (2, 256, 8, 1, "fp16"),
    (5, 16, 8, 1, "bf16"),
    (5, 256, 8, 2, "bf16"),
    (5, 16, 8, 2, "fp8"),
    (66, 16, 8, 2, "bf16"),
    (66, 1, 8, 1, "bf16"),
    (66, 256, 2, 2, "fp8"),
]
# One unit in the last place of the output dtype, relative: the two merges differ only by fp32
# reassociation (running max against a global one), which can flip the final rounding.
ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


def _counters_all_zero(device) -> bool:
    return not merge_counters(torch.device(device), 1).any().item()


def _assert_same_up_to_rounding(a: torch.Tensor, b: torch.Tensor) -> None:
    diff = (a.float() - b.float()).abs()
    bound = ULP[a.dtype] * torch.maximum(a.float().abs(), b.float().abs()).clamp_min(2.0**-6)
    assert (diff <= bound).all(), f"merges differ by {diff.max().item():.3e} (more than one output ulp)"
    assert (a == b).float().mean().item() >= 0.99, "more than 1 % of the outputs differ"


@pytest.mark.parametrize("case", INLINE_CASES, ids=lambda c: f"s{c[0]}-bs{c[1]}-H{c[2]}/{c[3]}-{c[4]}")
def test_inline_merge_equals_the_merge_kernel(case):
    splits, bs, hq, hkv, dtype = case
    q, c = _case([97, 1, 17], block_size=bs, hq=hq, hkv=hkv, dtype="bf16" if dtype == "fp8" else dtype, seed=splits)
    if dtype == "fp8":
        c = quantize_fp8(c, per_head=True)
    base = DecodeConfig(block_n=16, merge="kernel")
    kernel = _run(q, c, num_splits=splits, config=base)
    inline = _run(q, c, num_splits=splits, config=DecodeConfig(block_n=16, merge="inline"))
    _assert_same_up_to_rounding(inline, kernel)
    _assert_close(inline, _ref(q, c), TOLERANCE[dtype])
    if splits == 5:  # one partial a step, and steps that end past the last split
        for per_step in (1, 4):
            stepped = _run(q, c, num_splits=splits, config=DecodeConfig(block_n=16, merge="inline",
                                                                        merge_splits=per_step))
            _assert_same_up_to_rounding(stepped, kernel)
    assert _counters_all_zero(q.device), "a ticket counter was left non-zero"


def test_inline_merge_is_driven_by_the_ticket_counters():
    """A counter that does not start at 0 makes a program other than the last one merge: the
    output misses a split and the counter is left at 1 (so the inline path really ran)."""
    q, c = _case([64], hq=8, hkv=2, seed=77)  # 4 splits of one 16-token tile each
    cfg = DecodeConfig(block_n=16, merge="inline")
    counters = merge_counters(q.device, 2)
    counters[0] = 1  # sequence 0, KV head 0: one ticket already taken
    try:
        bad = _run(q, c, num_splits=4, config=cfg)
        assert counters[0].item() == 1 and counters[1].item() == 0
    finally:
        counters.zero_()
    good = _run(q, c, num_splits=4, config=cfg)
    # KV head 0 merged before its last split's partial was written (NaN counts as different).
    assert not torch.allclose(bad[0, :4].float(), good[0, :4].float(), atol=1e-2, rtol=0)
    assert torch.equal(bad[0, 4:], good[0, 4:])  # KV head 1 merged as usual
    _assert_close(good, _ref(q, c), TOLERANCE["bf16"])


def test_merge_counters_are_cached_and_grow():
    dev = torch.device("cpu")
    first = merge_counters(dev, 3)
    assert first.dtype == torch.int32 and first.numel() >= MIN_MERGE_COUNTERS and not first.any()
    assert merge_counters(dev, MIN_MERGE_COUNTERS) is first  # no allocation while it fits
    bigger = merge_counters(dev, first.numel() + 1)
    assert bigger.numel() == 2 * first.numel() and not bigger.any()
    assert merge_counters(dev, 1) is bigger


def test_inline_merge_int4():
    g = _gen(8)
    c = quantize_int4(build_paged_cache([97, 1, 17], block_size=16, n_kv_heads=2, head_dim=64, device=DEVICE,
                                        shuffle=True, generator=g, spare_blocks=3, poison_unused=True))
    q = torch.randn(3, 8, 64, generator=g, device=DEVICE).to(torch.bfloat16)
    runs = {m: paged_decode_attention(q, c.k, c.v, c.block_tables, c.seq_lens, num_splits=5,
                                 config=DecodeConfig(block_n=16, merge=m)) for m in ("kernel", "inline")}
    _assert_same_up_to_rounding(runs["inline"], runs["kernel"])
    ref = paged_attention_reference(q, dequantize_int4(c.k), dequantize_int4(c.v), c.block_tables, c.seq_lens)
    _assert_close(runs["inline"], ref, tolerance("paged_decode", "int4").atol)
    assert _counters_all_zero(q.device)


def test_default_num_splits_fills_the_gpu():
    # Two programs resident per SM (the default assumption): waves of 264 on 132 SMs.
    assert default_num_splits(1, 8, 32768, 64, 132) == 66  # 528 programs = 2 waves of 264
    assert default_num_splits(8, 8, 32768, 64, 132) == 8  # 512 programs, not 9 (576: 2.2 waves)
    assert default_num_splits(32, 8, 32768, 64, 132) == 2
    assert default_num_splits(5, 8, 32768, 64, 132) == 13  # 520 programs; 14 would make 560
    assert default_num_splits(128, 8, 32768, 64, 132) == 1
    assert default_num_splits(1, 8, 64, 64, 132) == 1  # one tile: nothing to split
    # A 1,024-token window (+ one ragged tile) in 128-token tiles: 9 tiles, 2 splits at 4 tiles
    # each; one tile a split gives 9 splits, 72 programs instead of 16 on 132 SMs.
    assert default_num_splits(1, 8, 1024 + 128, 128, 132) == 2
    assert default_num_splits(1, 8, 1024 + 128, 128, 132, min_tiles=1) == 9
    assert default_num_splits(1, 1, 1 << 20, 64, 132) == 128  # capped at MAX_SPLITS
    # One wave of 264; equally full waves tie toward more splits.
    assert default_num_splits(8, 8, 32768, 128, 132, waves=1) == 4  # 256 programs (5 would make 1.2 waves)
    assert default_num_splits(1, 8, 32768, 128, 132, waves=1) == 33  # 264 programs
    assert default_num_splits(32, 8, 32768, 128, 132, waves=1) == 2  # 256 or 512: both 97 % full
    assert default_num_splits(128, 8, 32768, 128, 132, waves=1) == 1



def test_single_wave_splits_are_the_fastest_counts_timed_for_the_rdq_kernels():
    """The most splits within one wave of ``per_sm`` programs on 132 SMs. Each count here is the
    fastest the H200 measured for that shape (64/8 heads, a sweep of split counts): INT4 at its
    16 resident programs per SM, FP8 at 4."""
    def int4(batch, context):
        return single_wave_splits(batch, 8, context, 16, 132, 16)

    def fp8(batch, context):
        return single_wave_splits(batch, 8, context, 32, 132, 4)
    # 16 x 132 = 2112 programs: 2112 // 64 = 33, // 256 = 8, // 1024 = 2; batch 1: capped at 128.
    assert [int4(8, 32768), int4(32, 16384), int4(32, 32768), int4(128, 4096), int4(1, 32768)] == [33, 8, 8, 2, 128]
    # 4 x 132 = 528: // 64 = 8, // 256 = 2, // 1024 = 0 -> 1, // 8 = 66.
    assert [fp8(8, 32768), fp8(32, 16384), fp8(128, 4096), fp8(128, 32768), fp8(1, 32768)] == [8, 2, 1, 1, 66]
    assert single_wave_splits(1, 8, 100, 16, 132, 16) == 1  # 7 tiles: fewer than 4 per split would be needed
    assert single_wave_splits(1, 1, 1 << 20, 16, 132, 64) == MAX_SPLITS

def test_num_splits_follow_the_resident_programs():
    """A wave is ``resident * SMs`` programs: the bf16 kernel holds 4 per SM on the H200, FP8 3."""
    # bf16, one wave of 4 x 132 = 528: the same counts as two waves of two.
    assert [default_num_splits(b, 8, 32768, 64, 132, waves=1, resident=4) for b in (1, 8, 32, 128)] == [66, 8, 2, 1]
    # FP8, three resident: one wave is 396 programs (batch 8: 6 splits = 384), two are 792
    # (batch 32: 3 splits = 768, not 2 = 512, which is 1.29 waves).
    assert default_num_splits(8, 8, 32768, 128, 132, waves=1, resident=3) == 6
    assert default_num_splits(32, 8, 16384, 128, 132, waves=2, resident=3) == 3
    # Batch 1 x 32K: two waves would need 99 splits, over the cap of 4 tiles a split (64, which is
    # 1.29 waves); one wave of 392 programs (49 splits) fills better.
    assert default_num_splits(1, 8, 32768, 128, 132, waves=2, resident=3) == 49
    assert default_num_splits(1, 8, 131072, 128, 132, waves=2, resident=3) == 99  # 792 programs


def test_sm_scale_is_used():
    q, c = _case([30], hq=4, hkv=2)
    _assert_close(_run(q, c, sm_scale=0.3), _ref(q, c, sm_scale=0.3), TOLERANCE["bf16"])


# --------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument and the values, before any launch
# --------------------------------------------------------------------------------------------


def _good():
    q, c = _case([17, 5], hq=4, hkv=2, spare=0, shuffle=False)
    return dict(q=q, k_cache=c.k_cache, v_cache=c.v_cache, block_tables=c.block_tables, seq_lens=c.seq_lens)


def _call(args, **kw):
    return paged_decode_attention(args["q"], args["k_cache"], args["v_cache"], args["block_tables"],
                                  args["seq_lens"], **kw)


BAD = {
    "q dtype": (lambda a: a.update(q=a["q"].float()), "q dtype"),
    "q dims": (lambda a: a.update(q=a["q"][None]), r"q must have 3 dims, got shape \(1, 2, 4, 64\)"),
    "kv dtype mismatch": (lambda a: a.update(k_cache=a["k_cache"].half(), v_cache=a["v_cache"].half()),
                          "k_cache dtype torch.float16 must equal q dtype torch.bfloat16"),
    "k/v shapes": (lambda a: a.update(v_cache=a["v_cache"][:1]), "k_cache and v_cache must have the same shape"),
    "head_dim": (lambda a: a.update(q=a["q"][..., :48].contiguous(), k_cache=a["k_cache"][..., :48].contiguous(),
                                    v_cache=a["v_cache"][..., :48].contiguous()), "head_dim must be one of .* got 48"),
    "heads do not divide": (lambda a: a.update(q=a["q"][:, :3].contiguous()),
                            r"n_q_heads \(3, q dim 1\) must be a multiple of n_kv_heads \(2"),
    "table dtype": (lambda a: a.update(block_tables=a["block_tables"].long()), "block_tables dtype"),
    "table rows": (lambda a: a.update(block_tables=a["block_tables"][:1]), "block_tables has 1 rows for a batch of 2"),
    "lens entries": (lambda a: a.update(seq_lens=a["seq_lens"][:1]), "seq_lens has 1 entries for a batch of 2"),
    "q stride": (lambda a: a.update(q=a["q"].transpose(1, 2).contiguous().transpose(1, 2)),
                 r"q last dim must be contiguous \(stride 1\), got strides"),
    "table outside pool": (lambda a: a["block_tables"].__setitem__((1, 0), 99),
                           r"block_tables entries must index the pool 0..2; \(sequence, block\) \[\(1, 0\)\] hold \[99\]"),
    "negative table entry": (lambda a: a["block_tables"].__setitem__((0, 1), -1),
                             r"\(sequence, block\) \[\(0, 1\)\] hold \[-1\]"),
    "length beyond table": (lambda a: a["seq_lens"].__setitem__(0, 33),
                            r"seq_lens must be in 1..32 .* sequences \[0\] have lengths \[33\]"),
    "zero length": (lambda a: a["seq_lens"].__setitem__(1, 0), r"sequences \[1\] have lengths \[0\]"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_value_error(name):
    args = _good()
    mutate, pattern = BAD[name]
    mutate(args)
    with pytest.raises(ValueError, match=pattern):
        _call(args)


@pytest.mark.parametrize("kw,pattern", [
    (dict(k_scale=0.5), "k_scale applies only to a torch.float8_e4m3fn cache"),
    (dict(sm_scale=-1.0), "sm_scale must be a finite positive number, got -1.0"),
    (dict(sm_scale=math.nan), "sm_scale must be a finite positive number"),
    (dict(num_splits=0), "num_splits must be an int in 1..128, got 0"),
])
def test_bad_keyword_raises_value_error(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        _call(_good(), **kw)


@pytest.mark.parametrize("kw,pattern", [
    (dict(block_n=48), "block_n must be a power of two >= 16, got 48"),
    (dict(num_warps=3), "num_warps must be 1, 2, 4, 8 or 16, got 3"),
    (dict(waves=3), "waves must be 1 or 2, got 3"),
    (dict(maxnreg=300), "maxnreg must be None or in 24..255, got 300"),
    (dict(merge="fused"), "merge must be one of 'auto', 'kernel', 'inline', got 'fused'"),
    (dict(merge_splits=3), "merge_splits must be None or a power of two in 1..128, got 3"),
    (dict(merge_splits=256), "merge_splits must be None or a power of two in 1..128, got 256"),
])
def test_bad_config_is_refused(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        DecodeConfig(**kw)


def test_bad_fp8_scale_shape():
    q, c = _case([17], hq=4, hkv=2)
    c8 = quantize_fp8(c)
    with pytest.raises(ValueError, match=r"k_scale must have 1 \(per tensor\) or n_kv_heads=2"):
        paged_decode_attention(q, c8.k_cache, c8.v_cache, c8.block_tables, c8.seq_lens,
                               k_scale=torch.ones(3, device=DEVICE), v_scale=c8.v_scale)


def test_not_a_tensor():
    args = _good()
    args["q"] = args["q"].tolist()
    with pytest.raises(ValueError, match="q must be a torch.Tensor, got list"):
        _call(args)


# --------------------------------------------------------------------------------------------
# GPU: the same checks at real sizes
# --------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")


def _replayed(call):
    """The output of ``call()`` captured in a CUDA graph, after one replay."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        captured = call()
    graph.replay()
    torch.cuda.synchronize()
    return captured

GPU_CASES = [
    # lens, block, hq, hkv, d, dtype, fp8 (None | "head" | "tensor"), splits
    ([1, 17, 97, 1025, 1027], 16, 32, 8, 128, "bf16", None, None),
    ([4096, 3000, 1], 16, 64, 8, 128, "bf16", None, None),
    ([2049, 777], 32, 8, 8, 64, "fp16", None, 7),
    ([5000], 64, 16, 2, 256, "bf16", None, None),
    ([300, 1000], 1, 8, 1, 128, "bf16", None, 3),
    ([20000], 16, 32, 8, 128, "bf16", None, 40),
    ([4096, 999], 16, 32, 8, 128, "bf16", "head", None),
    ([4096, 999], 16, 32, 8, 128, "bf16", "tensor", 5),
    ([3000], 64, 16, 4, 256, "fp16", "head", None),
]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"L{c[0]}-bs{c[1]}-H{c[2]}/{c[3]}-d{c[4]}-{c[5]}-{c[6]}")
def test_gpu_real_sizes(case):
    lens, bs, hq, hkv, d, dtype, fp8, splits = case
    q, c = _case(lens, block_size=bs, hq=hq, hkv=hkv, d=d, dtype=dtype, seed=11, spare=5)
    if fp8:
        c = quantize_fp8(c, per_head=fp8 == "head")
    out = _run(q, c, num_splits=splits)
    _assert_close(out, _ref(q, c), TOLERANCE["fp8" if fp8 else dtype])


@pytest.mark.gpu
@gpu
def test_gpu_block_size_invariance_and_splits():
    g = _gen(21)
    k = torch.randn(3, 8, 3000, 128, generator=g, device=DEVICE).to(torch.bfloat16)
    v = torch.randn(3, 8, 3000, 128, generator=g, device=DEVICE).to(torch.bfloat16)
    q = torch.randn(3, 32, 128, generator=g, device=DEVICE).to(torch.bfloat16)
    lens = [3000, 1027, 97]
    outs = []
    for bs in (1, 16, 32, 64, 256):
        c = paged_from_contiguous(k, v, lens, block_size=bs, shuffle=True, generator=_gen(bs),
                                  spare_blocks=8, poison_unused=True)
        for splits in (1, 5, 66):
            outs.append(_run(q, c, num_splits=splits).float())
    ref = _ref(q, c)
    for out in outs:
        _assert_close(out, ref, TOLERANCE["bf16"])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("fp8", [False, True])
def test_gpu_pdl_merge_equals_the_stream_ordered_merge(fp8):
    """The merge as a PDL dependent (waiting on the device) gives bit-identical output to the
    merge launched behind the split kernel, eagerly and inside a CUDA graph."""
    q, c = _case([20000, 4096, 999], block_size=16, hq=32, hkv=8, d=128, seed=5, spare=5)
    if fp8:
        c = quantize_fp8(c)
    base = DecodeConfig(block_n=128, num_stages=2, fp8_qk_dot=True, waves=1, merge="kernel") if fp8 \
        else DecodeConfig(merge="kernel")
    ordered = _run(q, c, num_splits=12, config=DecodeConfig(**{**base.__dict__, "pdl": False}))
    eager = _run(q, c, num_splits=12, config=base)
    assert torch.equal(eager, ordered)
    _assert_close(eager, _ref(q, c), TOLERANCE["fp8" if fp8 else "bf16"])
    _run(q, c, num_splits=12, config=base)  # compiled before capture
    assert torch.equal(_replayed(lambda: _run(q, c, num_splits=12, config=base, validate=False)), ordered)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("qk_dot", [True, False])
def test_gpu_fp8_short_sequences_within_each_modes_tolerance(qk_dot):
    """Short FP8 sequences, where the e4m3 query's rounding shows most (few tokens to average it
    out): the default e4m3 q.k dot within its bound, fp16 dots within the bf16-level one."""
    name = "fp8" if qk_dot else "fp8 fp16 dots"
    cfg = DecodeConfig(block_n=128, num_stages=2, fp8_qk_dot=qk_dot, waves=1)
    for seed in range(3):
        q, c = _case([1, 2, 3, 5, 17, 97, 1025], block_size=16, hq=32, hkv=8, d=128, seed=40 + seed, spare=5)
        c = quantize_fp8(c)
        _assert_close(_run(q, c, config=cfg), _ref(q, c), tolerance("paged_decode", name).atol)



@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("fp8", [False, True])
def test_gpu_inline_merge_equals_the_merge_kernel_eagerly_and_in_graph_replays(fp8):
    """Real sizes with the release/acquire ticket on the GPU: the inline merge matches the merge
    kernel up to the output rounding, and replays of a captured call (counters reset by the last
    split program each time) reproduce the eager output."""
    q, c = _case([20000, 4096, 999, 1], block_size=16, hq=32, hkv=8, d=128, seed=6, spare=5)
    if fp8:
        c = quantize_fp8(c)
    base = DecodeConfig(block_n=128, num_stages=2, fp8_qk_dot=True, waves=1, merge="kernel") if fp8 \
        else DecodeConfig(merge="kernel")
    inline_cfg = DecodeConfig(**{**base.__dict__, "merge": "inline"})
    for splits in (5, 66):
        kernel = _run(q, c, num_splits=splits, config=base)
        inline = _run(q, c, num_splits=splits, config=inline_cfg)
        _assert_same_up_to_rounding(inline, kernel)
        assert _counters_all_zero(q.device)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        captured = _run(q, c, num_splits=66, config=inline_cfg, validate=False)
    for _ in range(3):
        captured.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, inline)
    assert _counters_all_zero(q.device)


@pytest.mark.gpu
@gpu
def test_gpu_auto_merge_is_inline_eagerly_and_the_merge_kernel_in_a_graph_at_many_splits():
    """At 66 splits "auto" merges inline when called eagerly (bit-identical to merge="inline")
    and in the merge kernel inside a capture (its replay bit-identical to merge="kernel")."""
    q, c = _case([20000, 4096, 999, 1], block_size=16, hq=32, hkv=8, d=128, seed=8, spare=5)
    auto = DecodeConfig()
    eager = _run(q, c, num_splits=66, config=auto)
    assert torch.equal(eager, _run(q, c, num_splits=66, config=DecodeConfig(merge="inline")))
    kernel = _run(q, c, num_splits=66, config=DecodeConfig(merge="kernel"))
    _assert_same_up_to_rounding(eager, kernel)
    assert torch.equal(_replayed(lambda: _run(q, c, num_splits=66, config=auto, validate=False)), kernel)
    assert _counters_all_zero(q.device)
