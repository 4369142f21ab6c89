"""The traffic and decode models against the reference page's worked answer (problem 5) and hand sums.

The page: N = 8,192, d = 128, FP16, 32 query heads, H100 SXM at 3.35 TB/s and 989 TFLOP/s.
S = 128 MiB per head; write S, read S, write P, read P = 512 MiB ≈ 0.54 GB ≈ 160 µs per head,
≈ 5.1 ms per layer; FLOPs = 32 × 4 × 8,192² × 128 ≈ 1.1e12 ≈ 1.1 ms; tiled traffic
4 × 8,192 × 128 × 2 B = 8 MiB per head ≈ 2.5 µs; S for the layer 4 GiB; about 64× less data.
"""

import pytest

from kernels.theory import (
    H100_SXM, H200_SXM, Hardware, attainable_tflops, decode_model, prefill_model, ridge_intensity,
    roofline_point,
)

MiB, GiB = 2**20, 2**30


@pytest.fixture
def page_model():
    return prefill_model(seq_len=8192, head_dim=128, n_heads=32, bytes_per_value=2, hardware=H100_SXM)


def test_matrix_sizes_are_the_pages(page_model):
    assert page_model.matrix_bytes_per_head == 128 * MiB
    assert page_model.matrix_bytes_layer == 4 * GiB


def test_standard_traffic_per_head(page_model):
    assert page_model.standard_traffic_per_head == 512 * MiB
    assert round(page_model.standard_traffic_per_head / 1e9, 2) == 0.54
    assert page_model.standard_memory_s_per_head == pytest.approx(160e-6, rel=0.005)


def test_standard_is_memory_bound_at_about_5_ms_per_layer(page_model):
    assert page_model.standard_memory_s == pytest.approx(5.1e-3, rel=0.01)
    assert page_model.standard_bound == "memory"
    assert page_model.standard_s == page_model.standard_memory_s


def test_flops_and_compute_time(page_model):
    # 32 × 4 × 2^13 × 2^13 × 2^7 = 2^40 ≈ 1.1e12
    assert page_model.flops_layer == 2**40
    assert page_model.compute_s == pytest.approx(1.1e-3, rel=0.015)


def test_tiled_traffic_and_bound(page_model):
    assert page_model.tiled_traffic_per_head == 8 * MiB
    assert page_model.tiled_memory_s_per_head == pytest.approx(2.5e-6, rel=0.005)
    assert page_model.traffic_ratio == 64
    assert page_model.tiled_bound == "compute"
    assert page_model.tiled_s == page_model.compute_s


def test_causal_halves_flops_not_the_matrix():
    full = prefill_model(seq_len=1024, head_dim=64, n_heads=2, bytes_per_value=2, hardware=H100_SXM)
    causal = prefill_model(seq_len=1024, head_dim=64, n_heads=2, bytes_per_value=2, hardware=H100_SXM,
                           causal=True)
    assert causal.flops_layer * 2 == full.flops_layer == 4 * 2 * 1024 * 1024 * 64
    assert causal.standard_traffic_layer == full.standard_traffic_layer


def test_batch_scales_the_layer_not_the_head():
    one = prefill_model(seq_len=2048, head_dim=128, n_heads=8, bytes_per_value=2, hardware=H200_SXM)
    four = prefill_model(seq_len=2048, head_dim=128, n_heads=8, bytes_per_value=2, hardware=H200_SXM, batch=4)
    assert four.standard_traffic_per_head == one.standard_traffic_per_head
    assert four.tiled_traffic_layer == 4 * one.tiled_traffic_layer


def test_decode_kv_bytes_over_bandwidth():
    # Batch 1, 32K tokens, 8 KV heads × 128, bf16: 2 × 32,768 × 8 × 128 × 2 B = 128 MiB.
    m = decode_model(batch=1, context=32768, n_q_heads=32, n_kv_heads=8, head_dim=128,
                     bytes_per_value=2, hardware=H200_SXM)
    assert m.kv_bytes == 128 * MiB
    assert m.memory_s == pytest.approx(134_217_728 / 4.8e12)
    assert m.predicted_s == m.memory_s  # 4 FLOP/B is far below the ridge (~206)
    # 4·32·L·128 FLOPs over 2·L·8·128·2 B: 2 × group 4 / 2 bytes = 4 FLOP/B
    assert m.intensity == 4.0
    fp8 = decode_model(batch=1, context=32768, n_q_heads=32, n_kv_heads=8, head_dim=128,
                       bytes_per_value=1, hardware=H200_SXM)
    assert fp8.memory_s * 2 == pytest.approx(m.memory_s)
    assert fp8.intensity == 8.0


def test_roofline():
    assert ridge_intensity(hbm_tbps=3.35, tflops=989.0) == pytest.approx(295.2, abs=0.1)
    assert attainable_tflops(2.0, hbm_tbps=3.35, tflops=989.0) == pytest.approx(6.7)
    assert attainable_tflops(1000.0, hbm_tbps=3.35, tflops=989.0) == 989.0
    p = roofline_point("x", flops=1e12, hbm_bytes=1e9, seconds=1e-3)
    assert (p.intensity, p.tflops) == (pytest.approx(1000.0), pytest.approx(1000.0))


@pytest.mark.parametrize("kwargs", [dict(seq_len=0), dict(head_dim=-1), dict(bytes_per_value=0)])
def test_bad_prefill_input(kwargs):
    base = dict(seq_len=8, head_dim=8, n_heads=1, bytes_per_value=2, hardware=H100_SXM)
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        prefill_model(**{**base, **kwargs})


def test_bad_decode_and_hardware_input():
    with pytest.raises(ValueError, match="multiple"):
        decode_model(batch=1, context=8, n_q_heads=6, n_kv_heads=4, head_dim=8, bytes_per_value=2,
                     hardware=H100_SXM)
    with pytest.raises(ValueError, match="> 0"):
        Hardware(name="broken", hbm_tbps=0.0, tflops=1.0)


def test_mixed_batch_counts_by_hand():
    from kernels.theory import mixed_contender_bytes, varlen_flops, varlen_hbm_bytes, varlen_pairs

    # A decode row over 4,096 cached tokens sees all of them; a first chunk of 4 tokens scores
    # 1 + 2 + 3 + 4 = 10 pairs; a chunk of 3 after 5 cached tokens 6 + 7 + 8 = 21.
    assert varlen_pairs(1, 4096) == 4096
    assert varlen_pairs(4, 4) == 10
    assert varlen_pairs(3, 8) == 21
    # 32 query heads, d = 128: 4 * 32 * 128 * (4096 + 10 + 21) = 67,616,768 FLOPs
    assert varlen_flops([1, 4, 3], [4096, 4, 8], 32, 128) == 67_616_768
    # 8 KV heads, bf16: KV 2 * 4108 * 8 * 128 * 2 = 16,826,368 B; Q + O 2 * 8 * 32 * 128 * 2 = 131,072 B
    assert varlen_hbm_bytes([1, 4, 3], [4096, 4, 8], 32, 8, 128, 2) == 16_957_440
    # Gather-then-SDPA also writes and re-reads the gathered KV: + 2 * 16,826,368
    assert mixed_contender_bytes("gather_sdpa", q_lens=[1, 4, 3], seq_lens=[4096, 4, 8], n_q_heads=32,
                                 n_kv_heads=8, head_dim=128) == 16_957_440 + 33_652_736


def test_decode_contender_bytes_by_hand():
    from kernels.theory import decode_contender_bytes

    shape = dict(batch=8, context=32768, n_q_heads=32, n_kv_heads=8, head_dim=128)
    # bf16 cache: 2 x 8 x 32768 x 8 x 128 x 2 B = 1 GiB; FP8 half of it; gather reads, writes, re-reads.
    assert decode_contender_bytes("triton_paged", **shape) == 1_073_741_824
    assert decode_contender_bytes("triton_paged_fp8", **shape) == 536_870_912
    assert decode_contender_bytes("gather_sdpa", **shape) == 3 * 1_073_741_824
    # INT4: per token, KV head and K or V, 64 B of codes + two 2-B scales: 2 x 8 x 32768 x 8 x 68 B.
    assert decode_contender_bytes("triton_paged_int4", **shape) == 285_212_672
    # naive expands K and V to the 32 query heads (group 4): read once, write and read 4x: 9x.
    assert decode_contender_bytes("naive", **shape) == 9 * 1_073_741_824
