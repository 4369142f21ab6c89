"""Per-GPU memory of parallel layouts, each figure against a hand count or a published measurement.

The hand counts use the published configs shipped in data/models/ (layers, heads, widths) and
write the arithmetic out; none is copied from the module's output.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from inputs.errors import InputError
from planner.cluster.parallel import ParallelLayout, parallel_memory, routed_expert_params
from sizing.catalogue import get_entry
from sizing.engine.pipeline import stage_layer_counts
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.weights import engine_weight_bytes
from units import GiB

BF16 = get_precision("bf16")
FP8 = get_precision("fp8")
FP8_BLOCK = get_precision("fp8_block")
CONTEXT = 32_768


def _shape(model_id: str) -> ModelShape:
    return get_entry(model_id).shape


def _memory(model_id: str, layout: ParallelLayout, *, kv=FP8, weights=BF16, context=CONTEXT, **kwargs):
    entry = get_entry(model_id)
    routed = routed_expert_params(entry.config) if entry.shape.is_moe else None
    return parallel_memory(entry.shape, layout, kv_precision=kv, weight_precision=weights, context=context,
                           routed_params=routed, **kwargs)


# ---- KV bytes per token per GPU ----------------------------------------------------------------
def test_llama_70b_fp8_at_tp8_is_20_kib_per_token_per_gpu():
    # 80 layers × 2 (K, V) × 8 KV heads / TP 8 = 1 head × 128 × 1 B = 20,480 B = 20 KiB.
    memory = _memory("llama-3.1-70b", ParallelLayout(tp=8))
    assert memory.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 1 == 20 * 1024
    assert "80 layers × 1 of 8 KV heads" in memory.stages[0].terms[2].formula


def test_gqa_heads_replicate_beyond_n_kv():
    # TP 16 > 8 KV heads: each GPU still keeps one whole head, so 20 KiB, not 10.
    assert _memory("llama-3.1-70b", ParallelLayout(tp=16)).kv_bytes_per_token_per_gpu == 20_480


@pytest.mark.parametrize("tp", [1, 8, 16])
def test_deepseek_v3_latent_is_replicated_on_every_tp_rank(tp):
    # MLA: one latent of kv_lora_rank 512 + qk_rope_head_dim 64 per layer, 61 layers, BF16, no
    # factor 2, and the same on every TP rank: 61 × 576 × 2 = 70,272 B whatever the TP.
    memory = _memory("deepseek-v3", ParallelLayout(tp=tp), kv=BF16, weights=FP8_BLOCK)
    assert memory.kv_bytes_per_token_per_gpu == 61 * (512 + 64) * 2 == 70_272


def test_users_per_replica_and_in_all_from_a_kv_budget():
    # 32,768 tokens × 20 KiB = 640 MiB per sequence per GPU; 40 GiB holds 64 of them per DP rank.
    budget = 40 * GiB
    memory = _memory("llama-3.1-70b", ParallelLayout(tp=8, dp=2), kv_budget_bytes_per_gpu=budget)
    assert memory.stages[0].kv_bytes_per_sequence_per_gpu == 32_768 * 20_480 == 640 * 2**20
    assert memory.users_per_dp_rank == 64
    assert memory.users_total == 128  # a dense model's DP ranks are plain replicas
    assert memory.gpus == 16


# ---- data-parallel attention against TP ----------------------------------------------------------
# vLLM issue 51454 (DeepSeek-V4-Flash-0731, MLA with one latent "head", 8 × B200, vLLM 0.25.0,
# 1,048,576-token context) measured, from the start-up logs of a same-node re-run:
#   TP 8 + EP:  "GPU KV cache size: 21,419,891 tokens", "Maximum concurrency ...: 20.43x"
#   DP 8 + EP:  eight EngineCore_DP* replicas, each "20,571,235 tokens" and "19.62x"
# and reports 156.9x against 20.43x, "7.7x more total KV capacity". That model is not in the
# catalogue; DeepSeek-V3's latent stands in: the ratio depends only on the per-GPU token rates.
VLLM_51454_CONTEXT = 1_048_576
VLLM_51454_TP8_TOKENS_PER_GPU = 21_419_891
VLLM_51454_DP8_TOKENS_PER_RANK = 20_571_235


def _dsv3_fp8(layout: ParallelLayout, budget) -> object:
    return _memory("deepseek-v3", layout, weights=FP8_BLOCK, context=VLLM_51454_CONTEXT, kv_budget_bytes_per_gpu=budget)


def test_mla_dp8_holds_eight_times_tp8_at_equal_per_gpu_budget():
    # Under TP 8 every GPU holds the same latent of the same sequences; under DP 8 each GPU
    # holds its own: 8 pools instead of 1, the mechanism vllm#51454 names.
    budget = 60 * GiB
    tp8 = _dsv3_fp8(ParallelLayout(tp=8, ep=True), budget)
    dp8 = _dsv3_fp8(ParallelLayout(dp=8, ep=True), budget)
    assert tp8.kv_bytes_per_token_per_gpu == dp8.kv_bytes_per_token_per_gpu == 61 * 576 * 1
    assert dp8.concurrency_total / tp8.concurrency_total == 8


def test_mla_dp8_against_tp8_reproduces_the_measured_ratio():
    # Per GPU the engine held 21,419,891 tokens at TP 8 and 20,571,235 at DP 8 (the DP rank also
    # keeps the attention weights whole, so its KV budget is 4 % smaller). Budgets of those
    # tokens × the per-GPU latent bytes give 8 × 20,571,235 / 21,419,891 = 7.683.
    per_token = 61 * 576 * 1
    tp8 = _dsv3_fp8(ParallelLayout(tp=8, ep=True), VLLM_51454_TP8_TOKENS_PER_GPU * per_token)
    dp8 = _dsv3_fp8(ParallelLayout(dp=8, ep=True), VLLM_51454_DP8_TOKENS_PER_RANK * per_token)
    assert float(tp8.concurrency_total) == pytest.approx(20.43, abs=0.005)  # the TP 8 log's 20.43x
    assert float(dp8.concurrency_per_dp_rank) == pytest.approx(19.62, abs=0.005)  # each DP rank's 19.62x
    ratio = dp8.concurrency_total / tp8.concurrency_total
    # vllm#51454 prints 156.9x (±0.05) and 20.43x (±0.005): the ratio lies in [156.85 / 20.435,
    # 156.95 / 20.425] = [7.6755, 7.6842], and rounds to its headline 7.7.
    assert 156.85 / 20.435 <= ratio <= 156.95 / 20.425
    assert round(float(ratio), 1) == 7.7


def test_gqa_dp_gains_only_the_tp_replication_and_dcp_gives_it_back():
    # Qwen3-30B-A3B: 48 layers, 4 KV heads, d 128, BF16 KV. TP 8: one head per GPU, each on 2
    # ranks: 48 × 2 × 1 × 128 × 2 B = 24,576 B. DP 8 (TP 1): all 4 heads, 98,304 B per GPU but
    # 8 pools: 8 / 98,304 = 1 / 12,288 against 1 / 24,576, twice TP 8. DCP 2 at TP 8 halves the
    # per-GPU KV to 12,288 B and removes the copies.
    budget = 20 * GiB
    tp8 = _memory("qwen3-30b-a3b", ParallelLayout(tp=8, ep=True), kv=BF16, kv_budget_bytes_per_gpu=budget)
    dp8 = _memory("qwen3-30b-a3b", ParallelLayout(dp=8, ep=True), kv=BF16, kv_budget_bytes_per_gpu=budget)
    dcp = _memory("qwen3-30b-a3b", ParallelLayout(tp=8, dcp=2, ep=True), kv=BF16, kv_budget_bytes_per_gpu=budget)
    assert tp8.kv_bytes_per_token_per_gpu == 48 * 2 * 1 * 128 * 2 == 24_576
    assert dp8.kv_bytes_per_token_per_gpu == 48 * 2 * 4 * 128 * 2 == 98_304
    assert dcp.kv_bytes_per_token_per_gpu == 12_288
    assert dp8.concurrency_total / tp8.concurrency_total == 2
    assert dcp.concurrency_total == dp8.concurrency_total


def test_mla_dcp_splits_the_latent_over_all_tp_ranks():
    # vLLM lets an MLA model take DCP = TP: 61 × 576 × 2 B ÷ 8 = 8,784 B per token per GPU.
    memory = _memory("deepseek-v3", ParallelLayout(tp=8, dcp=8), kv=BF16, weights=FP8_BLOCK)
    assert memory.kv_bytes_per_token_per_gpu == Fraction(61 * 576 * 2, 8) == 8_784


# ---- weights: dense split by TP and copied per DP rank, experts over TP × DP -----------------------
QWEN3_30B_ROUTED = 48 * 128 * 3 * 2048 * 768  # MoE layers × experts × (gate, up, down) × hidden × moe width
DSV3_ROUTED = (61 - 3) * 256 * 3 * 7168 * 2048  # the first 3 of 61 layers are dense (first_k_dense_replace)


def test_routed_expert_params_match_the_published_configs():
    assert routed_expert_params(get_entry("qwen3-30b-a3b").config) == QWEN3_30B_ROUTED == 28_991_029_248
    assert routed_expert_params(get_entry("deepseek-v3").config) == DSV3_ROUTED == 653_908_770_816
    assert routed_expert_params(get_entry("llama-3.1-70b").config) == 0


def test_qwen3_30b_expert_weights_over_ep8():
    # BF16: experts 28,991,029,248 × 2 B = 57,982,058,496 B, 16 of 128 experts per rank under
    # EP 8 = 7,247,757,312 B per GPU; the rest, 30.5 B published params × 2 B − experts =
    # 3,017,941,504 B, is whole on each DP rank and split 8 ways at TP 8.
    experts_per_gpu = 16 * 48 * 3 * 2048 * 768 * 2
    rest = 30_500_000_000 * 2 - QWEN3_30B_ROUTED * 2
    dp8 = _memory("qwen3-30b-a3b", ParallelLayout(dp=8, ep=True))
    tp8 = _memory("qwen3-30b-a3b", ParallelLayout(tp=8, ep=True))
    assert dp8.stages[0].expert_weight_bytes_per_gpu == tp8.stages[0].expert_weight_bytes_per_gpu == experts_per_gpu
    assert experts_per_gpu == 7_247_757_312 and rest == 3_017_941_504
    assert dp8.weight_bytes_per_gpu == rest + experts_per_gpu
    assert tp8.weight_bytes_per_gpu == Fraction(rest, 8) + experts_per_gpu


def test_without_ep_fused_moe_splits_every_expert_over_tp_times_dp():
    # Same bytes per GPU as EP (all experts ÷ 8 ranks), reached by splitting each expert's matrices.
    memory = _memory("qwen3-30b-a3b", ParallelLayout(tp=2, dp=4))
    assert memory.stages[0].expert_weight_bytes_per_gpu == Fraction(QWEN3_30B_ROUTED * 2, 8)
    assert memory.layout.ep_size == 1


def test_deepseek_v3_expert_bytes_per_gpu_at_ep8_in_its_fp8_blocks():
    # 32 of 256 experts per rank × 58 MoE layers × 3 × 7168 × 2048, at 1 B + one fp32 scale per
    # 128 × 128 block (4 / 16,384 B per weight).
    per_weight = 1 + Fraction(4, 128 * 128)
    memory = _memory("deepseek-v3", ParallelLayout(dp=8, ep=True), weights=FP8_BLOCK)
    assert memory.stages[0].expert_weight_bytes_per_gpu == 32 * 58 * 3 * 7168 * 2048 * per_weight


def test_dp_attention_keeps_the_dense_weights_whole_per_rank():
    # From TP 8 to DP 8 the experts per GPU stay (÷ 8 either way) and each GPU gains 7/8 of the
    # dense part: everything but the routed experts.
    total = engine_weight_bytes(_shape("deepseek-v3"), FP8_BLOCK).bytes
    dense = total - DSV3_ROUTED * (1 + Fraction(4, 128 * 128))
    tp8 = _memory("deepseek-v3", ParallelLayout(tp=8, ep=True), weights=FP8_BLOCK)
    dp8 = _memory("deepseek-v3", ParallelLayout(dp=8, ep=True), weights=FP8_BLOCK)
    assert dp8.weight_bytes_per_gpu - tp8.weight_bytes_per_gpu == dense * Fraction(7, 8)
    # The usable-memory path subtracts each layout's own weights: DP 8 has less KV per GPU.
    usable = 126.9e9  # an H200's 141 GB × 90 %
    tp8u = _memory("deepseek-v3", ParallelLayout(tp=8, ep=True), weights=FP8_BLOCK, usable_bytes_per_gpu=usable)
    dp8u = _memory("deepseek-v3", ParallelLayout(dp=8, ep=True), weights=FP8_BLOCK, usable_bytes_per_gpu=usable)
    assert tp8u.stages[0].kv_budget_bytes_per_gpu - dp8u.stages[0].kv_budget_bytes_per_gpu == dense * Fraction(7, 8)
    assert 1 < dp8u.concurrency_total / tp8u.concurrency_total < 8


def test_the_shape_estimate_of_expert_params_is_close_to_the_config_count():
    # (30.5 B − 3.35 B active) × 128 / 120 inactive experts, within 0.2 % of the exact count.
    shape = _shape("qwen3-30b-a3b")
    memory = parallel_memory(shape, ParallelLayout(dp=8, ep=True), kv_precision=BF16, weight_precision=BF16,
                             context=CONTEXT)
    assert memory.expert_params_source == "estimate"
    assert memory.routed_expert_params == pytest.approx(QWEN3_30B_ROUTED, rel=0.002)


def test_gpus_are_tp_times_pp_times_dp_and_ep_adds_none():
    layout = ParallelLayout(tp=2, pp=2, dp=4, ep=True)
    assert layout.gpus == 16 and layout.ep_size == 8
    assert ParallelLayout(tp=2, dp=4, ep=8).ep_size == 8


def test_router_imbalance_reports_the_hottest_rank_share_only():
    memory = _memory("qwen3-30b-a3b", ParallelLayout(dp=8, ep=True, router_imbalance=1.5))
    even = _memory("qwen3-30b-a3b", ParallelLayout(dp=8, ep=True))
    assert memory.layout.hottest_rank_share == Fraction(3, 2) / 8
    assert memory.weight_bytes_per_gpu == even.weight_bytes_per_gpu  # no memory effect claimed
    assert any(t.name.startswith("most-loaded") and t.value == Fraction(3, 16) for t in memory.terms)


# ---- pipeline stages ----------------------------------------------------------------------------
def test_pp_split_follows_vllm_and_the_fullest_stage_limits_users():
    # 61 layers over 4 stages: 15 each and the one left over to the stage before the last
    # (vLLM keeps the last stage, which also samples, lightest): 15, 15, 16, 15.
    memory = _memory("deepseek-v3", ParallelLayout(tp=8, pp=4), weights=FP8_BLOCK, kv_budget_bytes_per_gpu=10 * GiB)
    assert tuple(s.layers for s in memory.stages) == (15, 15, 16, 15) == stage_layer_counts(61, 4)
    assert tuple(s.first_layer for s in memory.stages) == (0, 15, 30, 46)
    assert memory.kv_bytes_per_token_per_gpu == 16 * 576 * 1
    # 10 GiB ÷ (32,768 tokens × 16 × 576 B) = 35.56 → 35 sequences, set by stage 2.
    assert memory.users_per_dp_rank == 10 * GiB // (32_768 * 16 * 576) == 35
    assert memory.stages[2].weight_bytes_per_gpu == max(s.weight_bytes_per_gpu for s in memory.stages)


def test_pp_layer_partition_moves_layers():
    memory = _memory("llama-3.1-70b", ParallelLayout(tp=8, pp=3, pp_layer_partition="30,25,25"))
    assert tuple(s.layers for s in memory.stages) == (30, 25, 25)
    assert memory.kv_bytes_per_token_per_gpu == 2 * 30 * 1 * 128 * 1
    # vLLM's default for 80 over 3: 26 each, the 2 left to the two stages before the last.
    default = _memory("llama-3.1-70b", ParallelLayout(tp=8, pp=3))
    assert tuple(s.layers for s in default.stages) == (27, 27, 26)


# ---- refusals, each naming its constraint -------------------------------------------------------
@pytest.mark.parametrize(("model_id", "layout", "field", "words"), [
    ("deepseek-v3", dict(tp=3), "tp", "128 query heads"),
    ("gemma-2-9b", dict(tp=32), "tp", "16 query heads"),
    ("qwen3-30b-a3b", dict(dp=3, ep=True), "ep", "128 experts"),
    ("mixtral-8x7b", dict(dp=16, ep=True), "ep", "8 experts"),
    ("llama-3.1-70b", dict(tp=8, ep=True), "ep", "dense"),
    ("llama-3.2-1b", dict(pp=17), "pp", "16 layers"),
    ("llama-3.1-70b", dict(tp=8, pp=2, pp_layer_partition="40,41"), "pp_layer_partition", "80 layers"),
    ("llama-3.1-70b", dict(tp=8, dcp=2), "dcp", "TP > the 8 KV heads"),
    ("qwen3-30b-a3b", dict(tp=8, dcp=4), "dcp", "= 2 copies"),
])
def test_invalid_layouts_name_their_constraint(model_id, layout, field, words):
    with pytest.raises(InputError) as caught:
        _memory(model_id, ParallelLayout(**layout))
    assert caught.value.field == field
    assert words in caught.value.message


def test_dcp_must_divide_the_query_heads_per_kv_head():
    # 6 query heads over 2 KV heads = 3 per KV head; TP 6 makes 3 copies, DCP 2 fits them
    # but does not divide the 3 query heads of a group.
    shape = ModelShape(layers=4, q_heads=6, kv_heads=2, head_dim=64, params=10**8)
    with pytest.raises(InputError, match="3 query heads per KV head") as caught:
        parallel_memory(shape, ParallelLayout(tp=6, dcp=2), kv_precision=BF16, weight_precision=BF16,
                        context=CONTEXT)
    assert caught.value.field == "dcp"


@pytest.mark.parametrize(("layout", "field", "words"), [
    (dict(tp=8, dcp=3), "dcp", "must divide TP 8"),
    (dict(tp=8, ep=4), "ep", "TP 8 × DP 1 = 8"),
    (dict(dp=8, ep=True, router_imbalance=0.9), "router_imbalance", "at least 1"),
    (dict(dp=8, ep=True, router_imbalance=9), "router_imbalance", "EP size, 8"),
    (dict(tp=8, router_imbalance=2), "router_imbalance", "EP size, 1"),
])
def test_layouts_refused_before_any_model(layout, field, words):
    with pytest.raises(InputError) as caught:
        ParallelLayout(**layout)
    assert caught.value.field == field
    assert words in caught.value.message


def test_budget_is_given_one_way_only():
    with pytest.raises(InputError) as caught:
        _memory("llama-3.1-70b", ParallelLayout(tp=8), kv_budget_bytes_per_gpu=GiB, usable_bytes_per_gpu=GiB)
    assert caught.value.field == "kv_budget_bytes_per_gpu"
