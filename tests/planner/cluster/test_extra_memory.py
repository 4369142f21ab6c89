"""Memory beyond the KV cache (LoRA slots, encoder cache, CPU offload tiers), each against a hand
count written out here or a figure published in an issue."""

from __future__ import annotations

import pytest

from inputs.errors import InputError
from planner.cluster.extra_memory import (
    PinnedAllocator, dense_lora_targets, encoder_cache_bytes, encoder_cache_tokens, lmcache_cpu_tier, lora_memory,
    lora_slot_bytes, pow2_ceil, vllm_cpu_tier,
)
from units import GiB, MiB, TiB

# Llama-3.1-8B (data/models/llama-3.1-8b.json): hidden 4096, 32 q / 8 KV heads of 128, MLP 14336, 32 layers.
LLAMA_8B = dense_lora_targets(hidden_size=4096, q_heads=32, kv_heads=8, head_dim=128, intermediate_size=14336)
# Qwen1.5-7B: hidden 4096, 32 heads (MHA) of 128, MLP 11008, 32 layers.
QWEN15_7B = dense_lora_targets(hidden_size=4096, q_heads=32, kv_heads=32, head_dim=128, intermediate_size=11008)


# ---- LoRA ------------------------------------------------------------------------------------
def test_adapter_size_matches_the_published_rank_8_figure():
    # triton-inference-server/tensorrtllm_backend issue #559, Qwen1.5-7B at rank 8:
    # "(4x4096x2x8+3x(4096+11008)x8)x32x2 byte = 38.125MB", logged as "39976960 bytes".
    published = (4 * 4096 * 2 * 8 + 3 * (4096 + 11008) * 8) * 32 * 2
    assert published == 39_976_960 == int(38.125 * MiB)
    assert lora_slot_bytes(QWEN15_7B, layers=32, rank=8) == published


def test_gpu_slots_are_preallocated_at_max_rank_for_max_loras():
    # One layer at rank 16, TP 1, values (A = rank × in per slice, B = out × rank per slice):
    per_layer = (3 * 16 * 4096 + (4096 + 1024 + 1024) * 16  # qkv_proj: three A's, three B's
                 + 16 * 4096 + 4096 * 16  # o_proj
                 + 2 * 16 * 4096 + 2 * 14336 * 16  # gate_up_proj
                 + 16 * 14336 + 4096 * 16)  # down_proj
    assert per_layer == 1_310_720
    memory = lora_memory(LLAMA_8B, layers=32, max_loras=4, max_lora_rank=16)
    assert memory.slot_bytes == per_layer * 32 * 2 == 80 * MiB
    assert memory.gpu_bytes == 4 * 80 * MiB == 335_544_320


def test_tp_shards_column_outputs_and_row_inputs():
    # TP 8: qkv keeps its 4096 inputs, outputs 512 + 128 + 128; o_proj and down_proj split their inputs.
    per_layer = (3 * 16 * 4096 + (512 + 128 + 128) * 16
                 + 16 * 512 + 4096 * 16
                 + 2 * 16 * 4096 + 2 * 1792 * 16
                 + 16 * 1792 + 4096 * 16)
    assert lora_slot_bytes(LLAMA_8B, layers=32, rank=16, tp=8) == per_layer * 32 * 2 == 36_175_872
    # TP 16 > 8 KV heads: each rank keeps one whole KV head (replicated), not half of one.
    per_layer_16 = (3 * 16 * 4096 + (256 + 128 + 128) * 16
                    + 16 * 256 + 4096 * 16
                    + 2 * 16 * 4096 + 2 * 896 * 16
                    + 16 * 896 + 4096 * 16)
    assert lora_slot_bytes(LLAMA_8B, layers=32, rank=16, tp=16) == per_layer_16 * 32 * 2 == 32_899_072


def test_cpu_loras_wait_in_host_memory_at_their_own_rank():
    memory = lora_memory(LLAMA_8B, layers=32, max_loras=4, max_lora_rank=16, tp=8, max_cpu_loras=16, adapter_rank=8)
    assert memory.adapter_bytes == 1_310_720 // 2 * 32 * 2 == 41_943_040  # rank 8 is half of rank 16, unsliced
    assert memory.host_bytes == 16 * 41_943_040
    assert lora_memory(LLAMA_8B, layers=32, max_loras=4, max_lora_rank=16).host_bytes == 4 * 80 * MiB


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(max_loras=4, max_lora_rank=16, max_cpu_loras=2), "max_cpu_loras"),
    (dict(max_loras=0, max_lora_rank=16), "max_loras"),
    (dict(max_loras=1, max_lora_rank=0), "max_lora_rank"),
    (dict(max_loras=1, max_lora_rank=16, adapter_rank=32), "adapter_rank"),
    (dict(max_loras=1, max_lora_rank=16, tp=3), "tp"),  # 14336 MLP features do not split by 3
    (dict(max_loras=1, max_lora_rank=16, dtype_bytes=3), "lora_dtype"),
])
def test_lora_inputs_are_validated(kwargs, field):
    with pytest.raises(InputError) as info:
        lora_memory(LLAMA_8B, layers=32, **kwargs)
    assert info.value.field == field


# ---- encoder cache ---------------------------------------------------------------------------
def test_encoder_cache_budget_and_bytes():
    # Default: the batched-token budget, raised to hold the largest multimodal item.
    assert encoder_cache_tokens(max_num_batched_tokens=8192, max_tokens_per_mm_item=16384) == 16384
    assert encoder_cache_tokens(max_num_batched_tokens=8192, max_tokens_per_mm_item=1024) == 8192
    assert encoder_cache_tokens(max_num_batched_tokens=8192, max_tokens_per_mm_item=1024,
                                max_num_batched_encoder_embeds=4096) == 4096
    assert encoder_cache_tokens(max_num_batched_tokens=8192, max_tokens_per_mm_item=1024,
                                encoder_cache_size=32768) == 32768
    # 16,384 embeddings of hidden 3584 (Qwen2.5-VL-7B) in bf16 on every GPU.
    assert encoder_cache_bytes(16384, hidden_size=3584) == 16384 * 3584 * 2 == 112 * MiB
    with pytest.raises(InputError) as info:
        encoder_cache_tokens(max_num_batched_tokens=0, max_tokens_per_mm_item=1)
    assert info.value.field == "max_num_batched_tokens"


# ---- CPU offload tiers -----------------------------------------------------------------------
def test_lmcache_allocates_per_tp_rank():
    # LMCache pull request #5127: "Setting it to 512 on a TP=8 deployment asks the host for 4 TB".
    tier = lmcache_cpu_tier(512, tp=8)
    assert tier.host_bytes == 8 * 512 * 2**30 == 4 * TiB == 4_398_046_511_104
    # LMCache issue #2901: TP 2 with LMCACHE_MAX_LOCAL_CPU_SIZE=50 -> "100GB of CPU memory"; TP 8 -> 400.
    assert lmcache_cpu_tier(50, tp=2).host_bytes == 100 * GiB
    assert lmcache_cpu_tier(50, tp=8).host_bytes == 400 * GiB
    # MLA with save_only_first_rank: one allocator whatever the TP.
    assert lmcache_cpu_tier(50, tp=8, first_rank_only=True).host_bytes == 50 * GiB
    assert lmcache_cpu_tier(2.5, tp=1).host_bytes == 5 * GiB // 2


def test_pinned_buffers_through_pytorch_round_up_to_a_power_of_two():
    assert pow2_ceil(0) == 0 and pow2_ceil(1) == 1 and pow2_ceil(3) == 4
    assert pow2_ceil(2**40) == 2**40 and pow2_ceil(2**40 + 1) == 2**41
    torch_tier = lmcache_cpu_tier(50, tp=8, allocator=PinnedAllocator.TORCH)
    assert torch_tier.requested_per_rank == 50 * GiB and torch_tier.allocated_per_rank == 64 * GiB
    assert torch_tier.host_bytes == 8 * 64 * GiB
    assert lmcache_cpu_tier(512, tp=8, allocator="torch").host_bytes == 4 * TiB  # already a power of two
    assert lmcache_cpu_tier(50, tp=8, allocator="direct").allocated_per_rank == 50 * GiB


def test_vllm_native_offloading_size_is_shared_by_the_ranks():
    # vLLM's config test: kv_offloading_size 8 GiB at TP 2 × PP 2 -> "8.0 GiB / (2 * 2) = 2.0 GiB" per rank.
    tier = vllm_cpu_tier(8.0, tp=2, pp=2)
    assert tier.requested_per_rank == 2 * GiB and tier.allocating_ranks == 4 and tier.host_bytes == 8 * GiB


@pytest.mark.parametrize("size", [0, -1, float("nan"), float("inf"), True, "512", 10**9])
def test_offload_sizes_are_validated(size):
    with pytest.raises(InputError) as info:
        lmcache_cpu_tier(size, tp=8)
    assert info.value.field == "max_local_cpu_size"


def test_offload_allocator_and_tp_are_validated():
    with pytest.raises(InputError) as info:
        lmcache_cpu_tier(50, tp=8, allocator="mmap")
    assert info.value.field == "pinned_allocator"
    with pytest.raises(InputError) as info:
        vllm_cpu_tier(8, tp=0)
    assert info.value.field == "tp"
