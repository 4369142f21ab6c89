"""Disaggregated prefill → decode KV transfer: bytes per layer kind, descriptors and transfer time,
each against a hand count written out here (shapes from the published configs in data/models/)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from hardware.links import get_link
from inputs.errors import InputError
from planner.cluster.transfer import (
    DescriptorRule, decode_staging, kv_transfer, nixl_descriptors, transfer_time, window_blocks,
)
from sizing.catalogue import get_entry
from sizing.models import ModelShape
from sizing.precisions import get_precision

FP8 = get_precision("fp8")
BF16 = get_precision("bf16")
LLAMA_70B = get_entry("llama-3.1-70b").shape
# Llama-3.1-70B: 80 layers × 8 KV heads × head dim 128 × (K, V) × 1 byte (FP8) per token.
LLAMA_FP8_PER_TOKEN = 80 * 8 * 128 * 2 * 1  # 163,840 B = 160 KiB


# ---- full attention --------------------------------------------------------------------------
def test_llama_70b_fp8_8k_prompt_bytes_and_descriptors():
    t = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192)
    assert t.wire_bytes_per_decode_rank == t.payload_bytes_per_decode_rank == 1_342_177_280
    assert LLAMA_FP8_PER_TOKEN * 8192 == 1_342_177_280
    # One descriptor per block per layer per K/V: 8192 / 16 = 512 blocks × 80 layers × 2.
    assert t.descriptors_per_decode_rank == 512 * 80 * 2 == 81_920
    assert t.reads_per_decode_rank == 1


def test_a_partly_filled_last_block_travels_whole():
    t = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8200)  # 512 full blocks and 8 tokens
    assert t.payload_bytes_per_decode_rank == LLAMA_FP8_PER_TOKEN * 8200 == 1_343_488_000
    assert t.wire_bytes_per_decode_rank == LLAMA_FP8_PER_TOKEN * 513 * 16 == 1_344_798_720
    assert t.descriptors_per_decode_rank == 513 * 160


def test_equal_tp_each_rank_ships_its_own_shard():
    t = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192, prefill_tp=8, decode_tp=8)
    assert t.wire_bytes_per_decode_rank == 1_342_177_280 // 8 == 167_772_160  # one KV head per rank
    assert t.bytes_sent_per_prefill_rank == 167_772_160
    assert t.wire_bytes_all_ranks == 1_342_177_280
    assert t.descriptors_per_decode_rank == 81_920  # every rank holds all 80 layers' K and V regions


def test_decode_tp_above_prefill_tp_each_prefill_rank_serves_several():
    t = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192, prefill_tp=2, decode_tp=8)
    assert t.wire_bytes_per_decode_rank == 167_772_160 and t.reads_per_decode_rank == 1
    # A TP-2 prefill rank holds 4 heads and serves 4 decode ranks one head each: its whole shard.
    assert t.bytes_sent_per_prefill_rank == 1_342_177_280 // 2


def test_decode_tp_below_prefill_tp_each_decode_rank_reads_several():
    t = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192, prefill_tp=8, decode_tp=2)
    assert t.wire_bytes_per_decode_rank == 1_342_177_280 // 2 and t.reads_per_decode_rank == 4
    assert t.descriptors_per_decode_rank == 4 * 81_920
    assert t.bytes_sent_per_prefill_rank == 167_772_160


def test_quantised_kv_carries_its_scale_bytes():
    int4 = get_precision("int4", group_size=128, field="kv_dtype")
    t = kv_transfer(LLAMA_70B, int4, prompt_tokens=8192)
    # 1,342,177,280 values × (1/2 + 2/128) bytes = × 33/64.
    assert t.wire_bytes_per_decode_rank == 1_342_177_280 * 33 // 64 == 692_060_160


# ---- sliding windows, MLA, recurrent state ---------------------------------------------------
def test_sliding_layers_ship_only_the_window():
    gemma = get_entry("gemma-3-1b").shape  # 22 sliding (window 512) + 4 full, 1 KV head, d 256
    t = kv_transfer(gemma, BF16, prompt_tokens=1000)
    sliding, full = (next(k for k in t.kinds if k.kind == kind) for kind in ("sliding_window", "full"))
    per_token_layer = 2 * 1 * 256 * 2  # K+V × 1 head × 256 × 2 bytes
    assert sliding.payload_bytes == 22 * 512 * per_token_layer == 11_534_336
    # Tokens 488..999 sit in blocks 30..62: 33 blocks.
    assert sliding.blocks == 33 and sliding.wire_bytes == 22 * 33 * 16 * per_token_layer
    assert full.payload_bytes == 4 * 1000 * per_token_layer == 4_096_000
    assert full.blocks == 63 and full.wire_bytes == 4 * 63 * 16 * per_token_layer
    assert t.descriptors_per_decode_rank == 22 * 2 * 33 + 4 * 2 * 63 == 1956


def test_window_blocks():
    assert window_blocks(1000, 512, 16) == 33  # window starts mid-block: one extra
    assert window_blocks(1024, 512, 16) == 32  # aligned
    assert window_blocks(300, 512, 16) == 19  # prompt shorter than the window: all its blocks
    assert window_blocks(1000, None, 16) == 63


def test_mla_ships_the_latent_whole_to_every_decode_rank():
    dsv3 = get_entry("deepseek-v3").shape  # 61 layers, latent 512 + rope 64
    latent = 61 * (512 + 64) * 4096  # one byte per FP8 value, no factor 2
    for prefill_tp, decode_tp in ((1, 1), (8, 8), (8, 4), (2, 8)):
        t = kv_transfer(dsv3, FP8, prompt_tokens=4096, prefill_tp=prefill_tp, decode_tp=decode_tp)
        assert t.wire_bytes_per_decode_rank == latent == 143_917_056
        assert t.reads_per_decode_rank == 1
        assert t.descriptors_per_decode_rank == 61 * 1 * 256  # one region per layer × 256 blocks
    assert kv_transfer(dsv3, FP8, prompt_tokens=4096, prefill_tp=8, decode_tp=8).wire_bytes_all_ranks == 8 * latent


def test_recurrent_state_is_fixed_per_sequence():
    qwen_next = get_entry("qwen3-next-80b-a3b").shape  # 36 gated-delta-net + 12 full layers
    # Per layer: conv state 3 × (2 × 16 × 128 + 32 × 128) + 32 value heads × 128 × 128, bf16.
    state_layer = (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2
    assert state_layer == 1_097_728
    for prompt in (1000, 100_000):
        t = kv_transfer(qwen_next, BF16, prompt_tokens=prompt)
        state = next(k for k in t.kinds if k.kind == "linear_attention")
        assert state.wire_bytes == state.payload_bytes == 36 * state_layer
        assert state.descriptors == 36 * 4  # conv x, B, C and the SSM state: one block each
    split = kv_transfer(qwen_next, BF16, prompt_tokens=4096, prefill_tp=4, decode_tp=2)
    state = next(k for k in split.kinds if k.kind == "linear_attention")
    assert state.wire_bytes == 36 * state_layer // 2 and state.reads == 2  # read from both prefill ranks
    full = next(k for k in split.kinds if k.kind == "full")
    # 2 KV heads: TP 2 holds one per rank; the TP-4 prefill ranks replicate them, so one read.
    assert full.reads == 1 and full.wire_bytes == 12 * 4096 * (2 * 1 * 256 * 2)


# ---- descriptors as vLLM issue #55434 reports them -----------------------------------------
def test_issue_55434_contiguous_prompts_cost_one_descriptor_per_region():
    # GLM-5.3 (MLA + DSA indexer) registers 101 regions; block size 64. "Quadrupling the prompt
    # from 10.3k to 41.1k tokens ... left the descriptor count at exactly 101".
    for prompt in (10_300, 41_100):
        blocks = -(-prompt // 64)
        assert nixl_descriptors(regions=101, blocks=blocks, rule="per_run") == 101
        assert nixl_descriptors(regions=101, blocks=blocks) == 101 * blocks  # without coalescing


def test_issue_55434_112k_descriptors_need_over_a_thousand_scattered_runs():
    # vllm#55434 states counts, not runs: "~112k" per rank-transfer at 101 regions means at least
    # ceil(112,000 / 101) = 1,109 non-contiguous runs, i.e. >= 1,109 × 64 = 70,976 scattered tokens.
    assert nixl_descriptors(regions=101, blocks=1109, rule="per_run", runs=1109) == 112_009
    assert nixl_descriptors(regions=101, blocks=1109, rule="per_run", runs=1108) < 112_000


def test_block_runs_in_a_model_transfer():
    contiguous = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192, rule="per_run")
    scattered = kv_transfer(LLAMA_70B, FP8, prompt_tokens=8192, rule="per_run", block_runs=512)
    assert contiguous.descriptors_per_decode_rank == 160  # 80 layers × K, V, one run each
    assert scattered.descriptors_per_decode_rank == 81_920  # every block its own run: per-block again
    assert contiguous.wire_bytes_per_decode_rank == scattered.wire_bytes_per_decode_rank


# ---- time and staging ------------------------------------------------------------------------
def test_transfer_time_over_a_link():
    t = transfer_time(167_772_160, get_link("ib-ndr"))
    assert t.seconds == Fraction(167_772_160, 50 * 10**9) and t.ms == pytest.approx(3.3554432)
    assert not t.latency_published  # no vendor latency: the time is a lower bound
    striped = transfer_time(1_342_177_280, get_link("ib-ndr"), nics=8)
    assert striped.seconds == Fraction(1_342_177_280, 400 * 10**9)
    nvlink = transfer_time(167_772_160, get_link("nvlink4"), latency_ns=5_000)
    assert nvlink.latency_published and nvlink.seconds == Fraction(5, 10**6) + Fraction(167_772_160, 450 * 10**9)


def test_decode_side_staging():
    assert decode_staging("cuda", 10**9) == decode_staging("cuda", 0)
    assert decode_staging("cuda", 10**9).host_bytes == 0
    cpu = decode_staging("cpu", 64 * 2**30)
    assert cpu.gpu_bytes == 0 and cpu.host_bytes == 64 * 2**30
    with pytest.raises(InputError) as info:
        decode_staging("disk", 1)
    assert info.value.field == "kv_buffer_device"


# ---- validation ------------------------------------------------------------------------------
def test_inputs_are_validated_with_their_field():
    twelve = ModelShape(layers=4, q_heads=24, kv_heads=12, head_dim=64, params=10**9)
    cases = [
        (dict(model=twelve, prompt_tokens=100, prefill_tp=3, decode_tp=4), "decode_tp"),
        (dict(model=LLAMA_70B, prompt_tokens=0), "prompt_tokens"),
        (dict(model=LLAMA_70B, prompt_tokens=100, block_size=0), "block_size"),
        (dict(model=LLAMA_70B, prompt_tokens=100, rule="per_layer"), "descriptor_rule"),
        (dict(model=LLAMA_70B, prompt_tokens=100, block_runs=2), "block_runs"),
        (dict(model=LLAMA_70B, prompt_tokens=100, rule="per_run", block_runs=8), "block_runs"),  # 7 blocks
        (dict(model=LLAMA_70B, prompt_tokens=100, decode_tp=3), "tp"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InputError) as info:
            kv_transfer(kwargs.pop("model"), FP8, **kwargs)
        assert info.value.field == field, kwargs
    with pytest.raises(InputError) as info:
        nixl_descriptors(regions=1, blocks=4, rule=DescriptorRule.PER_RUN, runs=5)
    assert info.value.field == "block_runs"
    with pytest.raises(InputError) as info:
        transfer_time(-1, get_link("ib-ndr"))
    assert info.value.field == "bytes"
