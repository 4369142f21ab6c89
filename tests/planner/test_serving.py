"""The benchmark predictions against their formulas, each rebuilt here from single steps."""

from __future__ import annotations

import math

import pytest

from hardware.gpus import get_gpu
from planner.serving import BenchmarkSpec, predict_benchmark
from planner.step_model import ServingSetup, step_shape, step_time
from sizing.catalogue import get_entry

H100 = get_gpu("h100-sxm")
LLAMA = step_shape(get_entry("llama-3.1-8b").config_bytes, tp=1, gpu=H100)
VLLM, SGLANG = ServingSetup(gpu=H100, engine="vllm"), ServingSetup(gpu=H100, engine="sglang")


def _prompt(setup, *, batch, tokens, input_len, context):
    rows = batch if setup.engine == "vllm" else 0
    return step_time(LLAMA, setup, decode_batch=rows, context=context, prefill_tokens=tokens,
                     prefill_pairs=tokens * input_len / 2, prefill_requests=max(1, round(tokens / input_len))).total_s


def test_one_user_burst_is_prefill_then_plain_decode():
    # One request of 16,000 prompt tokens at a 2,048-token budget: 8 chunk steps before the first
    # token, then 199 decode steps with nothing mixed in.
    spec = BenchmarkSpec(input_len=16_000, output_len=200, concurrency=1, chunk_tokens=2048)
    got = predict_benchmark(LLAMA, VLLM, spec)
    context = 16_000 + 100
    t_chunk = _prompt(VLLM, batch=0, tokens=2000, input_len=16_000, context=context)
    t_decode = step_time(LLAMA, VLLM, decode_batch=1, context=context).total_s
    assert got.ttft_s == pytest.approx(8 * t_chunk)
    assert got.tpot_s == pytest.approx(t_decode)
    assert got.output_tokens_per_s == pytest.approx(200 / (8 * t_chunk + 199 * t_decode))
    assert got.arrival == "burst"


def test_a_burst_wave_decodes_through_the_chunks_left():
    # 16 prompts of 1,024 = 16,384 tokens: 2 chunks of 8,192; requests 1–8 finish after chunk 1
    # (and decode through chunk 2), 9–16 after chunk 2: mean chunk 1.5, mean chunks left 0.5.
    spec = BenchmarkSpec(input_len=1024, output_len=101, concurrency=16)
    got = predict_benchmark(LLAMA, VLLM, spec)
    context = 1024 + 50.5
    t_chunk = _prompt(VLLM, batch=16 * 1 // 4, tokens=8192, input_len=1024, context=context)
    t_decode = step_time(LLAMA, VLLM, decode_batch=16, context=context).total_s
    assert got.ttft_s == pytest.approx(1.5 * t_chunk)
    assert got.tpot_s == pytest.approx((0.5 * t_chunk + 99.5 * t_decode) / 100)


def test_staggered_vllm_mixes_a_prompt_into_a_share_of_the_steps():
    # 32 users, 1,000-token outputs: 0.032 prompts start per step; vLLM runs each beside the decodes.
    spec = BenchmarkSpec(input_len=1000, output_len=1000, concurrency=32, lengths_vary=True)
    got = predict_benchmark(LLAMA, VLLM, spec)
    context = 1500
    t_decode = step_time(LLAMA, VLLM, decode_batch=32, context=context).total_s
    t_mixed = _prompt(VLLM, batch=32, tokens=1000, input_len=1000, context=context)
    tpot = (1 - 0.032) * t_decode + 0.032 * t_mixed
    assert got.tpot_s == pytest.approx(tpot)
    assert got.ttft_s == pytest.approx(tpot / 2 + t_mixed)
    assert got.output_tokens_per_s == pytest.approx(32 * 1000 / (got.ttft_s + 999 * tpot))


def test_staggered_sglang_adds_separate_prefill_steps():
    spec = BenchmarkSpec(input_len=1000, output_len=1000, concurrency=32, lengths_vary=True)
    got = predict_benchmark(LLAMA, SGLANG, spec)
    t_decode = step_time(LLAMA, SGLANG, decode_batch=32, context=1500).total_s
    t_prefill = _prompt(SGLANG, batch=32, tokens=1000, input_len=1000, context=1500)
    assert got.tpot_s == pytest.approx(t_decode + 0.032 * t_prefill)


def test_the_first_wave_of_a_staggered_run_is_a_burst():
    # 10 waves of 32: the first (a tenth of the requests) starts together.
    base = dict(input_len=1000, output_len=1000, concurrency=32, lengths_vary=True)
    steady = predict_benchmark(LLAMA, VLLM, BenchmarkSpec(**base))
    burst = predict_benchmark(LLAMA, VLLM, BenchmarkSpec(**base | {"lengths_vary": False}))
    mixed = predict_benchmark(LLAMA, VLLM, BenchmarkSpec(**base, num_prompts=320))
    assert mixed.ttft_s == pytest.approx(0.1 * burst.ttft_s + 0.9 * steady.ttft_s)
    assert mixed.tpot_s == pytest.approx(0.1 * burst.tpot_s + 0.9 * steady.tpot_s)


def test_poisson_runs_settle_on_littles_law():
    spec = BenchmarkSpec(input_len=512, output_len=128, request_rate=16.0)
    got = predict_benchmark(LLAMA, VLLM, spec)
    assert got.concurrency == pytest.approx(16.0 * (got.ttft_s + 127 * got.tpot_s), rel=1e-3)
    assert got.output_tokens_per_s == 16.0 * 128
    assert got.arrival == "poisson"


def test_more_users_never_shorten_the_step():
    tpots = [predict_benchmark(LLAMA, VLLM, BenchmarkSpec(input_len=1024, output_len=1024, concurrency=c,
                                                          lengths_vary=True)).tpot_s for c in (1, 8, 64, 256)]
    assert tpots == sorted(tpots) and all(math.isfinite(t) for t in tpots)


def test_a_benchmark_names_exactly_one_load():
    with pytest.raises(ValueError, match="exactly one"):
        BenchmarkSpec(input_len=10, output_len=10)
    with pytest.raises(ValueError, match="exactly one"):
        BenchmarkSpec(input_len=10, output_len=10, concurrency=1, request_rate=1.0)
    with pytest.raises(ValueError, match="output_len"):
        BenchmarkSpec(input_len=10, output_len=1, concurrency=1)


def test_a_burst_waves_p90s_are_its_requests_and_gaps():
    # 16 prompts of 1,024 in 2 chunks of 8,192: requests 1–8 get their first token after chunk 1
    # and decode one gap through chunk 2; requests 9–16 after chunk 2, with no chunk gap.
    import numpy as np

    spec = BenchmarkSpec(input_len=1024, output_len=101, concurrency=16)
    got = predict_benchmark(LLAMA, VLLM, spec)
    context = 1024 + 50.5
    t_chunk = _prompt(VLLM, batch=16 * 1 // 4, tokens=8192, input_len=1024, context=context)
    t_decode = step_time(LLAMA, VLLM, decode_batch=16, context=context).total_s
    ttfts = [t_chunk] * 8 + [2 * t_chunk] * 8
    tpots = [(t_chunk + 99 * t_decode) / 100] * 8 + [t_decode] * 8
    gaps = [t_chunk] * 8 + [t_decode] * (16 * 100 - 8)  # every inter-token gap of the wave
    assert got.p90_ttft_s == pytest.approx(np.percentile(ttfts, 90))
    assert got.p90_tpot_s == pytest.approx(np.percentile(tpots, 90))
    assert got.p90_itl_s == pytest.approx(np.percentile(gaps, 90))
    assert got.itl_s == got.tpot_s


def test_staggered_and_poisson_runs_give_no_percentiles():
    staggered = predict_benchmark(LLAMA, VLLM, BenchmarkSpec(input_len=1000, output_len=1000, concurrency=32,
                                                             lengths_vary=True))
    poisson = predict_benchmark(LLAMA, VLLM, BenchmarkSpec(input_len=512, output_len=128, request_rate=16.0))
    for got in (staggered, poisson):
        assert (got.p90_tpot_s, got.p90_ttft_s, got.p90_itl_s) == (None, None, None)


def test_the_planners_step_timing_is_the_step_model():
    from planner.serving import StepModelTiming, prefill_seconds

    timing = StepModelTiming(shape=LLAMA, setup=VLLM, chunk_tokens=2048)
    assert timing.step_s(64, 3000) == step_time(LLAMA, VLLM, decode_batch=64, context=3000).total_s
    assert timing.label == "step model: vllm, CUDA graphs, BF16 weights on H100 SXM, TP 1"
    # a 5,000-token prompt alone: 3 chunks of 1,666.7 tokens, each with a third of the 5,000² / 2 pairs
    chunk = step_time(LLAMA, VLLM, decode_batch=0, context=5000, prefill_tokens=5000 / 3,
                      prefill_pairs=5000 * 5000 / 2 / 3, prefill_requests=1).total_s
    assert timing.prefill_s(5000) == prefill_seconds(LLAMA, VLLM, prompt_tokens=5000, chunk_tokens=2048) == 3 * chunk
    assert timing.describe(64, 3000).startswith(f"{timing.step_s(64, 3000) * 1e3:.2f} ms on each GPU by the step model")
    with pytest.raises(ValueError, match="chunk_tokens"):
        StepModelTiming(shape=LLAMA, setup=VLLM, chunk_tokens=0)
