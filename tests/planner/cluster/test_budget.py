"""Each GPU's KV budget in the cluster plan (planner.cluster.budget): vLLM's memory profile by
default, the same figure as the sizer's answer to the byte, the reference formula when asked, and
the DP/EP approximation; figures by hand in the comments."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from hardware.gpus import get_gpu
from inputs.errors import InputError
from planner.bandwidth import datasheet_estimate
from planner.cluster import cli as cluster_cli
from planner.cluster.parallel import ParallelLayout, UsableMemory, parallel_memory, routed_expert_params
from planner.cluster.replica import ClusterSpec, budget_term, replica
from sizing.answer import EngineSettings, answer_for
from sizing.engine.memory import ActivationShape
from sizing.errors import SizingError
from sizing.precisions import get_precision
from sizing.presets import get_preset
from sizing.report import SizingRequest, size_deployment
from sizing.weights import engine_weight_bytes
from support.cluster_toy import KV_PER_TOKEN, TOY, toy_spec

BF16, FP8 = get_precision("bf16"), get_precision("fp8", field="kv_dtype")
FP8_BLOCK = get_precision("fp8_block")
# vLLM's runtime terms at the defaults (sizing.engine.memory): CUDA graphs ⌈0.4 GiB⌉, non-torch
# ⌈(0.12 + 0.027 × (TP − 1)) GiB⌉.
GRAPHS = 429_496_730
NON_TORCH = {1: 128_849_019, 8: 331_786_224}


def _catalogue_spec(model: str, gpu: str, weights, kv=BF16, **kwargs) -> ClusterSpec:
    """A catalogue model as the CLI builds it: its config's activation widths and routed experts."""
    preset = get_preset(model)
    return ClusterSpec(model=preset.shape, kv_precision=kv, weight_precision=weights, gpu=get_gpu(gpu),
                       estimate=datasheet_estimate(), activation=ActivationShape.from_config(preset.config),
                       routed_params=routed_expert_params(preset.config) if preset.shape.is_moe else None, **kwargs)


def _budget(spec: ClusterSpec, layout: ParallelLayout, stage: int = 0) -> Fraction:
    return replica(spec, layout, context=1100, prompt_tokens=1000).memory.stages[stage].kv_budget_bytes_per_gpu


def test_the_toy_on_a_gpu_without_a_driver_figure_takes_the_vendors_gb_and_says_so():
    # The custom 10 GB GPU has no driver figure: vLLM's total is the vendor's 10e9 B, × 0.9 = 9e9.
    # No config: widths assumed from the attention shape (hidden 4 × 64 = 256, MLP 896, vocabulary
    # 128,256), so the sampler's 10 × 256 × 128,256 × 4 B = 1,313,341,440 B is the peak (the forward
    # pass: 8,192 × 2 B × (2 × 256 + 3 × 896) = 52,428,800 B). Less 2e9 B of weights, non-torch and
    # CUDA graphs: 5,128,312,811 B; ⌊÷ (1,100 × 2,048 B)⌋ = 2,276 sequences (3,107 by the formula).
    rep = replica(toy_spec(), ParallelLayout(), context=1100, prompt_tokens=1000)
    assert rep.memory.stages[0].kv_budget_bytes_per_gpu == \
        9 * 10**9 - 2 * 10**9 - 1_313_341_440 - NON_TORCH[1] - GRAPHS == 5_128_312_811
    assert rep.users_per_dp_rank == 5_128_312_811 // (1100 * KV_PER_TOKEN) == 2276
    formula = budget_term(rep).formula
    assert "vLLM's memory profile at TP 1: 0.9 × 9.3 GiB (vendor GB: no driver figure known)" in formula
    assert "activation peak (widths assumed from the attention shape)" in formula
    formula_rep = replica(toy_spec(budget="formula"), ParallelLayout(), context=1100, prompt_tokens=1000)
    assert formula_rep.users_per_dp_rank == 3107
    assert "(reference formula: 0.9 × the vendor's 10 GB)" in budget_term(formula_rep).formula


@pytest.mark.parametrize("model,weights,kv", [("gpt-oss-120b", "mxfp4", "bf16"), ("llama-3.1-70b", "fp8", "fp8"),
                                               ("qwen3-30b-a3b", "bf16", "fp8")])
def test_the_budget_is_the_sizers_answer_at_every_tp(model, weights, kv):
    # The sizer's answer (engine weights, MXFP4 expert padding for gpt-oss, the config's widths)
    # and the cluster plan give one KV budget per GPU, to the byte, at every TP it tries.
    report = size_deployment(SizingRequest(model=model, kv_dtype=kv, weight_dtype=weights, context=32_768, users=8,
                                           gpu="h100-sxm", tp=1))
    spec = _catalogue_spec(model, "h100-sxm", get_precision(weights, field="weight_dtype"),
                           kv=get_precision(kv, field="kv_dtype"))
    options = answer_for(report, EngineSettings(gpu_memory_utilization=0.9)).options
    assert [(o.tp, o.pp) for o in options] == [(1, 1), (2, 1), (4, 1), (8, 1)]
    for option in options:
        assert _budget(spec, ParallelLayout(tp=option.tp)) == option.kv_bytes_per_gpu
    if weights == "mxfp4":
        assert "MXFP4 padding" in budget_term(replica(spec, ParallelLayout(tp=8), context=1, prompt_tokens=1)).formula


def test_a_pipelines_binding_stage_is_the_sizers_and_only_the_last_stage_runs_the_sampler():
    # Llama-3.1-405B in BF16 needs TP 8 × PP 2 on H100s; the answer's figure is its binding stage,
    # the last, whose peak is the sampler's 10 × 256 × 128,256 × 4 B = 1,313,341,440 B. The 126
    # layers split 63 + 63, so the stages differ by the activation peak alone: stage 0 runs no
    # sampler, and its forward pass is 8,192 × 2 B × (2 × 16,384 + 3 × 53,248 ÷ 8) = 864,026,624 B.
    report = size_deployment(SizingRequest(model="llama-3.1-405b", kv_dtype="bf16", weight_dtype="bf16",
                                           context=8192, users=8, gpu="h100-sxm", tp=8))
    option = next(o for o in answer_for(report, EngineSettings(gpu_memory_utilization=0.9)).options
                  if o.replicas is not None)
    assert (option.tp, option.pp) == (8, 2)
    spec, layout = _catalogue_spec("llama-3.1-405b", "h100-sxm", BF16), ParallelLayout(tp=8, pp=2)
    assert _budget(spec, layout, 1) == option.kv_bytes_per_gpu
    assert _budget(spec, layout, 0) - _budget(spec, layout, 1) == 1_313_341_440 - 864_026_624
    rep = replica(spec, layout, context=8192, prompt_tokens=1000)
    assert budget_term(rep).name == "KV budget per GPU (stage 1, the fewest sequences)"


def test_dp_attention_keeps_the_layouts_weights_and_the_profiles_runtime_terms_at_its_tp():
    # DeepSeek-V3 in FP8 on H200: TP 1's split (every weight on one GPU) leaves no KV block, so DP 8
    # × EP takes the profile's runtime terms at TP 1 without weights: 150,109,880,320 B × 0.9 =
    # 135,098,892,288 B, less the sampler's 10 × 256 × 129,280 × 4 B = 1,323,827,200 B (above the
    # forward pass's 8,192 × 2 B × (2 × 7,168 + 3 × 8 × 2,048) = 1,140,850,688 B), non-torch and
    # CUDA graphs: 133,216,719,339 B for weights and KV; then the layout's own weights per GPU.
    spec = _catalogue_spec("deepseek-v3", "h200", FP8_BLOCK, kv=FP8)
    dp8 = replica(spec, ParallelLayout(dp=8, ep=True), context=1100, prompt_tokens=1000)
    usable = 135_098_892_288 - 1_323_827_200 - NON_TORCH[1] - GRAPHS
    assert usable == 133_216_719_339
    assert dp8.memory.stages[0].kv_budget_bytes_per_gpu == usable - dp8.memory.weight_bytes_per_gpu
    assert "the TP split's weights leave no KV block" in budget_term(dp8).formula
    # TP 8 × EP holds the TP split's weights, so its budget is the engine's own: ⌈W ÷ 8⌉, the
    # sampler's peak, non-torch at TP 8 and CUDA graphs.
    weights = engine_weight_bytes(spec.model, FP8_BLOCK).bytes
    tp8 = replica(spec, ParallelLayout(tp=8, ep=True), context=1100, prompt_tokens=1000)
    assert tp8.memory.stages[0].kv_budget_bytes_per_gpu == \
        135_098_892_288 - math.ceil(Fraction(weights, 8)) - 1_323_827_200 - NON_TORCH[8] - GRAPHS


def test_dp_ranks_change_only_the_weights_at_one_tp():
    # Qwen3-30B-A3B on H100 at TP 2: adding DP 2 × EP splits the routed experts over 4 ranks, not
    # 2; the profile's terms are TP 2's in both, so the budgets differ by the experts' bytes alone.
    spec = _catalogue_spec("qwen3-30b-a3b", "h100-sxm", BF16)
    tp2 = replica(spec, ParallelLayout(tp=2), context=1100, prompt_tokens=1000).memory.stages[0]
    dp2 = replica(spec, ParallelLayout(tp=2, dp=2, ep=True), context=1100, prompt_tokens=1000).memory.stages[0]
    assert dp2.expert_weight_bytes_per_gpu * 2 == tp2.expert_weight_bytes_per_gpu
    assert dp2.kv_budget_bytes_per_gpu - tp2.kv_budget_bytes_per_gpu == \
        tp2.expert_weight_bytes_per_gpu - dp2.expert_weight_bytes_per_gpu


def test_a_kv_dtype_vllm_cannot_cache_takes_the_formula_and_says_why():
    spec = _catalogue_spec("llama-3.1-8b", "h100-sxm", BF16, kv=get_precision("int4", field="kv_dtype"))
    rep = replica(spec, ParallelLayout(), context=1100, prompt_tokens=1000)
    # 80 GB × 0.9 = 72e9 B − the BF16 weights.
    assert rep.memory.stages[0].kv_budget_bytes_per_gpu == 72 * 10**9 - rep.memory.weight_bytes_per_gpu
    assert "vLLM caches KV as bf16, fp16, fp32, fp8, not int4, so no engine profile" in budget_term(rep).formula
    assert spec.budget == "engine"


def test_a_gpu_whose_runtime_terms_take_everything_is_refused_naming_the_usable_fraction():
    # 1 GB × 0.9 = 0.9e9 B is less than the toy's sampler peak alone (1,313,341,440 B).
    with pytest.raises(InputError) as caught:
        replica(toy_spec(memory_gb=1), ParallelLayout(), context=1100, prompt_tokens=1000)
    assert caught.value.field == "usable_fraction" and "leaves no memory for the weights" in caught.value.message


@pytest.mark.parametrize("kwargs,field", [(dict(budget="vendor"), "budget"), (dict(budget=None), "budget"),
                                          (dict(usable_fraction=1.5), "usable_fraction"),
                                          (dict(activation={"hidden": 1}), "activation")])
def test_bad_spec_inputs_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as caught:
        toy_spec(**kwargs)
    assert caught.value.field == field


def test_a_stage_function_gives_each_stage_its_memory_and_words():
    # Two stages of one toy layer each; stage 1 is given 1 GB more than stage 0.
    def usable(stage: int, part) -> UsableMemory:
        assert part.layers == 1
        return UsableMemory(bytes=Fraction(5 * 10**9 + stage * 10**9), basis=f"given for stage {stage}")

    memory = parallel_memory(TOY, ParallelLayout(pp=2), kv_precision=BF16, weight_precision=BF16, context=1000,
                             usable_bytes_per_gpu=usable)
    first, second = memory.stages
    assert second.kv_budget_bytes_per_gpu - first.kv_budget_bytes_per_gpu == 10**9
    assert first.kv_budget_bytes_per_gpu == 5 * 10**9 - 10**9  # half the toy's 2e9 B of weights
    assert "usable (given for stage 1) −" in next(t.formula for t in second.terms if t.name == "KV budget per GPU")
    with pytest.raises(SizingError) as caught:
        parallel_memory(TOY, ParallelLayout(), kv_precision=BF16, weight_precision=BF16, context=1000,
                        usable_bytes_per_gpu=lambda stage, part: 5e9)
    assert caught.value.field == "usable_bytes_per_gpu"


def _cli(capsys, *argv: str) -> dict:
    assert cluster_cli.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_cli_takes_the_engine_budget_by_default_and_the_formula_when_asked(capsys):
    args = ("--model", "llama-3.1-70b", "--gpu", "h200", "--decode-tp", "2", "--prefill-tp", "2")
    # TP 2 on an H200, BF16: 139.8 GiB × 0.9 − 65.8 GiB of weights − 1.2 GiB activation peak −
    # 150.5 MiB non-torch − 409.6 MiB CUDA graphs = 58.3 GiB; the formula: 118.2 − 65.8 = 52.4 GiB.
    engine, formula = _cli(capsys, *args), _cli(capsys, *args, "--budget", "formula")
    for record, words, shown in ((engine, "vLLM's memory profile at TP 2", "58.3 GiB"),
                                 (formula, "reference formula: 0.9 × the vendor's 141 GB", "52.4 GiB")):
        for pool in record["disaggregated"]["pools"]:
            term = next(t for t in pool["terms"] if t["name"] == "KV budget per GPU")
            assert words in term["formula"] and term["text"].endswith(f"= {shown}")
    def held(record: dict) -> float:
        decode = next(p for p in record["disaggregated"]["pools"] if p["role"] == "decode")
        return next(t["value"] for t in decode["terms"] if t["name"] == "sequences per DP rank the KV holds")

    assert held(engine) > held(formula)  # 58.3 GiB holds more sequences than 52.4
    assert cluster_cli.main(["--json", *args, "--budget", "vendor"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("python -m planner cluster: error: argument --budget:")
