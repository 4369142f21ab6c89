"""The real vLLM start-up logs of ``tests/data/vllm_logs`` and the settings each was started with.

One :class:`LogCase` per log file: the model (a catalogue id, or a shape built here from the
model's published config), the GPU (a catalogue id, or None where the catalogue has no entry),
the vLLM version where the log or its thread states it, and the engine settings. Settings the
thread does not state but vLLM fills in by default are taken from vLLM's defaults of that
version and say so in ``assumed``.

``in_table`` marks the cases whose GPU and settings are known well enough to predict the
"Available KV cache memory" from ``gpu_memory_utilization``; ``why_not`` says why the others are
left out. :mod:`scripts.engine_log_table` prints the comparison; the engine tests use the same
cases. Sources (the URL each log was copied from) are in ``tests/data/vllm_logs/README.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sizing.engine.memory import ActivationShape
from sizing.models import ModelShape

ROOT = Path(__file__).resolve().parents[1]
LOG_DIR = ROOT / "tests" / "data" / "vllm_logs"

# meta-llama/Llama-3.2-11B-Vision config.json, the keys the engine reads (the catalogue has no
# entry for it). text_config: 40 decoder layers (8 of them cross-attention, which vLLM's V0 cache
# engine also gives a KV cache), 32 query / 8 KV heads of 128 (hidden / heads), hidden 4096,
# MLP 14336, vocabulary 128256. vision_config (the tower Llama 3.2 Vision 11B and 90B share):
# 32 local + 8 global layers of 1280 (16 heads, MLP 5120), 560-pixel tiles of 14-pixel patches,
# at most 4 tiles, the inputs of layers 3, 7, 15, 23 and 30 concatenated to the output
# (vision_output_dim 1280 × 6 = 7680). 10.67 B parameters with the vision tower.
LLAMA32_11B_VISION_CONFIG = {
    "architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama",
    "text_config": {"model_type": "mllama_text_model", "hidden_size": 4096, "intermediate_size": 14_336,
                    "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38], "vocab_size": 128_256,
                    "max_position_embeddings": 131_072},
    "vision_config": {"model_type": "mllama_vision_model", "hidden_size": 1280, "intermediate_size": 5120,
                      "attention_heads": 16, "num_hidden_layers": 32, "num_global_layers": 8,
                      "intermediate_layers_indices": [3, 7, 15, 23, 30], "image_size": 560, "patch_size": 14,
                      "max_num_tiles": 4, "num_channels": 3, "vision_output_dim": 7680},
}
_TEXT = LLAMA32_11B_VISION_CONFIG["text_config"]
LLAMA32_11B_VISION = ModelShape(name="Llama-3.2-11B-Vision", layers=_TEXT["num_hidden_layers"],
                                q_heads=_TEXT["num_attention_heads"], kv_heads=_TEXT["num_key_value_heads"],
                                head_dim=_TEXT["hidden_size"] // _TEXT["num_attention_heads"],
                                params=10_670_000_000, max_context=_TEXT["max_position_embeddings"])
LLAMA32_11B_VISION_WIDTHS = ActivationShape.from_config(LLAMA32_11B_VISION_CONFIG)

@dataclass(frozen=True, kw_only=True)
class LogCase:
    """One log file and what it was started with (per-GPU settings, vLLM's names)."""

    file: str  # relative to tests/data/vllm_logs
    model: str  # what the log served, as its thread names it
    preset: str | None = None  # catalogue id whose shape and config widths apply
    shape: ModelShape | None = None  # else the shape built from the published config
    widths: ActivationShape | None = None
    gpu: str | None = None  # catalogue GPU id; None: not in the catalogue
    gpu_label: str = ""
    version: str | None = None
    tp: int = 1
    pp: int = 1
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"  # the checkpoint's format (sizing.precisions name)
    mxfp4_backend: str = "auto"  # the MoE kernel holding MXFP4 experts (sizing.engine.mxfp4)
    max_model_len: int = 8192
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    cuda_graph_profiled: bool = False  # vLLM ≥ 0.21 subtracts its CUDA-graph estimate before the KV cache
    assumed: str = ""  # settings taken from vLLM's defaults, not from the thread
    in_table: bool = False
    why_not: str = ""

    @property
    def path(self) -> Path:
        return LOG_DIR / self.file


CASES: tuple[LogCase, ...] = (
    # ---- the logs the engine tests already reproduce -------------------------------------------
    LogCase(file="llama3-8b-tp1-vllm10511.log", model="meta-llama/Meta-Llama-3-8B", preset="llama-3.1-8b",
            gpu="h100-sxm", gpu_label="H100 80GB", version="0.6.x (V0, Dec 2024)", max_model_len=8192,
            max_num_batched_tokens=8192, max_num_seqs=256, gpu_memory_utilization=0.9,
            assumed="V0 defaults: max_num_batched_tokens = max_model_len (no chunked prefill), 256 sequences",
            in_table=True),
    LogCase(file="llama3-8b-tp2-vllm10511.log", model="meta-llama/Meta-Llama-3-8B", preset="llama-3.1-8b",
            gpu="h100-sxm", gpu_label="2 × H100 80GB", version="0.6.x (V0, Dec 2024)", tp=2, max_model_len=8192,
            why_not="the excerpt ends before its available-memory line"),
    LogCase(file="llama3.1-8b-rtx3090-vllm10517.log", model="meta-llama/Llama-3.1-8B-Instruct", preset="llama-3.1-8b",
            gpu=None, gpu_label="RTX 3090", version="0.6.x (V0)", max_model_len=20_000,
            max_num_batched_tokens=20_000, max_num_seqs=256, gpu_memory_utilization=0.9,
            assumed="V0 defaults: max_num_batched_tokens = max_model_len, 256 sequences", in_table=True),
    LogCase(file="deepseek-v2-lite-tp2-pp2-vllm20665.log", model="deepseek-ai/DeepSeek-V2-Lite",
            preset="deepseek-v2-lite", gpu="l4", gpu_label="4 × L4", version="0.1.dev7548 (V1, Jul 2025)", tp=2, pp=2,
            max_model_len=1024, max_num_batched_tokens=2048, max_num_seqs=256, enforce_eager=True,
            assumed="V1 API-server defaults below 70 GiB: max_num_batched_tokens 2048, 256 sequences; "
                    "utilisation 0.9", in_table=True),
    LogCase(file="gemma3-1b-v0.13-rtx.log", model="google/gemma-3-1b-it", preset="gemma-3-1b", version="0.13.0",
            max_model_len=2048, gpu_memory_utilization=0.95, why_not="the GPU is not named"),
    LogCase(file="gemma3-1b-gke-mig.log", model="google/gemma-3-1b-it", preset="gemma-3-1b",
            gpu_label="A100 MIG 1g.5gb", max_model_len=32_768, max_num_batched_tokens=2048,
            gpu_memory_utilization=0.86, why_not="a MIG slice (no catalogue entry, no total in the log)"),
    LogCase(file="qwen3-14b-lmcache.log", model="Qwen/Qwen3-14B", preset="qwen3-14b", max_model_len=32_768,
            why_not="the GPU is not named"),
    LogCase(file="fp8-kv-vllm25350.log", model="a 48 × 4 × 128 model (Qwen3-30B-A3B's shape)", kv_dtype="fp8",
            max_model_len=100_000, why_not="neither the model nor the GPU is named"),
    LogCase(file="fp8-kv-vllm25350-too-long.log", model="a 48 × 4 × 128 model (Qwen3-30B-A3B's shape)",
            kv_dtype="fp8", max_model_len=221_000, why_not="neither the model nor the GPU is named"),
    LogCase(file="llama3.1-70b-w8a8-vllm12569.log", model="neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8",
            preset="llama-3.1-70b", max_model_len=2048, gpu_memory_utilization=0.98,
            why_not="no available-memory line, and the GPU is not named"),
    LogCase(file="gpt-oss-120b-v0.11.2-blog.log", model="openai/gpt-oss-120b", preset="gpt-oss-120b",
            gpu_label="one Kaggle GPU", version="0.11.2", max_model_len=98_304, max_num_batched_tokens=2048,
            max_num_seqs=6, gpu_memory_utilization=0.96, why_not="the GPU model is not named"),
    # ---- the cited logs (tests/data/vllm_logs/cited) ------------------------------------------------
    LogCase(file="cited/qwen3-1.7b-24gb-vllm33263.log", model="Qwen/Qwen3-1.7B", preset="qwen3-1.7b",
            gpu_label="a 24 GB GPU", max_model_len=1024, max_num_seqs=1,
            why_not="the GPU is only described as '24 GB'"),
    LogCase(file="cited/gpt-oss-120b-h100-vllm27508.log", model="openai/gpt-oss-120b", preset="gpt-oss-120b",
            gpu="h100-sxm", gpu_label="H100 80GB HBM3", version="0.11-series (gpu_worker.py:298)",
            weight_dtype="mxfp4", mxfp4_backend="marlin", max_model_len=131_072, max_num_batched_tokens=1024,
            max_num_seqs=1024, gpu_memory_utilization=0.95,
            assumed="max_model_len = the model's 131,072; max_num_seqs 1024 (the API-server default on ≥ 70 GiB GPUs); "
                    "MXFP4 on Marlin, as the 0.10.x/0.11.x pip installs of the other H100 logs (no triton_kernels)",
            in_table=True),
    LogCase(file="cited/gpt-oss-120b-h100-vllm23278.log", model="openai/gpt-oss-120b", preset="gpt-oss-120b",
            gpu="h100-sxm", gpu_label="H100", version="0.10.1-series (gpu_worker.py:276)", weight_dtype="mxfp4",
            mxfp4_backend="marlin", max_model_len=131_072, why_not="the thread does not give the command (utilisation unknown)"),
    LogCase(file="cited/qwen3-coder-30b-a3b-fp8-pp2-vllm34076.log", model="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
            preset="qwen3-30b-a3b", gpu_label="RTX 5070 Ti 16 GB + RTX 5090 D 32 GB", version="0.15.2rc1.dev93",
            pp=2, weight_dtype="fp8_block", max_model_len=262_144, why_not="two different GPUs, neither in the catalogue"),
    LogCase(file="cited/minimax-m2.7-awq-dgx-spark-tp2-spark396.log", model="MiniMax-M2.7 AWQ (MiniMax-M2 shape)",
            gpu_label="2 × DGX Spark (GB10)", version="0.29.1rc1.dev17", tp=2, weight_dtype="awq_int4",
            max_model_len=196_608, gpu_memory_utilization=0.8, cuda_graph_profiled=True,
            why_not="DGX Spark (unified memory) is not in the catalogue"),
    LogCase(file="cited/qwen3.6-35b-a3b-nvfp4-rtx5090-club3090-612.log", model="Qwen3.6-35B-A3B NVFP4",
            gpu_label="RTX 5090", version="0.24.0", kv_dtype="fp8", weight_dtype="nvfp4", max_model_len=131_072,
            max_num_batched_tokens=8192, max_num_seqs=1, cuda_graph_profiled=True,
            gpu="rtx-5090",
            why_not="the model is a shape typed from its config (no catalogue entry), without its NVFP4 checkpoint's "
                    "layout, so its weights cannot be estimated"),
    LogCase(file="cited/qwen3.6-27b-fp8-tp2-mtp-rtx3090-club3090-594.log", model="Qwen3.6-27B FP8 + MTP drafter",
            gpu_label="2 × RTX 3090", tp=2, kv_dtype="fp8", weight_dtype="fp8", max_model_len=262_144,
            max_num_batched_tokens=8192, max_num_seqs=2, cuda_graph_profiled=True,
            gpu="rtx-3090",
            why_not="the model is a shape typed from its config (no catalogue entry), without its FP8 checkpoint's "
                    "or the MTP drafter's weights, so its weights cannot be estimated"),
    LogCase(file="cited/qwen3.5-27b-h20-vllm40691.log", model="Qwen3.5-27B (dummy weights)", gpu_label="H20",
            version="0.19.0", max_model_len=32_768, max_num_batched_tokens=16_384, max_num_seqs=16,
            gpu="h20", why_not="no available-memory line"),
    LogCase(file="cited/gpt-oss-20b-a100-myoceane.log", model="openai/gpt-oss-20b", preset="gpt-oss-20b",
            gpu="a100-80gb", gpu_label="A100 80GB", version="0.19.0", weight_dtype="mxfp4", max_model_len=131_072,
            max_num_batched_tokens=2048, max_num_seqs=256, gpu_memory_utilization=0.65, cuda_graph_profiled=False,
            assumed="vLLM's A100 API-server defaults: max_num_batched_tokens 2048, 256 sequences "
                    "(A100s are excluded from the large-GPU defaults)", in_table=True),
    LogCase(file="cited/qwen3-235b-a22b-fp8-h100-tp4-vllm21348.log", model="Qwen/Qwen3-235B-A22B-FP8",
            preset="qwen3-235b-a22b", gpu="h100-sxm", gpu_label="4 × H100", version="V1, Jul 2025", tp=4,
            weight_dtype="fp8_block", max_model_len=40_960, max_num_batched_tokens=8192, max_num_seqs=1024,
            gpu_memory_utilization=0.9,
            assumed="utilisation 0.9, max_model_len = the model's 40,960, API-server defaults on ≥ 70 GiB GPUs "
                    "(8192 batched tokens, 1024 sequences)", in_table=True),
    LogCase(file="cited/llama-3.2-11b-vision-h100-vllm12126.log", model="meta-llama/Llama-3.2-11B-Vision",
            shape=LLAMA32_11B_VISION, widths=LLAMA32_11B_VISION_WIDTHS, gpu="h100-sxm", gpu_label="H100 80GB",
            version="V0, Jan 2025 (load-format dummy)", max_model_len=65_536, max_num_batched_tokens=65_536,
            max_num_seqs=128, enforce_eager=True,
            assumed="V0: max_num_batched_tokens = max_model_len (no chunked prefill for this model)", in_table=True),
    LogCase(file="cited/r1-distill-qwen-14b-rtx4090-tp2-vllm13061.log", model="deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
            preset="qwen2.5-14b", gpu="rtx-4090", gpu_label="2 × RTX 4090", version="V0 (Feb 2025)", tp=2,
            max_model_len=131_072, gpu_memory_utilization=0.98,
            why_not="the log's KV figure is a token count in an error (no available-memory line)"),
)

BY_FILE = {case.file: case for case in CASES}


def case(file: str) -> LogCase:
    """The case of one log file (``cited/…`` for the cited ones)."""
    return BY_FILE[file]


__all__ = ["BY_FILE", "CASES", "LLAMA32_11B_VISION", "LLAMA32_11B_VISION_CONFIG", "LLAMA32_11B_VISION_WIDTHS", "LOG_DIR",
           "LogCase", "ROOT", "case"]
