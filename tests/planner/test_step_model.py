"""The step model's terms against hand calculations: the efficiency table's interpolations, the
experts a batch routes to, the per-GPU shapes read from published configs, and how the terms
of one step add up."""

from __future__ import annotations

import math

import pytest

from hardware.gpus import get_gpu
from planner import efficiency as eff
from planner.step_model import ServingSetup, experts_touched, step_shape, step_time
from sizing.catalogue import get_entry

H100, H200, A100 = get_gpu("h100-sxm"), get_gpu("h200"), get_gpu("a100-80gb")
MiB = 1 << 20
US = 1e-6

# A small dense model with round numbers: 2 layers, hidden 1,024, 8 query / 2 KV heads of 128,
# gated MLP 4,096 wide, vocabulary 32,000, untied embeddings, bf16.
TOY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 2,
       "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 4096,
       "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
TOY_QKV = 1024 * (8 + 2 * 2) * 128  # 1,572,864 values: Q 1,024 wide, K and V 256 each
TOY_O = 1024 * 1024
TOY_MLP = 3 * 1024 * 4096  # gate, up, down
TOY_LM_HEAD = 32000 * 1024


# --- the efficiency table -----------------------------------------------------------------------

def test_every_figure_names_its_source_and_estimates_say_so():
    for name, figure in eff.table():
        assert figure.source and figure.value > 0, name
        assert ("estimate: " in figure.label) == figure.estimate, name
    assert eff.READ_EFFICIENCY["cdna3"].estimate and not eff.READ_EFFICIENCY["hopper"].estimate


def test_h200_read_efficiency_is_the_measured_512_mib_gemv():
    assert eff.READ_EFFICIENCY["hopper"].value == round(512 * MiB / 125.28e-6 / 4.8e12, 3) == 0.893


def test_gemm_on_the_h200_returns_the_measured_grid():
    # A 512 MiB bf16 matrix times one token: 125.28 µs as measured; 16 MiB × 64 tokens: 9.98 µs.
    rate = eff.matmul_flops_per_s(H200)
    assert eff.gemm_seconds(512 * MiB, 256 * MiB, 1, grid="bf16", gpu=H200, flops_per_s=rate) == pytest.approx(125.28e-6)
    assert eff.gemm_seconds(16 * MiB, 8 * MiB, 64, grid="bf16", gpu=H200, flops_per_s=rate) == pytest.approx(9.98e-6)
    # Halfway between the 32- and 64-token columns of the 64 MiB row: (22.96 + 24.34) / 2.
    assert eff.gemm_seconds(64 * MiB, 32 * MiB, 48, grid="bf16", gpu=H200, flops_per_s=rate) == pytest.approx(23.65e-6)
    # Below the grid's smallest matrix: its time, the floor.
    assert eff.gemm_seconds(1024, 512, 1, grid="bf16", gpu=H200, flops_per_s=rate) == pytest.approx(6.99e-6)


def test_gemm_moves_to_another_gpu_by_read_rate_keeping_its_floor():
    # H100: the floor stays 6.99 µs, the rest scales by 4.8 / 3.35 (same Hopper read ratio).
    rate = eff.matmul_flops_per_s(H100)
    expected = 6.99e-6 + (125.28e-6 - 6.99e-6) * 4.8 / 3.35
    assert eff.gemm_seconds(512 * MiB, 256 * MiB, 1, grid="bf16", gpu=H100, flops_per_s=rate) == pytest.approx(expected)
    # A100: its own read ratio 0.88 of 2.039 TB/s against the H200's 0.893 of 4.8.
    expected = 6.99e-6 + (125.28e-6 - 6.99e-6) * (4.8 * 0.893) / (2.039 * 0.88)
    assert eff.gemm_seconds(512 * MiB, 256 * MiB, 1, grid="bf16", gpu=A100,
                            flops_per_s=eff.matmul_flops_per_s(A100)) == pytest.approx(expected)


def test_gemm_is_never_below_its_compute_bound():
    # 8,192 tokens through an 8192² bf16 matrix: 2 × 8192³ FLOPs at 0.81 × 989 TFLOP/s.
    rate = eff.matmul_flops_per_s(H100)
    assert rate == pytest.approx(0.81 * 989e12)
    seconds = eff.gemm_seconds(128 * MiB, 8192**2, 8192, grid="bf16", gpu=H100, flops_per_s=rate)
    assert seconds == pytest.approx(2 * 8192**3 / rate)


def test_fp8_doubles_the_rate_on_hopper_but_not_on_ampere():
    assert eff.matmul_flops_per_s(H100, fp8=True) == 2 * eff.matmul_flops_per_s(H100)
    assert eff.matmul_flops_per_s(A100, fp8=True) == eff.matmul_flops_per_s(A100)
    assert eff.has_fp8(H200) and not eff.has_fp8(A100)


def test_allreduce_reads_the_published_table():
    assert eff.allreduce_seconds(1_048_576, 8, "vllm") == (pytest.approx(24.1e-6), False)
    assert eff.allreduce_seconds(2_048, 2, "sglang") == (pytest.approx(3.7e-6), False)
    assert eff.allreduce_seconds(10_000, 1, "vllm") == (0.0, False)
    # Below 2 KiB: the smallest message's time; TP 16 is not in the table: TP 8's, flagged.
    assert eff.allreduce_seconds(100, 4, "vllm")[0] == pytest.approx(9.1e-6)
    assert eff.allreduce_seconds(2_048, 16, "vllm") == (pytest.approx(10.1e-6), True)
    # Past 4 MiB at the 2 → 4 MiB slope: TP 4, 8 MiB = 40.2 + 4 MiB × (40.2 − 26.9) / 2 MiB.
    seconds, _ = eff.allreduce_seconds(8_388_608, 4, "vllm")
    assert seconds == pytest.approx((40.2 + 2 * (40.2 - 26.9)) * 1e-6)


def test_decode_read_rates_are_the_shipped_grid_between_its_points():
    from planner.decode_rates import rate_grid, read_efficiency

    # The shipped H200 run's FlashInfer tensor-core rows, 32/8 and 64/8 heads, by hand from the file:
    # B8 L4K 3.03 and 2.99 TB/s, B8 L16K 3.85 and 3.80; the datasheet 4.8 TB/s.
    fi = rate_grid("flashinfer")
    assert fi.datasheet_tbps == 4.8 and "flashinfer_tc" in fi.source and "h200-" in fi.source
    b8 = dict(fi.rows[8])
    assert b8[4096] == pytest.approx((3.03 + 2.99) / 2, abs=0.01)
    assert b8[16384] == pytest.approx((3.85 + 3.80) / 2, abs=0.01)
    assert read_efficiency("flashinfer", 8, 4096) == pytest.approx(b8[4096] / 4.8)
    # 8K lies halfway between 4K and 16K in log context; 16 sequences halfway between 8 and 32.
    assert read_efficiency("flashinfer", 8, 8192) == pytest.approx((b8[4096] + b8[16384]) / 2 / 4.8)
    b32 = dict(fi.rows[32])
    assert read_efficiency("flashinfer", 16, 4096) == pytest.approx((b8[4096] + b32[4096]) / 2 / 4.8)
    # Clamped past the grid: batch 1,000 reads as batch 128; a 1M context as the row's longest.
    assert read_efficiency("flashinfer", 1000, 32768) == read_efficiency("flashinfer", 128, 32768)
    assert read_efficiency("flashinfer", 1, 10**6) == pytest.approx(dict(fi.rows[1])[131072] / 4.8)
    # This project's kernel reads B8 x 4K at 3.30 TB/s (32/8 heads) where FlashInfer reads 3.03.
    assert read_efficiency("kvx", 8, 4096) > read_efficiency("flashinfer", 8, 4096)
    with pytest.raises(ValueError, match="attention backend"):
        rate_grid("cudnn")

def test_moe_call_is_fixed_cost_plus_experts_touched():
    # Eight 4.72 MB experts on an H100: 27 µs + 8 × (0.28 µs + 4.72e6 B ÷ (3.35e12 × 0.893) B/s).
    expected = 27e-6 + 8 * (0.28e-6 + 4.72e6 / (3.35e12 * 0.893))
    assert eff.moe_seconds(8, 4.72e6, H100) == pytest.approx(expected)


# --- experts a batch routes to ------------------------------------------------------------------

def test_experts_touched_by_hand():
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)  # one token: its k experts
    assert experts_touched(8, 2, 8) == pytest.approx(8 * (1 - 0.75**8))  # 7.199
    assert experts_touched(128, 8, 0) == 0.0
    assert experts_touched(0, 0, 64) == 0.0
    # Skewed routing as 4 equally popular experts of 8: 4 × (1 − 0.5^8) = 3.984.
    assert experts_touched(8, 2, 8, imbalance=2.0) == pytest.approx(3.984375)
    assert experts_touched(256, 8, 10**6) == pytest.approx(256)


def test_experts_touched_grows_with_the_batch_and_never_passes_all_experts():
    counts = [experts_touched(256, 8, t) for t in (1, 2, 8, 64, 512, 4096)]
    assert counts == sorted(counts) and counts[-1] <= 256


# --- per-GPU shapes from configs ----------------------------------------------------------------

def test_toy_shape_by_hand():
    shape = step_shape(TOY, tp=1, gpu=H100)
    assert shape.attention_gemms == pytest.approx((TOY_QKV, TOY_O))
    assert shape.dense_mlp_gemms == pytest.approx((TOY_MLP * 2 / 3, TOY_MLP / 3))
    assert shape.lm_head_values == TOY_LM_HEAD and shape.moe_layers == 0 and shape.dense_layers == 2
    (group,) = shape.groups
    assert group.kv_bytes_per_token == 2 * 2 * 128 * 2  # K and V of 2 heads, bf16: 1,024 B
    assert group.flops_per_context_token == 8 * 4 * 128


def test_tensor_parallel_splits_the_weights_and_heads():
    half = step_shape(TOY, tp=2, gpu=H100)
    assert half.attention_gemms == pytest.approx((TOY_QKV / 2, TOY_O / 2))
    assert half.lm_head_values == TOY_LM_HEAD / 2
    assert half.groups[0].kv_bytes_per_token == 1 * 2 * 128 * 2  # one KV head per GPU


def test_deepseek_r1_at_tp8():
    shape = step_shape(get_entry("deepseek-r1").config_bytes, tp=8, gpu=H200)
    assert (shape.moe_layers, shape.dense_layers, shape.experts, shape.top_k) == (58, 3, 256, 8)
    # MLA's query and latent down-projections stay whole on every rank: 7,168 × (1,536 + 512 + 64).
    assert shape.attention_gemms[0] == 7168 * (1536 + 512 + 64)
    assert shape.expert_values == pytest.approx(3 * 7168 * 2048 / 8)  # one expert's slice
    assert shape.weight_format == "fp8_block" and shape.dense_grid == shape.expert_grid == "fp8"
    assert shape.expert_bytes == pytest.approx(1 + 4 / (128 * 128))  # FP8 + one fp32 scale per 128²
    (mla,) = shape.groups
    assert mla.kv_bytes_per_token == (512 + 64) * 2  # the latent, replicated, bf16
    assert mla.flops_per_context_token == 16 * (2 * (512 + 64) + 2 * 512)  # 16 heads per GPU


def test_gpt_oss_keeps_attention_in_bf16_and_experts_in_mxfp4():
    shape = step_shape(get_entry("gpt-oss-120b").config_bytes, tp=1, gpu=H100)
    assert (shape.dense_bytes, shape.expert_bytes) == (2.0, 4 / 8 + 1 / 32)
    assert shape.moe_layers == 36 and shape.expert_values == 3 * 2880 * 2880
    kinds = {(g.kind.value, g.window) for g in shape.groups}
    assert kinds == {("sliding_window", 128), ("full", None)}


def test_a_format_given_by_hand_quantises_every_linear_layer():
    shape = step_shape(get_entry("qwen3-14b").config_bytes, tp=1, gpu=A100, weight_format="awq_int4")
    assert shape.dense_bytes == shape.expert_bytes == pytest.approx(0.5 + 2 / 128 + 1 / 256)
    assert shape.dense_grid == "bf16"  # Marlin multiplies 4-bit weights in bf16


# --- one step -----------------------------------------------------------------------------------

def test_toy_step_terms_by_hand():
    shape = step_shape(TOY, tp=1, gpu=H100)
    terms = step_time(shape, ServingSetup(gpu=H100), decode_batch=4, context=1000)
    rate = eff.matmul_flops_per_s(H100)
    gemm = lambda values: eff.gemm_seconds(values * 2, values, 4, grid="bf16", gpu=H100, flops_per_s=rate)
    assert terms.attention_gemms_s == pytest.approx(2 * (gemm(TOY_QKV) + gemm(TOY_O)))
    assert terms.mlp_gemms_s == pytest.approx(2 * (gemm(TOY_MLP * 2 / 3) + gemm(TOY_MLP / 3)))
    # 4 × 1,000 tokens × 1,024 B = 4.1 MB per layer: 1.2 µs at 0.6375 × 3.35 TB/s, under the
    # 10.1 µs floor, so each of the 2 layers costs the floor.
    assert terms.attention_s == pytest.approx(2 * 10.1e-6)
    # 2 × 5 small kernels per layer, 2 activations, 10 per step, at 0.92 µs each.
    assert terms.small_kernels_s == pytest.approx((2 * 5 + 2 + 10) * 0.92e-6)
    assert terms.allreduce_s == 0.0 and terms.experts_s == 0.0 and terms.host_s == 0.0
    assert terms.sampling_s == pytest.approx(3 * 4 * 32000 * 4 / (3.35e12 * 0.893))
    assert terms.total_s == pytest.approx(terms.gpu_s)


def test_eager_mode_launches_every_kernel_from_the_host():
    shape = step_shape(TOY, tp=1, gpu=H100)
    eager = step_time(shape, ServingSetup(gpu=H100, cuda_graphs=False), decode_batch=1, context=100)
    assert eager.host_s == pytest.approx(eager.kernels * 6.9e-6)
    assert eager.total_s == max(eager.gpu_s, eager.host_s)


def test_tensor_parallel_adds_two_allreduces_per_layer_and_the_logits_gather():
    shape = step_shape(TOY, tp=2, gpu=H100)
    terms = step_time(shape, ServingSetup(gpu=H100), decode_batch=8, context=100)
    per_layer, _ = eff.allreduce_seconds(8 * 1024 * 2, 2, "vllm")
    gather, _ = eff.allreduce_seconds(8 * 16000 * 4, 2, "vllm")  # each rank's half of the logits
    assert terms.allreduce_s == pytest.approx(2 * 2 * per_layer + gather)


def test_moe_step_reads_the_experts_the_batch_touches():
    shape = step_shape(get_entry("qwen3-30b-a3b").config_bytes, tp=1, gpu=H100)
    terms = step_time(shape, ServingSetup(gpu=H100), decode_batch=16, context=2000)
    touched = 128 * (1 - (1 - 8 / 128) ** 16)
    assert terms.experts_touched == pytest.approx(touched)
    assert terms.experts_s == pytest.approx(48 * eff.moe_seconds(touched, 3 * 2048 * 768 * 2, H100))
    skewed = step_time(shape, ServingSetup(gpu=H100, routing_imbalance=4.0), decode_batch=16, context=2000)
    assert skewed.experts_s < terms.experts_s


def test_sliding_layers_read_at_most_their_window():
    shape = step_shape(get_entry("gpt-oss-120b").config_bytes, tp=1, gpu=H100)
    short = step_time(shape, ServingSetup(gpu=H100), decode_batch=256, context=128)
    long = step_time(shape, ServingSetup(gpu=H100), decode_batch=256, context=4096)
    # 18 full layers read 32 × more; the 18 sliding ones the same 128 tokens: less than 32 ×.
    assert 1 < long.attention_s / short.attention_s < 32


def test_step_inputs_are_checked():
    shape = step_shape(TOY, tp=1, gpu=H100)
    with pytest.raises(ValueError, match="routing_imbalance"):
        ServingSetup(gpu=H100, routing_imbalance=0.5)
    with pytest.raises(ValueError):
        step_time(shape, ServingSetup(gpu=H100), decode_batch=-1, context=10)
    assert math.isfinite(step_time(shape, ServingSetup(gpu=H100), decode_batch=0, context=0,
                                   prefill_tokens=512, prefill_pairs=512**2 / 2, prefill_requests=1).total_s)
