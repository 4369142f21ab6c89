"""The one answer (sizing/answer.py): whole replicas from vLLM's memory profile, pipeline
stages only where the weights need them, checkpoints the engines load, and commands that,
parsed back into engine inputs and recomputed, serve the users."""

from __future__ import annotations

import argparse
import math
import shlex

import pytest

from inputs.uploads import dumps_strict
from sizing.answer import MAX_PLANNED_UTILIZATION, EngineSettings, answer_for
from sizing.checkpoints import KNOWN_CHECKPOINTS, checkpoint_for
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import pipeline_stage
from sizing.errors import SizingError
from sizing.presets import get_preset, presets
from sizing.report import SizingRequest, size_deployment
from sizing.weights import model_weight_bytes
from sizing.precisions import get_precision
from units import GiB


def _answer(settings: EngineSettings | None = None, **request):
    return answer_for(size_deployment(SizingRequest(**request)), settings)


# ---- the rule ---------------------------------------------------------------------------------
def test_each_option_is_floor_concurrency_capped_by_max_num_seqs_and_the_cheapest_wins():
    answer = _answer(model="llama-3.1-8b", gpu="h100-sxm", context=8192, users=300)
    for option in answer.options:
        engine = plan_engine(EngineRequest(model="llama-3.1-8b", gpu="h100-sxm", tp=option.tp, max_model_len=8192))
        assert option.requests_per_replica == min(math.floor(engine.max_concurrency), 256)
        assert option.replicas == math.ceil(300 / option.requests_per_replica)
        assert option.kv_bytes_per_gpu == engine.available_kv_bytes_per_gpu
    by_tp = {o.tp: o for o in answer.options}
    # TP 8 would hold 539 requests by memory, but vLLM runs at most max_num_seqs = 256 at once.
    assert by_tp[8].requests_per_replica == 256
    assert answer.gpus == min(o.gpus for o in answer.options)
    assert max(o.tp for o in answer.options) == 8  # one node's TP; wider groups are pipeline stages
    # The replica on screen carries its share of the users: the utilisation and --max-num-seqs are for it.
    assert answer.load_per_replica == math.ceil(300 / answer.replicas)
    assert answer.engine.request.users == answer.load_per_replica


def test_refused_tp_sizes_say_why():
    answer = _answer(model="llama-3.1-70b", weight_dtype="bf16", gpu="h200", context=32_768, users=40)
    by_tp = {o.tp: o for o in answer.options}
    assert by_tp[1].replicas is None and "no room for a KV block" in by_tp[1].reason  # 141 GB of bf16 weights
    qwen = _answer(model="qwen2.5-7b", gpu="l4", context=4096, users=5)
    assert 8 not in {o.tp for o in qwen.options}  # 28 query heads do not divide over 8


def test_a_measured_budget_applies_only_at_its_own_tp():
    settings = EngineSettings(kv_budget_bytes_per_gpu=5 * GiB, measured_tp=2)
    by_tp = {o.tp: o for o in _answer(settings, model="llama-3.1-8b", context=8192, users=10, tp=2).options}
    assert by_tp[2].kv_bytes_per_gpu == 5 * GiB
    assert by_tp[1].kv_bytes_per_gpu == plan_engine(EngineRequest(
        model="llama-3.1-8b", max_model_len=8192, weights_total_bytes=16_060_000_000)).available_kv_bytes_per_gpu


def test_utilisation_above_the_cap_plans_at_the_cap_and_says_so():
    answer = _answer(EngineSettings(gpu_memory_utilization=0.99), model="llama-3.1-8b", context=8192, users=100)
    assert answer.planned_utilization == MAX_PLANNED_UTILIZATION
    assert "--gpu-memory-utilization 0.95 " in answer.vllm_command
    assert any("above 0.95" in n for n in answer.notes)
    assert answer.required_utilization <= answer.planned_utilization


@pytest.mark.parametrize(("field", "settings"), [
    ("gpu_memory_utilization", EngineSettings(gpu_memory_utilization=0.0)),
    ("gpu_memory_utilization", EngineSettings(gpu_memory_utilization=float("nan"))),
    ("max_num_seqs", EngineSettings(max_num_seqs=0)),
    ("engine_rule", EngineSettings(rule="newest")),
])
def test_absurd_settings_are_named(field, settings):
    with pytest.raises(SizingError) as info:
        _answer(settings, model="llama-3.1-8b")
    assert info.value.field == field


def test_pipeline_stages_only_when_no_tp_on_a_node_holds_the_weights():
    answer = _answer(model="llama-3.1-405b", weight_dtype="bf16", context=32_768, users=10, gpu="h100-sxm")
    # 405 B × 2 B = 810 GB; over 8 H100s that is 101 GB per GPU, more than one holds.
    assert all(o.replicas is None for o in answer.options if o.pp == 1)
    assert (answer.tp, answer.pp) == (8, 2)
    # Stage 0 holds layers 0-62 (126 // 2 = 63); the engine figures are that stage's.
    stage = pipeline_stage(get_preset("llama-3.1-405b").shape, 2, 0)
    assert answer.engine.model.layers == stage.layers == 63
    assert answer.engine.profile.weights.bytes == math.ceil(math.ceil(810_000_000_000 * 63 / 126) / 8)
    fp8 = _answer(model="llama-3.1-405b", weight_dtype="fp8", context=32_768, users=10, gpu="h100-sxm")
    assert fp8.pp == 1  # 405 GB of FP8 weights fit one node at TP 8


def test_an_engine_kv_dtype_is_needed_for_an_engine_answer():
    answer = _answer(model="llama-3.1-8b", kv_dtype="int4", users=100)
    report = size_deployment(SizingRequest(model="llama-3.1-8b", kv_dtype="int4", users=100))
    assert answer.basis == "formula" and answer.vllm_command is None
    assert (answer.tp, answer.replicas, answer.gpus) == (report.plan.best.tp, report.plan.best.replicas,
                                                         report.plan.gpus)
    assert "not int4" in answer.notes[0]


def test_the_answer_is_strict_json():
    for settings, request in ((None, dict(model="llama-3.1-8b")), (None, dict(model="llama-3.1-8b", kv_dtype="int4")),
                              (EngineSettings(gpu_memory_utilization=0.3),
                               dict(model="llama-3.1-405b", weight_dtype="bf16", gpu="l4", context=131_072))):
        text = dumps_strict(_answer(settings, **request).as_dict())
        assert "NaN" not in text and "Infinity" not in text


def test_nothing_fits_is_an_answer_not_an_error():
    # At 0.3 of an L4, TP 8 × PP 16 leaves 7.2 GB per GPU for 6.3 GB of weights and the runtime.
    answer = _answer(EngineSettings(gpu_memory_utilization=0.3), model="llama-3.1-405b", weight_dtype="bf16",
                     gpu="l4", context=131_072, users=1)
    assert not answer.fits and answer.gpus is None and answer.vllm_command is None
    assert answer.summary.startswith("No deployment on L4")


# ---- checkpoints -----------------------------------------------------------------------------
def test_checkpoints_map_each_precision_to_what_the_engine_loads():
    llama = dict(repo="meta-llama/Llama-3.1-70B", own_format=None, preset_id="llama-3.1-70b")
    assert checkpoint_for(weight_format="bf16", **llama).repo == "meta-llama/Llama-3.1-70B"
    assert checkpoint_for(weight_format="fp16", **llama).dtype == "float16"
    assert checkpoint_for(weight_format="fp8", **llama).repo == "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"
    mistral = dict(repo="mistralai/Mistral-7B-v0.1", own_format=None, preset_id="mistral-7b")
    on_the_fly = checkpoint_for(weight_format="fp8", **mistral)
    assert on_the_fly.repo == "mistralai/Mistral-7B-v0.1" and on_the_fly.quantization == "fp8"
    assert not checkpoint_for(weight_format="nvfp4", **mistral).launchable
    assert "quantised as NVFP4" in checkpoint_for(weight_format="nvfp4", **mistral).note
    deepseek = dict(repo="deepseek-ai/DeepSeek-V3", own_format="fp8_block", preset_id="deepseek-v3")
    assert checkpoint_for(weight_format="fp8_block", **deepseek).repo == "deepseek-ai/DeepSeek-V3"
    assert not checkpoint_for(weight_format="bf16", **deepseek).launchable  # no 16-bit copy is known


def test_known_checkpoints_name_catalogue_models_and_real_formats():
    ids = {p.id for p in presets()}
    for checkpoint in KNOWN_CHECKPOINTS:
        assert checkpoint.preset_id in ids
        get_precision(checkpoint.weight_format, field="weight_dtype")
        assert checkpoint.repo.count("/") == 1 and checkpoint.source.endswith(checkpoint.repo)


def test_a_precision_no_checkpoint_holds_gives_the_deployment_and_no_command():
    answer = _answer(model="mistral-7b", weight_dtype="nvfp4", context=8192, users=20)
    assert answer.fits and answer.vllm_command is None and answer.sglang_command is None
    assert any("quantised as NVFP4" in n for n in answer.notes)


# ---- the commands, parsed back -----------------------------------------------------------------
def _vllm_parser() -> argparse.ArgumentParser:
    """The ``vllm serve`` options the answer emits, as vLLM's own argument parser names them."""
    parser = argparse.ArgumentParser(prog="vllm serve", exit_on_error=False)
    parser.add_argument("model")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--quantization")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--block-size", type=int, default=16)
    return parser


def _served_model(repo: str, quantization: str | None, preset_id: str) -> tuple[str, str]:
    """(preset id, weight format) that ``repo`` loads as, from the catalogue and its checkpoints."""
    for checkpoint in KNOWN_CHECKPOINTS:
        if checkpoint.repo == repo:
            return checkpoint.preset_id, checkpoint.weight_format
    preset = get_preset(preset_id)
    assert preset.repo == repo
    return preset.id, "fp8" if quantization == "fp8" else (preset.shape.weight_format or "bf16")


COMMAND_CASES = [
    dict(model="llama-3.1-70b", kv_dtype="fp8", weight_dtype="fp8", users=100, tp=8),
    dict(model="llama-3.1-70b", kv_dtype="bf16", weight_dtype="bf16", users=100),
    dict(model="mistral-7b", kv_dtype="fp8", weight_dtype="fp8", users=300, context=8192),
    dict(model="qwen3-32b", weight_dtype="awq_int4", users=20, context=8192, gpu="l40s"),
    dict(model="gpt-oss-120b", weight_dtype="auto", users=64),
    dict(model="deepseek-v2-lite", users=64, context=16_384, gpu="a100-80gb"),
    dict(model="llama-3.1-405b", weight_dtype="bf16", users=10),
    dict(model="gemma-3-27b", users=30, gpu="h200"),
]


@pytest.mark.parametrize("case", COMMAND_CASES, ids=lambda c: f"{c['model']}-{c.get('weight_dtype', 'bf16')}")
def test_each_command_parsed_back_and_recomputed_serves_the_users(case):
    answer = _answer(**case)
    args = _vllm_parser().parse_args(shlex.split(answer.vllm_command)[2:])
    preset_id, weight_format = _served_model(args.model, args.quantization, case["model"])
    assert weight_format == answer.weight_format
    preset = get_preset(preset_id)
    shape = preset.shape
    weights = model_weight_bytes(shape, get_precision(weight_format, field="weight_dtype"),
                                 auto=case.get("weight_dtype") == "auto").bytes
    if args.pipeline_parallel_size > 1:
        stage = pipeline_stage(shape, args.pipeline_parallel_size, 0)
        weights, shape = math.ceil(weights * stage.layers / shape.layers), stage
    kv = {"auto": "bf16", "fp8": "fp8"}[args.kv_cache_dtype]
    engine = plan_engine(EngineRequest(
        model=shape, activation=ActivationShape.from_config(preset.config), gpu=case.get("gpu", "h100-sxm"),
        tp=args.tensor_parallel_size, kv_dtype=kv, weights_total_bytes=weights, max_model_len=args.max_model_len,
        block_size=args.block_size, gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs))
    # One replica started by this command holds --max-num-seqs requests of --max-model-len tokens,
    # and the answer's replicas of it hold every user.
    assert args.max_model_len == case.get("context", 32_768)
    assert math.floor(engine.max_concurrency) >= args.max_num_seqs
    assert args.max_num_seqs * answer.replicas >= case["users"]
    assert args.tensor_parallel_size * args.pipeline_parallel_size * answer.replicas == answer.gpus


def test_the_engine_holds_embeddings_and_lm_head_in_16_bit_when_the_linears_are_quantised():
    from sizing.weights import engine_weight_bytes

    shape = get_preset("llama-3.1-8b").shape
    # Llama-3.1-8B's embeddings and untied lm_head: 2 × 128,256 × 4,096 = 1,050,673,152 parameters,
    # plus 65 RMSNorm weights of 4,096; everything else is a linear layer.
    rest = 2 * 128_256 * 4096 + 65 * 4096
    assert abs((shape.params - shape.linear_params) - rest) < 0.001 * rest
    fp8 = get_precision("fp8", field="weight_dtype")
    plain, held = model_weight_bytes(shape, fp8).bytes, engine_weight_bytes(shape, fp8).bytes
    assert held - plain == shape.params - shape.linear_params  # those stay 2 B, not 1 B
    bf16 = get_precision("bf16", field="weight_dtype")
    assert engine_weight_bytes(shape, bf16) == model_weight_bytes(shape, bf16)
    answer = _answer(model="llama-3.1-8b", weight_dtype="fp8", context=8192, users=10)
    assert answer.engine.profile.weights.bytes == held  # TP 1


def test_the_engine_view_is_planned_as_the_answer_plans():
    # gpt-oss-120b in MXFP4 on one H100: the engine view at the asked TP takes the answer's
    # request (the engine's MXFP4 weights, the release's rules), so both say the same per GPU.
    from sizing.answer import EngineSettings, answer_for, engine_request_as_asked
    from sizing.engine.capacity import plan_engine
    from sizing.report import SizingRequest, size_deployment

    report = size_deployment(SizingRequest(model="gpt-oss-120b", kv_dtype="bf16", weight_dtype="mxfp4",
                                           context=32_768, users=8, gpu="h100-sxm", tp=1))
    settings = EngineSettings(gpu_memory_utilization=0.9)
    asked = engine_request_as_asked(report, settings)
    assert (asked.tp, asked.users, asked.weight_dtype, asked.gpu_memory_utilization) == (1, 8, "mxfp4", 0.9)
    engine = plan_engine(asked)
    assert engine.mxfp4_backend is not None  # the padded expert layout is charged, not the checkpoint bytes
    option = next(o for o in answer_for(report, settings).options if (o.tp, o.pp) == (1, 1))
    assert option.kv_bytes_per_gpu == engine.available_kv_bytes_per_gpu
