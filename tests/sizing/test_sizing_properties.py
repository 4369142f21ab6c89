"""Hypothesis properties of the sizing functions: monotone in users and context, never
negative, GPUs needed ≥ 1, TP never increases per-GPU KV, capacity consistent with blocks."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hardware.gpus import GPU_IDS, get_gpu
from sizing.kv import KVCacheSpec, gpus_needed, kv_capacity, max_context, max_users, usable_bytes, weights_bytes
from sizing.models import ModelShape
from sizing.precisions import PRECISION_NAMES, get_precision
from sizing.presets import PRESET_IDS, preset_shape
from sizing.report import SizingRequest, size_deployment


@st.composite
def shapes(draw):
    if draw(st.booleans()):
        return preset_shape(draw(st.sampled_from(PRESET_IDS)))
    kv = draw(st.integers(1, 16))
    window = draw(st.none() | st.integers(1, 10_000))
    layers = draw(st.integers(1, 128))
    return ModelShape(
        layers=layers, kv_heads=kv, q_heads=kv * draw(st.integers(1, 8)), head_dim=draw(st.integers(1, 512)),
        params=draw(st.integers(1, 10**12)), sliding_window=window,
        sliding_layers=None if window is None else tuple(range(0, layers, draw(st.integers(1, 4)))),
    )


precisions = st.builds(lambda n, g: get_precision(n, group_size=g), st.sampled_from(PRECISION_NAMES),
                       st.sampled_from([None, 32, 64, 128]))
contexts = st.integers(1, 2_000_000)
users = st.integers(1, 100_000)
gpu_ids = st.sampled_from(GPU_IDS)
fractions = st.floats(0.05, 1.0)


def total_and_count(model, precision, context, n_users, gpu, usable):
    spec = KVCacheSpec(model=model, precision=precision)
    total = weights_bytes(model.params, precision) + spec.total_bytes(context, n_users)
    return total, gpus_needed(total, usable_bytes(get_gpu(gpu), usable))


@settings(max_examples=200, deadline=None)
@given(shapes(), precisions, contexts, contexts, users, gpu_ids, fractions)
def test_monotone_in_context(model, precision, c1, c2, n_users, gpu, usable):
    lo, hi = sorted((c1, c2))
    t_lo, g_lo = total_and_count(model, precision, lo, n_users, gpu, usable)
    t_hi, g_hi = total_and_count(model, precision, hi, n_users, gpu, usable)
    assert 0 <= t_lo <= t_hi
    assert 1 <= g_lo.count <= g_hi.count
    assert g_lo.ratio <= g_hi.ratio


@settings(max_examples=200, deadline=None)
@given(shapes(), precisions, contexts, users, users, gpu_ids, fractions)
def test_monotone_in_users(model, precision, context, u1, u2, gpu, usable):
    lo, hi = sorted((u1, u2))
    t_lo, g_lo = total_and_count(model, precision, context, lo, gpu, usable)
    t_hi, g_hi = total_and_count(model, precision, context, hi, gpu, usable)
    assert 0 <= t_lo <= t_hi
    assert 1 <= g_lo.count <= g_hi.count
    assert g_lo.count >= math.ceil(g_lo.ratio)


@settings(max_examples=100, deadline=None)
@given(shapes(), precisions, st.integers(0, 6))
def test_tp_never_increases_per_gpu_kv(model, precision, log_tp):
    tp = 1 << log_tp
    assume(model.kv_lora_rank or model.kv_heads % tp == 0 or tp % model.kv_heads == 0)
    assume(model.state is None or (model.state.heads % tp == 0 and model.state.conv_channels % tp == 0))
    one = KVCacheSpec(model=model, precision=precision, tp=1)
    many = KVCacheSpec(model=model, precision=precision, tp=tp)
    assert 0 < many.bytes_per_token_per_gpu <= one.bytes_per_token_per_gpu
    assert many.bytes_per_token_all_gpus >= one.bytes_per_token  # replication never saves memory


@settings(max_examples=200, deadline=None)
@given(shapes(), precisions, st.integers(-10**12, 10**13), contexts, st.sampled_from([1, 16, 32, 128]))
def test_capacity_whole_blocks_and_reverse_questions(model, precision, budget, context, block):
    spec = KVCacheSpec(model=model, precision=precision, block_size=block)
    cap = kv_capacity(spec, budget, context)
    assert cap.blocks >= 0 and cap.tokens == cap.blocks * block
    assert cap.blocks * spec.block_bytes <= max(budget, 0) < (cap.blocks + 1) * spec.block_bytes or budget < 0
    assert cap.max_concurrency == cap.tokens / context
    n = max_users(spec, budget, context)
    assert n >= 0
    assert n * spec.sequence_bytes(context) <= max(budget, 0)
    assert (n + 1) * spec.sequence_bytes(context) > budget


@settings(max_examples=100, deadline=None)
@given(shapes(), precisions, st.integers(1, 10**13), st.integers(1, 1000))
def test_longest_context_is_tight(model, precision, budget, n_users):
    spec = KVCacheSpec(model=model, precision=precision)
    longest = max_context(spec, budget, n_users)
    if longest is None:  # every layer slides: the cache stops growing
        assert model.n_full_layers == 0
    elif longest == 0:  # not even one token fits (a recurrent state can exceed the budget alone)
        assert n_users * spec.sequence_bytes(1) > budget
    else:
        assert n_users * spec.sequence_bytes(longest) <= budget
        assert longest == 1 << 40 or n_users * spec.sequence_bytes(longest + 1) > budget


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PRESET_IDS), st.sampled_from(PRECISION_NAMES), st.integers(1, 300_000),
       st.integers(1, 2000), gpu_ids, st.sampled_from([1, 2, 4, 8]))
def test_report_never_negative(preset_id, kv, context, n_users, gpu, tp):
    model = preset_shape(preset_id)
    assume(model.kv_lora_rank or model.kv_heads % tp == 0 or tp % model.kv_heads == 0)
    r = size_deployment(SizingRequest(model=preset_id, kv_dtype=kv, context=context, users=n_users, gpu=gpu, tp=tp))
    for value in (r.per_token_bytes, r.per_user_bytes, r.kv_bytes_total, r.weights_bytes, r.total_bytes,
                  r.per_gpu_kv_bytes_per_token, r.capacity.tokens, r.max_users, r.handoff.kv_budget_bytes):
        assert value >= 0
    assert r.gpus_needed >= 1
    for series in (*r.charts.gpus_vs_context, *r.charts.gpus_vs_users):
        assert all(g >= 1 for g in series.gpus_needed)
        assert list(series.gpus_needed) == sorted(series.gpus_needed)  # monotone along x
    assert all(row.gpus.count >= 1 for row in r.table)
