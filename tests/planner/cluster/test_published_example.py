"""The cluster plan against NVIDIA's published deployment examples (tests/data/cluster_examples/,
sources in its README): an aiconfigurator disaggregated/aggregated configuration of Qwen3-32B on
32 H200s, and Dynamo's KV cache per GPU of Llama-3.3-70B in NVFP4 on B200 at TP 1, 2 and 4.

Published figures are read from the excerpts; the library's are hand-derived in the comments.
What the library does not reproduce stays as a strict expected failure naming the rule it lacks."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from hardware.gpus import get_gpu
from planner.bandwidth import choose_estimate
from planner.cluster.launch import launch_settings, role_table
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pools import Deployment, Pool, decode_fit, fewest_replicas, size_prefill
from planner.cluster.replica import ClusterSpec, Load, replica
from planner.cluster.transfer import kv_transfer
from sizing.checkpoints import checkpoint_for
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.memory import ActivationShape
from sizing.precisions import get_precision
from sizing.presets import get_preset
from units import GiB

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "cluster_examples"
BF16 = get_precision("bf16")
TP1, TP4 = ParallelLayout(tp=1), ParallelLayout(tp=4)


def _text(name: str) -> str:
    return (EXAMPLES / name).read_text()


def test_every_excerpt_has_a_source():
    readme = _text("README.md")
    names = {p.name for p in EXAMPLES.iterdir() if p.name != "README.md"}
    assert names == {"aiconfigurator-cli-qwen3-32b-h200.txt", "aiconfigurator-rate-matching.py.txt",
                     "dynamo-llama-3.3-70b-nvfp4-b200-kv.md"}
    for name in names:
        assert f"`{name}`" in readme


# ---- aiconfigurator: Qwen3-32B on 32 H200 SXM -----------------------------------------------------
# `aiconfigurator cli default --model QWEN3_32B --total_gpus 32 --system h200_sxm --ttft 1000
# --tpot 10 --isl 3000 --osl 512`: disaggregated rank 1 is 4 replicas of "4P1D" (4 prefill workers
# at TP 1, batch 1; 1 decode worker at TP 4, batch 64), 913.82 tokens/s/GPU at TPOT 8.07 ms;
# aggregated rank 1 is 8 workers at TP 4, batch 28.
AIC = "aiconfigurator-cli-qwen3-32b-h200.txt"


def _rows(text: str, title: str) -> dict[str, str]:
    """The rank-1 row of the table under ``title``, keyed by its header cells."""
    lines = text[re.search(rf"^{title}", text, re.M).start():].splitlines()[1:3]
    header, row = ([c.strip() for c in line.strip().strip("|").split("|")] for line in lines)
    return dict(zip(header, row, strict=True))


def _option(text: str, name: str) -> int:
    return int(re.search(rf"--{name} (\d+)", text).group(1))


def _aic() -> dict:
    text = _text(AIC)
    return {"disagg": _rows(text, "disagg Top Configurations"), "agg": _rows(text, "agg Top Configurations"),
            "isl": _option(text, "isl"), "osl": _option(text, "osl"), "gpus": _option(text, "total_gpus"),
            "ttft_ms": _option(text, "ttft"), "tpot_ms": _option(text, "tpot"),
            "best_tpot_ms": float(re.search(r"TPOT: ([\d.]+)ms", text).group(1))}


def _spec(budget: str = "engine") -> ClusterSpec:
    """Qwen3-32B on H200 as the CLI builds it for the catalogue model: its config's activation widths."""
    estimate, _ = choose_estimate("h200-results")
    preset = get_preset("qwen3-32b")
    return ClusterSpec(model=preset.shape, kv_precision=BF16, weight_precision=BF16, gpu=get_gpu("h200"),
                       estimate=estimate, budget=budget, activation=ActivationShape.from_config(preset.config))


def _load(aic: dict, rate: float = 1.0) -> Load:
    return Load(rate_per_s=rate, prompt_tokens=aic["isl"], output_tokens=aic["osl"],
                tpot_target_s=aic["tpot_ms"] / 1e3, ttft_target_s=aic["ttft_ms"] / 1e3)


def _pool(role: str, layout: ParallelLayout, replicas: int, batch: int) -> Pool:
    return Pool(role=role, layout=layout, replicas=replicas, binding_limit="tpot_target", explanation="published",
                terms=(), batch_cap_per_dp_rank=batch)


def _deployment(mode: str, pools: tuple[Pool, ...]) -> Deployment:
    return Deployment(mode=mode, pools=pools, ttft_s=0.0, tpot_s=None, concurrency=None, binding_limit="tpot_target",
                      explanation="published", terms=(), feasible=True, ttft_includes_queueing=False)


def test_the_published_layout_is_the_role_tables_gpus_nodes_and_batch_caps():
    aic = _aic()
    d, a = aic["disagg"], aic["agg"]
    assert (d["replicas"], d["(p)workers"], d["(p)parallel"], d["(d)workers"], d["(d)parallel"]) == \
        ("4", "4", "tp1pp1", "1", "tp4pp1")
    assert (d["total_gpus(used)"], d["gpus/replica"], d["concurrency"]) == ("32 (32=4x8)", "8 (=4x1+1x4)", "256(=64x4)")
    spec, load = _spec(), _load(aic)
    settings = launch_settings(spec, load, checkpoint_for(repo="Qwen/Qwen3-32B", own_format=None,
                                                          weight_format="bf16", preset_id="qwen3-32b"))
    # 4 replicas × 4 prefill workers = 16 TP 1 replicas (16 GPUs, 2 nodes of 8); 4 × 1 decode
    # worker = 4 TP 4 replicas (16 GPUs, two per node: 2 nodes). 16 + 16 = 32, as published.
    split = role_table(_deployment("disaggregated", (_pool("prefill", TP1, 4 * 4, int(d["(p)bs"])),
                                                     _pool("decode", TP4, 4 * 1, int(d["(d)bs"])))),
                       settings, gpus_per_node=8)
    assert [(r.role, r.gpus, r.nodes) for r in split] == [("prefill", 16, 2), ("decode", 16, 2)]
    assert sum(r.gpus for r in split) == aic["gpus"] == 32
    decode = split[1].vllm
    assert "--tensor-parallel-size 4" in decode and "--max-num-seqs 64" in decode  # the published (d)bs
    assert "--max-model-len 3512" in decode  # ISL + OSL
    # Aggregated: 8 replicas × TP 4 = 32 GPUs on 4 nodes, each capped at the published batch 28.
    joint = role_table(_deployment("aggregated", (_pool("aggregated", TP4, int(a["replicas"]), int(a["bs"])),)),
                       settings, gpus_per_node=8)
    assert [(r.gpus, r.nodes) for r in joint] == [(32, 4)] and a["total_gpus(used)"] == "32 (32=8x4)"
    assert "--max-num-seqs 28" in joint[0].vllm


def test_the_published_batches_fit_a_tp4_workers_kv():
    # Qwen3-32B: 64 layers, 8 KV heads of 128, BF16 (2 B); at TP 4 each GPU holds 2 heads:
    #   64 × 2 (K, V) × 2 × 128 × 2 B = 65,536 B a token; ISL + OSL = 3,512 tokens: 230,162,432 B.
    # The plan's budget, vLLM's profile of one H200 at TP 4: CUDA's total of 143,160 MiB =
    # 150,109,880,320 B × 0.9 = 135,098,892,288 B (floored), less the BF16 weights 32.8e9 × 2 B ÷ 4
    # = 16.4e9 B, the sampler's peak 10 × 256 sequences × 151,936 vocabulary × 4 B = 1,555,824,640 B
    # (above the forward pass's 8,192 tokens × 2 B × (2 × 5,120 + 3 × 25,600 ÷ 4) = 482,344,960 B),
    # non-torch ⌈(0.12 + 3 × 0.027) GiB⌉ = 215,822,107 B and CUDA graphs ⌈0.4 GiB⌉ = 429,496,730 B:
    # 116,497,748,811 B ÷ 230,162,432 = 506.15 → 506 sequences, past the published batches.
    aic = _aic()
    context = aic["isl"] + aic["osl"]
    rep = replica(_spec(), TP4, context=context, prompt_tokens=aic["isl"])
    assert rep.memory.stages[0].kv_bytes_per_sequence_per_gpu == 3512 * 65_536 == 230_162_432
    assert rep.memory.stages[0].kv_budget_bytes_per_gpu == 135_098_892_288 - 16_400_000_000 - 1_555_824_640 \
        - 215_822_107 - 429_496_730 == 116_497_748_811
    assert rep.users_per_dp_rank == 506
    assert rep.users_per_dp_rank >= int(aic["disagg"]["(d)bs"]) == 64
    assert rep.users_per_dp_rank >= int(aic["agg"]["bs"]) == 28
    # The reference formula, asked for: 141 GB × 0.9 = 126.9e9 B usable − 16.4e9 B of weights:
    # 110.5e9 ÷ 230,162,432 = 480.09 → 480 sequences, past them too.
    formula = replica(_spec("formula"), TP4, context=context, prompt_tokens=aic["isl"])
    assert formula.memory.stages[0].kv_budget_bytes_per_gpu == Fraction(126_900_000_000 - 16_400_000_000)
    assert formula.users_per_dp_rank == 480


def test_one_published_request_ships_its_prompts_kv_from_tp1_to_tp4():
    # 3,000 prompt tokens, BF16: each decode rank reads its 2 heads, 65,536 B a token, from the one
    # prefill rank: 3,000 × 65,536 = 196,608,000 B of payload, in ⌈3,000 ÷ 16⌉ = 188 whole blocks
    # on the wire: 188 × 16 × 65,536 = 197,132,288 B. Four decode ranks: 788,529,152 B, all sent
    # by the prefill GPU. Descriptors: 64 layers × 2 regions (K, V) × 188 blocks = 24,064.
    aic = _aic()
    t = kv_transfer(get_preset("qwen3-32b").shape, BF16, prompt_tokens=aic["isl"], prefill_tp=1, decode_tp=4)
    assert (t.payload_bytes_per_decode_rank, t.wire_bytes_per_decode_rank) == (196_608_000, 197_132_288)
    assert t.wire_bytes_all_ranks == t.bytes_sent_per_prefill_rank == 4 * 197_132_288 == 788_529_152
    assert (t.descriptors_per_decode_rank, t.reads_per_decode_rank) == (24_064, 1)


def _published_decode(aic: dict):
    """The TP 4 decode replica with its step fixed at the published TPOT, and the load that the
    published throughput is: tokens/s/GPU × GPUs ÷ OSL requests/s."""
    tpot_s = aic["best_tpot_ms"] / 1e3
    rep = replica(_spec(), TP4, context=aic["isl"] + aic["osl"], prompt_tokens=aic["isl"])
    rep = replace(rep, fixed_s=tpot_s, per_sequence_memory_s=0.0, per_sequence_compute_s=0.0)
    rate = float(aic["disagg"]["tokens/s/gpu"]) * aic["gpus"] / aic["osl"]
    return rep, _load(aic, rate), tpot_s


# The published TPOT has two decimals: 8.07 ms is any step in [8.065, 8.075) ms.
TPOT_ROUNDING = 0.005 / 8.07


def test_littles_law_at_the_published_throughput_needs_the_published_decode_workers():
    # 913.82 tokens/s/GPU × 32 GPUs ÷ 512 = 57.114 requests/s over 4 decode workers: 14.278 each;
    # Little's law holds 14.278 × 512 × 8.07 ms = 58.996 sequences on each. At 3 workers they
    # would hold 78.66, past the published batch of 64: 4 is the fewest, as published.
    aic = _aic()
    rep, load, tpot_s = _published_decode(aic)
    assert load.rate_per_s == pytest.approx(57.114, abs=1e-3)
    fit = decode_fit(rep, load, 4, 0.0, 64)
    assert fit.ok and fit.tpot_s == tpot_s
    assert fit.n == pytest.approx(57.114 / 4 * 512 * 8.07e-3, rel=1e-4)
    assert fit.n == pytest.approx(58.996, abs=1e-3)
    replicas, _ = fewest_replicas(rep, load, 0.0, 64)
    assert replicas == 4 == int(aic["disagg"]["replicas"]) * int(aic["disagg"]["(d)workers"])
    # aiconfigurator's own rule (aiconfigurator-rate-matching.py.txt): its decode worker's rate is
    # batch ÷ (TPOT × (OSL − 1)) derated by 0.92; Little's law over OSL tokens then holds
    # 64 × 0.92 × 512 ÷ 511 = 58.995 sequences, the figure above within the TPOT's rounding.
    assert "_RATE_MATCHING_DECODE_DEGRADATION_FACTOR = 0.92" in _text("aiconfigurator-rate-matching.py.txt")
    assert fit.n == pytest.approx(64 * 0.92 * 512 / 511, rel=TPOT_ROUNDING)


@pytest.mark.xfail(strict=True, reason="missing rule: aiconfigurator derates a decode worker's rate by 0.92 "
                                       "(batch slots not all filled) and counts OSL − 1 decode steps; the "
                                       "cluster plan's Little's law fills every slot of the published batch")
def test_littles_law_fills_the_published_decode_batch():
    aic = _aic()
    rep, load, _ = _published_decode(aic)
    assert decode_fit(rep, load, 4, 0.0, 64).n == pytest.approx(int(aic["disagg"]["(d)bs"]), rel=TPOT_ROUNDING)


def _prefill_sizing(aic: dict):
    rep, load, _ = _published_decode(aic)
    ttft_s = float(aic["disagg"]["TTFT"]) / 1e3  # a prefill worker's batch of one prompt
    prefill = replace(replica(_spec(), TP1, context=aic["isl"], prompt_tokens=aic["isl"]), stage_prefill_s=ttft_s)
    return size_prefill(prefill, load, transfer_s=0.0, by_link=0), load, ttft_s


def test_the_prefill_queue_at_the_published_ttft_sizes_the_prefill_pool():
    # Each prompt takes T = 202.65 ms (the published TTFT). Within the 1,000 ms target the M/D/1
    # wait has s = 797.35 ms of slack, so ρ ≤ 2s ÷ (T + 2s) = 1,594.7 ÷ 1,797.35 = 0.88725:
    # ⌈57.114 × 0.20265 ÷ 0.88725⌉ = ⌈13.045⌉ = 14 prefill replicas (12 by throughput alone).
    aic = _aic()
    sizing, load, ttft_s = _prefill_sizing(aic)
    slack = aic["ttft_ms"] / 1e3 - ttft_s
    assert sizing.max_utilisation == pytest.approx(2 * slack / (ttft_s + 2 * slack))
    assert sizing.max_utilisation == pytest.approx(0.88725, abs=1e-5)
    assert (sizing.by_throughput, sizing.replicas, sizing.limit) == (12, 14, "ttft_target")
    assert math.ceil(load.rate_per_s * ttft_s / sizing.max_utilisation) == 14


@pytest.mark.xfail(strict=True, reason="missing rules: aiconfigurator derates prefill by 0.9 (pipeline bubbles) "
                                       "and rounds to whole xPyD replicas (4 prefill workers per decode worker: "
                                       "⌈14.28 ÷ (0.9 × 4.935)⌉ = 4); the cluster plan sizes one prefill pool "
                                       "by the M/D/1 wait and needs 14 for 16")
def test_the_prefill_pool_is_the_published_sixteen_workers():
    aic = _aic()
    sizing, _, _ = _prefill_sizing(aic)
    assert sizing.replicas == int(aic["disagg"]["replicas"]) * int(aic["disagg"]["(p)workers"]) == 16


# ---- Dynamo: Llama-3.3-70B NVFP4 on B200, vLLM, --gpu-memory-utilization 0.9 ------------------------
# Llama-3.3-70B has Llama-3.1-70B's shape (80 layers, hidden 8,192, MLP 28,672, vocabulary 128,256),
# the preset used here. The NVFP4 checkpoint keeps its linear layers at 4 bits plus one FP8 scale
# per 16 values (9/16 B a weight) and its embeddings and lm_head in BF16:
#   68,495,955,129 × 9/16 + (70.6e9 − 68,495,955,129) × 2 = 42,737,064,503 B = 39.802 GiB.
DYNAMO = "dynamo-llama-3.3-70b-nvfp4-b200-kv.md"
NVFP4 = get_precision("nvfp4")


def _dynamo() -> dict[int, tuple[int, int]]:
    """TP → (KV cache size, KV cache per GPU), as the table prints them."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", _text(DYNAMO), re.M)
    return {int(tp): (int(total), int(per_gpu)) for tp, total, per_gpu in rows}


def _per_gpu_bounds(tp: int) -> tuple[float, float]:
    """The per-GPU figure the total (whole GiB) allows: [total − ½, total + ½) ÷ TP."""
    total = _dynamo()[tp][0]
    return (total - 0.5) / tp, (total + 0.5) / tp


def _cluster_spec(budget: str = "engine") -> ClusterSpec:
    """Llama-3.3-70B (Llama-3.1-70B's shape and config) in NVFP4 on B200, BF16 KV, at 0.9."""
    preset = get_preset("llama-3.1-70b")
    return ClusterSpec(model=preset.shape, kv_precision=BF16, weight_precision=NVFP4, gpu=get_gpu("b200"),
                       estimate=choose_estimate("h200-results")[0], usable_fraction=0.9, budget=budget,
                       activation=ActivationShape.from_config(preset.config))


def _cluster_budget(tp: int, budget: str = "engine") -> Fraction:
    """The cluster plan's KV budget per GPU at TP ``tp``, bytes."""
    rep = replica(_cluster_spec(budget), ParallelLayout(tp=tp), context=1, prompt_tokens=1)
    return rep.memory.stages[0].kv_budget_bytes_per_gpu


def _cluster_budget_gib(tp: int) -> float:
    return float(_cluster_budget(tp)) / GiB


# vLLM's profile of one B200 (the plan's default budget), by hand. nvidia-smi's 183,359 MiB =
# 192,265,846,784 B × 0.9 = 173,039,262,105 B (floored). Weights ⌈42,737,064,503 ÷ TP⌉. The
# activation peak: the forward pass, 8,192 tokens × 2 B × (2 × 8,192 + 3 × 28,672 ÷ TP) =
# 1,677,721,600 B at TP 1 (973,078,528 at TP 2, 620,756,992 at TP 4), or the sampler's
# 10 × 256 × 128,256 vocabulary × 4 B = 1,313,341,440 B, whichever is larger. Non-torch
# ⌈(0.12 + 0.027 × (TP − 1)) GiB⌉, CUDA graphs ⌈0.4 GiB⌉ = 429,496,730 B.
ENGINE_KV = {
    1: 173_039_262_105 - 42_737_064_503 - 1_677_721_600 - 128_849_019 - 429_496_730,  # 119.27 GiB
    2: 173_039_262_105 - 21_368_532_252 - 1_313_341_440 - 157_840_049 - 429_496_730,  # 139.48 GiB
    4: 173_039_262_105 - 10_684_266_126 - 1_313_341_440 - 215_822_107 - 429_496_730,  # 149.38 GiB
}


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_cluster_budget_is_the_engines_profile(tp):
    # The same figure as the sizer's engine mode, to the byte, and its formula says whose it is.
    assert _cluster_budget(tp) == ENGINE_KV[tp]
    report = plan_engine(EngineRequest(model="llama-3.1-70b", gpu="b200", tp=tp, weight_dtype="nvfp4",
                                       gpu_memory_utilization=0.9))
    assert report.available_kv_bytes_per_gpu == ENGINE_KV[tp]
    rep = replica(_cluster_spec(), ParallelLayout(tp=tp), context=1, prompt_tokens=1)
    formula = next(t.formula for t in rep.memory.stages[0].terms if t.name == "KV budget per GPU")
    assert f"vLLM's memory profile at TP {tp}: 0.9 × 179.1 GiB (driver-reported)" in formula


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_formula_budget_is_the_vendors_gb_less_the_weights(tp):
    # budget="formula": 0.9 × 180 GB = 162e9 B − 42,737,064,503 B ÷ TP (111.07, 130.97, 140.92 GiB).
    assert _cluster_budget(tp, "formula") == 162_000_000_000 - Fraction(42_737_064_503, tp)
    rep = replica(_cluster_spec("formula"), ParallelLayout(tp=tp), context=1, prompt_tokens=1)
    formula = next(t.formula for t in rep.memory.stages[0].terms if t.name == "KV budget per GPU")
    assert "(reference formula: 0.9 × the vendor's 180 GB)" in formula


def test_going_from_tp2_to_tp4_frees_a_quarter_of_the_weights_on_each_gpu():
    # TP 2 → 4 frees ⌈W ÷ 2⌉ − ⌈W ÷ 4⌉ = 10,684,266,126 B of weights a GPU; the sampler's peak is
    # the same at both, and non-torch grows by 215,822,107 − 157,840,049 = 57,982,058 B:
    # 10,626,284,068 B = 9.897 GiB. The table: 578 ÷ 4 − 269 ÷ 2 = 10.0 GiB, in (9.625, 10.25)
    # by its rounding (read in GiB, as vLLM prints the figure; in 10⁹ B the share is 10.68 and
    # misses: see the folder's README).
    assert sorted(_dynamo()) == [1, 2, 4]
    low = _per_gpu_bounds(4)[0] - _per_gpu_bounds(2)[1]
    high = _per_gpu_bounds(4)[1] - _per_gpu_bounds(2)[0]
    gain = _cluster_budget(4) - _cluster_budget(2)
    assert gain == 10_684_266_126 - 57_982_058 == 10_626_284_068
    assert low < gain / GiB < high


@pytest.mark.xfail(strict=True, reason="missing rule: vLLM freed 20.75–22.25 GiB per GPU going from TP 1 to TP 2; "
                                       "the engine profile the cluster budget uses frees 20.21 (half the weights, "
                                       "19.90, plus the TP 1 forward pass's larger activation peak, 0.34, less "
                                       "0.027 more non-torch): TP 1 held 0.54–2.04 GiB more than the profile "
                                       "estimates (buffers that change with TP)")
def test_going_from_tp1_to_tp2_frees_half_of_the_weights_on_each_gpu():
    low = _per_gpu_bounds(2)[0] - _per_gpu_bounds(1)[1]
    high = _per_gpu_bounds(2)[1] - _per_gpu_bounds(1)[0]
    assert low < _cluster_budget_gib(2) - _cluster_budget_gib(1) < high


@pytest.mark.xfail(strict=True, reason="missing rule: the cluster budget is vLLM's profile (0.9 × 179.06 GiB − "
                                       "weights ÷ TP − activation peak, non-torch memory and CUDA graphs: 119.27, "
                                       "139.48, 149.38 GiB; the formula alternative's 111.07, 130.97, 140.92 miss "
                                       "too); vLLM kept 4.7–6.8 GiB more per GPU out of the KV cache here (its "
                                       "release, --max-num-batched-tokens and --max-num-seqs are not published)")
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_cluster_budget_is_the_published_kv_per_gpu(tp):
    low, high = _per_gpu_bounds(tp)
    assert low <= _cluster_budget_gib(tp) < high


@pytest.mark.xfail(strict=True, reason="missing rule: the engine profile (0.9 × 179.06 GiB − weights ÷ TP − "
                                       "activation peak, non-torch memory and CUDA graphs) gives 119.27, 139.48, "
                                       "149.38 GiB; vLLM kept 4.7–6.8 GiB more per GPU out of the KV cache here (its "
                                       "release, --max-num-batched-tokens and --max-num-seqs are not published)")
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_engine_profile_is_the_published_kv_per_gpu(tp):
    report = plan_engine(EngineRequest(model="llama-3.1-70b", gpu="b200", tp=tp, weight_dtype="nvfp4",
                                       gpu_memory_utilization=0.9))
    low, high = _per_gpu_bounds(tp)
    assert low <= report.available_kv_bytes_per_gpu / GiB < high
