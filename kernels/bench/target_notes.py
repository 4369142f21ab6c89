"""What limits each benchmark target when a run misses it, in one sentence per target.

The sentences summarise what the H200 measurements found limits each kernel (the state notes
``docs/kernels/DECODE.md`` and ``docs/kernels/PREFILL.md`` give the figures behind them); they sit
next to :data:`kernels.bench.records.TARGET_SPECS` so that a page or a report naming an unmet
target can say why in the same words. A target the kernels have always met still has a
sentence: it says what the figure depends on, for a run on another GPU that misses it.
"""

from __future__ import annotations

from kernels.bench.records import Target

__all__ = ["TARGET_LIMITS", "limit_of"]

TARGET_LIMITS: dict[str, str] = {
    "decode_large_tbps":
        "Decode streams the KV cache once, so its rate is capped by HBM bandwidth; below the target the "
        "grid does not fill the SMs or the block loads are too short to keep enough bytes in flight.",
    "decode_vs_best_paged_peer":
        "Every paged kernel reads the same pages through the same table, so the ratio says whose "
        "attention comes nearer to that read; below the target a library's split count or tile fits "
        "the shape better (fewer partials to merge at small batches, longer runs per page at large "
        "ones), or the peer was not installed where the run went (its rows say not available).",
    "decode_large_vs_cudnn":
        "cuDNN reads each head's KV as one contiguous run; this kernel gathers 4 KiB pages through the "
        "block table. On the H200 a kernel that only reads the same pages (every K and V word once, no "
        "arithmetic) takes as long as cuDNN's whole attention at batch 32 x 16K, the worst shape: 0.999x "
        "at best over ~125 tile, warp, depth, split and page-width variants (1.01-1.03x at batch 8 x 32K "
        "and 128 x 4K). So the target asks for attention at the memory system's read rate for this "
        "access pattern, and this kernel runs 2-3 % under that read (0.97x). TMA copies, deeper "
        "pipelines, cuDNN's own plan, prefetching pages ahead, cache hints and more splits (their "
        "partials and merge cost more than the extra programs win) did not close it.",
    "decode_large_vs_gather":
        "Gather-then-SDPA writes and re-reads a contiguous copy (3x the bytes); a ratio below the "
        "target means the kernel itself runs far under the bandwidth limit.",
    "decode_b1_32k_vs_cudnn":
        "At batch 1 only 8 KV heads exist, so the context is split 66 ways and merged by a second "
        "kernel, as cuDNN also does (32 splits and a reduction kernel). The split kernel alone runs at "
        "0.99-1.01x of cuDNN's whole call, and the merge adds ~2 us (0.95x). A kernel that only reads the "
        "pages is 1.13-1.16x, but a split kernel's own start (each sequence's length read before its "
        "range is known) and end (its partials) bring even that read to 0.97-1.06x. With the merge, a "
        "split kernel of zero arithmetic cost would tie. Merging in the split kernel, other split "
        "counts, tile, warp and stage configs, TMA copies and cache hints gave 0.77-0.96x. A merge "
        "through a thread-block cluster's shared memory, which Triton 3.6 does not expose, is what "
        "leaves room.",
    "decode_fp8_vs_bf16":
        "On Hopper FP8 runs the register-dequant warp-MMA kernel (e4m3 converted in registers straight "
        "into 16x8 MMA operands, query heads as the MMA's N, query in fp16), split for one wave of 4 "
        "programs per SM; below the target it is held by its instructions per token and by the split "
        "count (two waves cost 9 % at batch 8 x 32K). Elsewhere the Triton kernel runs, whose byte-wise "
        "V loads into the MMA layout keep it near 1.4x.",
    "decode_int4_vs_bf16":
        "On Hopper INT4 runs the register-dequant warp-MMA kernel (codes dequantised in registers into "
        "16x8 MMA operands, each next tile's code and scale words loaded straight into registers, no "
        "shared-memory ring); its 16 one-warp programs per SM reach 2.8-3.2x the bf16 kernel at the "
        "larger shapes, but at batch 8 x 32K the 33-split grid keeps ~14 us that do not shrink with the "
        "context (the programs' start, 2,112 partials and their merge) of ~92, and the ratio sits at "
        "2.78-2.84x from run to run. Fewer instructions did not pay (K's offsets as a per-head bias, "
        "7 % fewer: -1 %; an int8 q.k: +1 %; the loop unrolled by two: spills, or 14 programs per SM), "
        "nor did more registers per warp, nor fewer (caps of 96-120 registers spill and fall to "
        "1.8-2.0x), nor bf16 partials. Elsewhere the Triton kernel (0.84x) runs, which unpacks every "
        "value in registers and moves it between layouts.",
    "decode_eager_overhead_us":
        "What an eager call costs above a CUDA-graph replay is the host's Python and launch path; "
        "eager calls merge inside the split kernel (one launch) and launch the compiled kernel "
        "directly after their first call, so what remains is the wrapper's checks and planning, "
        "which vary several-fold with the host's load (the run times it twice, at its start and end, "
        "and keeps the least).",
    "prefill_vs_flash_causal":
        "The tiled forward is compute-bound; below the target its tile shape or pipeline depth does not "
        "keep the tensor cores busy at this N.",
    "prefill_vs_flash_noncausal":
        "The tiled forward is compute-bound; below the target its tile shape or pipeline depth does not "
        "keep the tensor cores busy at this N.",
    "prefill_vs_cudnn_causal":
        "On Hopper the forward is the Gluon kernel (two consumer warpgroups in their own partitions, a "
        "TMA producer warp, each warpgroup's softmax overlapped with its P.V); below the target the "
        "machine is not Hopper (the triton.language kernel, 0.74-0.80x of cuDNN on the H200) or the "
        "causal tail of short query blocks leaves SMs idle.",
    "prefill_vs_cudnn_noncausal":
        "On Hopper the forward is the Gluon kernel (two consumer warpgroups in their own partitions, a "
        "TMA producer warp, each warpgroup's softmax overlapped with its P.V); below the target the "
        "machine is not Hopper (the triton.language kernel, 0.74-0.80x of cuDNN on the H200) or the "
        "grid's last partial wave dominates at this N.",
    "mixed_vs_split_launches":
        "One launch saves the second launch and the idle tail of the first; below the target the "
        "chunk programs and the decode programs are not balanced across the SMs.",
    "mixed_vs_gather_sdpa":
        "Gather-then-SDPA copies the paged prefixes into padded tensors; a ratio below the target "
        "means the batch has little cached prefix to copy.",
    "chunked_prefill_vs_dense":
        "The paged varlen kernel looks up a block per key tile that the dense forward does not; below "
        "the target the lookups or the ragged last tiles cost more than the dense forward's tuning gains.",
}


def limit_of(target: Target) -> str | None:
    """The sentence on what limits ``target`` when it is not met (None when it is met)."""
    return None if target.met else TARGET_LIMITS.get(target.name)

