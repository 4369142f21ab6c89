"""One answer everywhere: the sizer page, the planner page, ``python -m sizing`` and
``python -m planner`` (table and JSON) show the same GPUs, layout, requests per replica and
launch command as :func:`sizing.answer.answer_for` for the same inputs.

The scenarios cover dense, MoE, MLA, sliding-window and Mamba / linear-attention hybrids, FP8
and INT4 KV, quantised weights, a TP that cannot hold the weights, pipeline stages and users
that need several nodes. Each also checks that the answer serves its users: replicas × the
requests one replica holds covers them, and the command's --max-num-seqs is the load.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass

import pytest

from planner.cli import main as planner_main
from sizing.answer import Answer, answer_for
from sizing.cli import main as sizing_main
from sizing.report import SizingRequest, size_deployment
from support.apptest import metric_text, open_page
from ui.answer_view import ANSWER_GPUS, ANSWER_LAYOUT, ANSWER_REQUESTS


@dataclass(frozen=True)
class Scenario:
    model: str
    kv: str
    weights: str
    context: int
    users: int
    gpu: str
    tp: int = 8


SCENARIOS = {
    "dense fp8, the 70B example": Scenario("llama-3.1-70b", "fp8", "fp8", 32_768, 100, "h100-sxm"),
    "tp 1 cannot hold bf16 70B": Scenario("llama-3.1-70b", "bf16", "bf16", 32_768, 100, "h100-sxm", tp=1),
    "moe": Scenario("qwen3-30b-a3b", "bf16", "bf16", 8192, 200, "h100-sxm", tp=1),
    "mla": Scenario("deepseek-v2-lite", "bf16", "bf16", 16_384, 64, "a100-80gb", tp=2),
    "sliding hybrid, mxfp4": Scenario("gpt-oss-20b", "bf16", "mxfp4", 32_768, 64, "h100-sxm", tp=1),
    "mamba hybrid": Scenario("nemotron-nano-9b-v2", "bf16", "bf16", 16_384, 40, "l40s", tp=1),
    "linear-attention hybrid": Scenario("qwen3-next-80b-a3b", "bf16", "bf16", 32_768, 20, "h100-sxm", tp=4),
    "int4 kv: the formula answers": Scenario("llama-3.1-8b", "int4", "bf16", 32_768, 100, "h100-sxm", tp=1),
    "awq weights": Scenario("qwen3-32b", "bf16", "awq_int4", 8192, 20, "l40s", tp=1),
    "pipeline stages for 405B": Scenario("llama-3.1-405b", "bf16", "bf16", 32_768, 10, "h100-sxm"),
    "several nodes": Scenario("llama-3.1-70b", "fp8", "fp8", 131_072, 1000, "h200"),
    "sliding gemma": Scenario("gemma-3-27b", "bf16", "bf16", 32_768, 30, "h200", tp=2),
    "small gpu": Scenario("qwen2.5-7b", "bf16", "bf16", 4096, 50, "l4", tp=1),
}


def _library(s: Scenario) -> Answer:
    return answer_for(size_deployment(SizingRequest(model=s.model, kv_dtype=s.kv, weight_dtype=s.weights,
                                                    context=s.context, users=s.users, gpu=s.gpu, tp=s.tp)))


def _cli(main, argv) -> tuple[str, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    text = out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return text, json.loads(out.getvalue())["answer"]


def _common(s: Scenario) -> list[str]:
    return ["--model", s.model, "--kv-dtype", s.kv, "--weight-dtype", s.weights, "--users", str(s.users),
            "--gpu", s.gpu, "--tp", str(s.tp)]


def _page_figures(at) -> tuple[str, str, str, list[str]]:
    commands = [c.value for c in at.code if c.value.startswith("vllm serve")]
    return (metric_text(at, ANSWER_GPUS), metric_text(at, ANSWER_LAYOUT), metric_text(at, ANSWER_REQUESTS),
            commands)


def _expected_figures(a: Answer) -> tuple[str, str, str, list[str]]:
    gpus = "none" if a.gpus is None else f"{a.gpus:,} × {a.gpu_name}"
    return gpus, a.layout, f"{a.load_per_replica:,} of {a.requests_per_replica:,}", (
        [a.vllm_command] if a.vllm_command else [])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_surface_shows_the_same_answer(name):
    s = SCENARIOS[name]
    answer = _library(s)
    # The answer serves its users, in whole replicas, with the command's cap on running requests.
    assert answer.fits and answer.replicas * answer.requests_per_replica >= s.users
    assert answer.load_per_replica == -(-s.users // answer.replicas) <= answer.requests_per_replica
    if answer.vllm_command:
        assert f"--max-num-seqs {answer.load_per_replica} " in answer.vllm_command
        assert f"--tensor-parallel-size {answer.tp} " in answer.vllm_command
    expected = answer.as_dict()

    text, sized = _cli(sizing_main, [*_common(s), "--context", str(s.context)])
    assert sized == expected and text.splitlines()[3] == f"Answer: {answer.summary}"
    text, planned = _cli(planner_main, [*_common(s), "--max-context", str(s.context)])
    assert planned == expected and text.splitlines()[0] == f"Answer: {answer.summary}"

    figures = _expected_figures(answer)
    sizer = open_page("1_sizer.py", {"model": s.model, "kv": s.kv, "w": s.weights, "ctx": str(s.context),
                                     "users": str(s.users), "gpu": s.gpu, "tp": str(s.tp), "ngpu": str(s.tp)})
    assert _page_figures(sizer) == figures
    planner = open_page("4_planner.py", {"model": s.model, "kv": s.kv, "w": s.weights, "gpu": s.gpu,
                                         "tp": str(s.tp), "maxctx": str(s.context), "users": str(s.users)})
    assert _page_figures(planner) == figures


def test_the_scenarios_cover_what_the_answer_must_handle():
    answers = {name: _library(s) for name, s in SCENARIOS.items()}
    assert answers["int4 kv: the formula answers"].basis == "formula"
    assert answers["int4 kv: the formula answers"].vllm_command is None
    assert answers["pipeline stages for 405B"].pp > 1
    assert answers["several nodes"].nodes > 1
    assert any(n.startswith("TP 1, as asked, cannot serve") for n in answers["tp 1 cannot hold bf16 70B"].notes)
    assert answers["awq weights"].vllm_command.startswith("vllm serve Qwen/Qwen3-32B-AWQ ")
    assert all(a.basis == "vllm" for n, a in answers.items() if n != "int4 kv: the formula answers")


def test_the_engine_settings_reach_every_surface():
    # vLLM before 0.21 did not subtract its CUDA graphs (0.4 GiB per GPU): one L4 replica of
    # Qwen2.5-7B at 4K holds more requests, and every surface follows the setting.
    from sizing.answer import EngineSettings

    s = Scenario("qwen2.5-7b", "bf16", "bf16", 4096, 16, "l4", tp=1)
    request = SizingRequest(model=s.model, kv_dtype=s.kv, weight_dtype=s.weights, context=s.context,
                            users=s.users, gpu=s.gpu, tp=s.tp)
    old = answer_for(size_deployment(request), EngineSettings(cuda_graphs_profiled=False, max_num_seqs=128))
    new = answer_for(size_deployment(request), EngineSettings(max_num_seqs=128))
    assert old.requests_per_replica > new.requests_per_replica
    argv = [*_common(s), "--vllm-before-0.21", "--max-num-seqs", "128"]
    assert _cli(sizing_main, [*argv, "--context", str(s.context)])[1] == old.as_dict()
    assert _cli(planner_main, [*argv, "--max-context", str(s.context)])[1] == old.as_dict()
    query = {"model": s.model, "kv": s.kv, "w": s.weights, "gpu": s.gpu, "tp": "1", "users": str(s.users),
             "old": "1", "mns": "128"}
    sizer = open_page("1_sizer.py", {**query, "ctx": str(s.context), "ngpu": "1"})
    planner = open_page("4_planner.py", {**query, "maxctx": str(s.context)})
    assert _page_figures(sizer) == _page_figures(planner) == _expected_figures(old)
