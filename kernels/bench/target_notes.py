"""What limits each benchmark target when a run misses it, in one sentence per target.

The sentences summarise what the H200 measurements found limits each kernel (the state notes
``docs/kernels/DECODE.md`` and ``docs/kernels/PREFILL.md`` give the figures behind them); they sit
next to :data:`kernels.bench.records.TARGET_SPECS` so that a page or a report naming an unmet
target can say why in the same words. A target the kernels have always met still has a
sentence: it says what the figure depends on, for a run on another GPU that misses it.

:data:`TARGET_LABELS` names every target of every harness (single-GPU decode, prefill and mixed
batches, the attention families, MLA decode and the multi-GPU run) in plain words, for a reader
who does not know the ids; pages show it beside the id, which stays what the JSON and the docs use.
"""

from __future__ import annotations

from kernels.bench.records import Target

__all__ = ["TARGET_LABELS", "TARGET_LIMITS", "label_of", "limit_of"]

# Target id → what it compares, in plain words. Literal, not built from the spec tuples: the
# multi-GPU records sit above this package (kernels/bench may not import kernels/multi_gpu); a
# test checks that every spec of every harness has its label.
TARGET_LABELS: dict[str, str] = {
    # kernels.bench.records.TARGET_SPECS
    "decode_large_tbps": "Paged decode bandwidth (TB/s of KV read), large shapes",
    "decode_vs_best_paged_peer": "Paged decode vs the fastest library paged kernel (cuDNN, FlashInfer)",
    "decode_large_vs_cudnn": "Paged decode vs cuDNN on contiguous KV, large shapes",
    "decode_large_vs_gather": "Paged decode vs copying the pages out, then SDPA, large shapes",
    "decode_b1_32k_vs_cudnn": "Paged decode vs cuDNN on contiguous KV, batch 1 at 32K context",
    "decode_fp8_vs_bf16": "FP8 KV vs bf16, tokens per second, large shapes",
    "decode_int4_vs_bf16": "INT4 KV vs bf16, tokens per second, large shapes",
    "decode_fp8_b1_vs_bf16": "FP8 KV vs bf16 at batch 1",
    "decode_int4_b1_vs_bf16": "INT4 KV vs bf16 at batch 1",
    "decode_eager_overhead_us": "Extra time of an eager call over a CUDA-graph replay (µs), batch 1",
    "prefill_vs_flash_causal": "Causal prefill vs PyTorch's FlashAttention backend, N ≥ 4K",
    "prefill_vs_flash_noncausal": "Non-causal prefill vs PyTorch's FlashAttention backend, N ≥ 4K",
    "prefill_vs_cudnn_causal": "Causal prefill vs cuDNN, N ≥ 4K",
    "prefill_vs_cudnn_noncausal": "Non-causal prefill vs cuDNN, N ≥ 4K",
    "prefill_short_causal_vs_cudnn": "Short causal prefill (16 × 1K) vs cuDNN",
    "prefill_d256_vs_cudnn": "Head dim 256 prefill vs cuDNN",
    "sliding_decode_vs_full":
        "At batch 1 a decode call has a cost no window removes. In the H200 families run of 2026-12-04 "
        "(B1, 32/8 heads, FP8) full attention on the API's fastest kernel took 11.1 us at 8K and 25.0 us "
        "at 32K: 6.5 us fixed + 0.58 us per 1K tokens, and a 128-token window, one tile, took 5.4 us. "
        "With that fixed part even a window kernel at full attention's own per-token rate gives "
        "(6.5 + 0.58 L) / (6.5 + 0.58 L / 8) under 3.0 for every L below ~36K tokens, so at W / L = 1/8 the "
        "target holds only from ~36K (measured: 1.49-2.5 at 8K, 2.42-2.44 at 32K with W = 4,096 in FP8, "
        "3.15-123x at every other shape).",
    "mla_decode_vs_ceiling":
        "At 128 heads, 16-bit latent, Hopper runs the two-warpgroup Gluon kernel (64 heads a program, "
        "one warpgroup's S = Q K^T and softmax, P.V split between both, 64-token TMA pages in two slots "
        "beside Q's 72 KiB). In the H200 run of 2026-12-04 it reached 506-519 TFLOP/s at B >= 64, 0.65-0.67 "
        "of that run's 774 TFLOP/s dense matmul (0.71-0.73 of the 708 the same GPU measured that morning). "
        "With its softmax removed it took the same time (152.1 against 151.8 us at B64 L4K), so the limit "
        "is its chain of 17 wgmmas a tile and the two-slot copy pipeline: 32- and 16-token tiles in four "
        "and eight slots ran 17-25 % and 44-50 % slower, and a third 64-token slot does not fit in shared "
        "memory. Elsewhere the Triton kernel runs, at 0.25-0.32.",
    "mixed_vs_split_launches": "Mixed prefill + decode batch in one launch vs two launches",
    "mixed_vs_gather_sdpa": "Mixed batch vs copying the pages out, then padded SDPA",
    "chunked_prefill_vs_dense": "Chunked prefill on pages vs the dense tiled prefill, same batch",
    # kernels.bench.family_records.FAMILY_TARGET_SPECS (at most: a cost, lower is better)
    "sliding_decode_vs_window_full": "Sliding-window decode vs full attention over just the window (cost)",
    "sliding_decode_vs_full": "Sliding-window decode vs full attention over the whole context (speed-up)",
    "sinks_overhead": "Extra cost of attention sinks",
    # kernels.bench.mla_records.MLA_TARGET_SPECS
    "mla_decode_vs_ceiling": "Share of the ceilings' bound, 128 heads, bf16 latent, B ≥ 64, L ≥ 4K (worst shape)",
    "mla_decode_vs_triton_peer": "Speed vs SGLang's Triton MLA decode, best of 8 and 16 splits, bf16 (worst shape)",
    # kernels.multi_gpu.records.TARGET_SPECS (at most for the all-reduce: a cost)
    "allreduce_in_step_vs_busbw": "All-reduce inside a TP decode step vs the same all-reduce alone (cost)",
    "transfer_vs_peer_copy_8k": "KV transfer between GPUs (NCCL) vs a plain peer copy, prompts ≥ 8K",
}

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
    "decode_fp8_b1_vs_bf16":
        "At batch 1 a call pays a cost that does not shrink with the context: fitting the H200 run of "
        "2026-12-04 at 32K and 128K (64/8 heads), bf16 is 9.3 us + 1.014 us per 1K tokens and FP8 "
        "8.8 us + 0.535 us per 1K (1.90x the bf16 rate per token, near the 2.0x byte limit). At 32K "
        "the fixed part is a fifth of the bf16 call, so even FP8 at exactly half the bf16 per-token "
        "time would be 1.67x, under 1.75; at its own per-token rate its fixed part (the split kernel's "
        "start, its partials and the merge) would have to fall from 8.8 to 6.8 us.",
    "decode_int4_b1_vs_bf16":
        "At batch 1 the INT4 kernel is limited by its work per token, not by its bytes: fitting the H200 "
        "run of 2026-12-04 at 32K and 128K (64/8 heads), INT4 is 6.4 us + 0.462 us per 1K tokens "
        "against bf16's 9.3 us + 1.014 us, 2.19x the bf16 rate per token where the bytes allow ~3.8x "
        "(its 8 KV heads' codes and scales read at 2.4 TB/s). With only 8 heads the grid is split 66 ways and each "
        "program dequantises every value in registers; 2.4x at 32K needs 0.34 us per 1K tokens.",
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
    "prefill_short_causal_vs_cudnn":
        "At N = 1K a causal query block runs 1-8 key tiles (4.5 on average) behind the same prologue "
        "and epilogue as a full one. In the H200 run of 2026-12-04 (B16 x N1K, 32/32 heads) the Gluon "
        "forward's causal call takes 0.765 of its non-causal one where cuDNN's takes 0.670 (the FLOPs "
        "ratio is 0.5625), and the non-causal shape itself reaches 0.91x cuDNN: the per-block fixed "
        "cost and the ragged causal tail, not the matmul rate, hold it at 0.80x. A persistent grid "
        "that orders blocks longest first, as FlashAttention-3 does, is what the kernel lacks.",
    "prefill_d256_vs_cudnn":
        "Head dim 256 runs the triton.language forward: the Gluon kernel's two consumer warpgroups "
        "take head dims 64 and 128 only (a 128 x 256 fp32 accumulator per warpgroup does not fit its "
        "registers). In the H200 run of 2026-12-04 that kernel reaches 0.83x cuDNN causal and 0.87x "
        "non-causal at B4 x N4K, where the same triton.language kernel at d = 128 is 0.78x and 0.80x: "
        "the overlap of Q.K^T, softmax and P.V that only the warp-specialised kernel gives is missing.",
    "mixed_vs_split_launches":
        "One launch saves the second launch and the idle tail of the first; below the target the "
        "chunk programs and the decode programs are not balanced across the SMs.",
    "mixed_vs_gather_sdpa":
        "Gather-then-SDPA copies the paged prefixes into padded tensors; a ratio below the target "
        "means the batch has little cached prefix to copy.",
    "chunked_prefill_vs_dense":
        "The paged varlen kernel looks up a block per key tile that the dense forward does not, and it "
        "is a triton.language kernel, while the dense forward on Hopper is the warp-specialised Gluon "
        "one. In the H200 run of 2026-12-04 (4 x 2048 first chunks) it takes 0.437 ms against the Gluon "
        "forward's 0.374 (0.857x) but 0.408 for the triton.language dense kernel (0.933x): most of the "
        "gap is the Gluon schedule, which the paged kernel would need to close to 0.95.",
}


def label_of(name: str) -> str:
    """``name`` in plain words; an id not in :data:`TARGET_LABELS` (a newer harness's) is returned as it is."""
    return TARGET_LABELS.get(name, name)


def limit_of(target: Target) -> str | None:
    """The sentence on what limits ``target`` when it is not met (None when it is met)."""
    return None if target.met else TARGET_LIMITS.get(target.name)

