"""The orchestrating report (validation, charts, table, warnings, plan, hand-off), units,
precisions and the GPU catalogue, against hand calculations written here."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pandas as pd
import pytest

from hardware.gpus import get_gpu
from sizing.errors import SizingError
from sizing.models import ModelShape
from sizing.plan import plan_deployment
from sizing.precisions import get_precision
from sizing.presets import preset_shape
from sizing.report import SizingRequest, size_deployment
from units import GB, GiB, KiB, MiB, both, cdiv, format_bytes, to_unit

L70 = preset_shape("llama-3.1-70b")


# ---- units ----------------------------------------------------------------------------------
def test_units_labelled_never_mixed():
    assert format_bytes(327_680) == "320 KiB"
    assert format_bytes(327_680, "decimal") == "327.7 KB"
    assert format_bytes(1000 * GiB, "decimal", largest="GB") == "1,073.7 GB"
    assert format_bytes(2.5 * MiB) == "2.5 MiB"
    assert both(1000 * GiB) == "1,000 GiB = 1,073.7 GB"
    assert to_unit(72 * GB, "GB") == 72 and to_unit(GiB, "GB") == pytest.approx(1.073741824)
    with pytest.raises(ValueError):
        format_bytes(1, "decimal", unit="GiB")


# ---- precisions -----------------------------------------------------------------------------
def test_precision_bytes_exact():
    assert get_precision("bf16").bytes_per_value == 2
    assert get_precision("fp8").bytes_per_value == 1  # per-tensor scale: negligible
    assert get_precision("int4", group_size=None).bytes_per_value == Fraction(1, 2)
    assert get_precision("int4", group_size=64).bytes_per_value == Fraction(1, 2) + Fraction(2, 64)
    assert get_precision("int2", group_size=32).bytes_per_value == Fraction(1, 4) + Fraction(1, 16)
    assert get_precision("int8", group_size=128).bytes_per_value == 1 + Fraction(1, 64)
    with pytest.raises(SizingError) as info:
        get_precision("fp4", field="kv_dtype")
    assert info.value.field == "kv_dtype"


def test_cdiv():
    assert cdiv(33, 16) == 3 and cdiv(32, 16) == 2 and cdiv(Fraction(1, 3), 1) == 1
    # Exact for fractions: a float division would round 10**30 + 1 over 10**30 down to 1.
    assert cdiv(Fraction(10**30 + 1), Fraction(10**30)) == 2


# ---- validation names the field -------------------------------------------------------------
@pytest.mark.parametrize(("change", "field"), [
    ({"context": 0}, "context"), ({"users": -5}, "users"), ({"users": True}, "users"),
    ({"tp": 3}, "tp"), ({"tp": 0}, "tp"), ({"usable_fraction": 1.5}, "usable_fraction"),
    ({"usable_fraction": 0.0}, "usable_fraction"), ({"usable_fraction": float("nan")}, "usable_fraction"),
    ({"kv_dtype": "fp4"}, "kv_dtype"), ({"weight_dtype": 3}, "weight_dtype"), ({"gpu": "tpu"}, "gpu"),
    ({"model": "gpt-5"}, "model"), ({"block_size": 0}, "block_size"), ({"n_gpus": 12, "tp": 8}, "n_gpus"),
    ({"kv_budget_bytes": -1}, "kv_budget_bytes"), ({"context": 10**15}, "context"),
    ({"kv_group_size": -3, "kv_dtype": "int4"}, "kv_dtype_group_size"),
])
def test_bad_requests_name_the_field(change, field):
    with pytest.raises(SizingError) as info:
        size_deployment(SizingRequest(**change))
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


# ---- plan -----------------------------------------------------------------------------------
def test_plan_by_hand():
    # Llama-3.1-70B, FP8 weights (70.6 GB) and KV, 100 users × 32K on H100 SXM (72 GB usable).
    # TP 4: weights 17.65 GB/GPU, KV 2 heads/GPU = 40 KiB/token → 1.25 GiB per user per GPU;
    # (72 − 17.65) GB ÷ 1.342 GB = 40 users → 3 replicas → 12 GPUs. TP 8: 63.175 GB ÷ 0.671 GB = 94
    # users → 2 replicas → 16 GPUs. TP 2: 37 GB ÷ 2.68 GB = 13 users → 8 replicas → 16 GPUs.
    plan = plan_deployment(model=L70, kv_precision=get_precision("fp8"), weights_bytes=70_600_000_000,
                           gpu=get_gpu("h100-sxm"), context=32_768, users=100)
    options = {o.tp: o for o in plan.options}
    assert options[4].users_per_replica == 40 and options[4].replicas == 3
    assert options[8].users_per_replica == 94 and options[8].gpus == 16
    assert options[2].users_per_replica == 13
    assert options[1].fits is False  # 70.6 GB of weights leave 1.4 GB: not one 5 GiB user
    assert options[16].kv_heads_per_gpu == 1 and options[16].kv_replication == 2 and options[16].spans_nodes
    assert plan.best.tp == 4 and plan.gpus == 12 and plan.nodes == 2
    assert [o.tp for o in plan.options] == [1, 2, 4, 8, 16, 32, 64]


def test_plan_nothing_fits():
    huge = replace(L70, params=10**14)
    plan = plan_deployment(model=huge, kv_precision=get_precision("bf16"), weights_bytes=2 * 10**14,
                           gpu=get_gpu("l4"), context=1024, users=1)
    assert plan.best is None and plan.gpus is None and "does not fit" in plan.summary


# ---- report ---------------------------------------------------------------------------------
def test_report_table_dataframe_and_csv():
    r = size_deployment(SizingRequest(model="llama-3.1-70b", kv_dtype="fp8", gpu="a100-80gb"))
    frame = pd.DataFrame(r.table_records())
    # BF16, FP8, INT4 × H100 SXM, H200, A100 80GB (the chosen GPU is added).
    assert len(frame) == 9
    assert set(frame["gpu"]) == {"H100 SXM", "H200 SXM", "A100 80GB SXM"}
    assert {"kv_all_users_GB", "kv_all_users_GiB", "total_GB", "gpus_needed"} <= set(frame.columns)
    csv_text = r.table_csv()
    assert csv_text.splitlines()[0].startswith("kv_precision,gpu,")
    assert len(csv_text.splitlines()) == 10


def test_report_charts():
    r = size_deployment(SizingRequest(model="llama-3.1-70b", kv_dtype="bf16", weight_dtype="fp8", users=100))
    mem = r.charts.memory_vs_gpus
    assert mem.kv_bytes == r.kv_bytes_total and mem.weights_bytes == r.weights_bytes
    assert mem.gpu_counts[0] == 1 and mem.gpu_counts[-1] > r.gpus_needed
    assert mem.total_memory_bytes[0] == 80 * GB and mem.usable_bytes[0] == 72 * GB
    assert [s.kv_dtype for s in r.charts.gpus_vs_context] == ["bf16", "fp8", "int4"]
    ctx = r.charts.gpus_vs_context[0]
    assert 32_768 in ctx.x and ctx.gpus_needed[ctx.x.index(32_768)] == r.gpus_needed
    by_users = r.charts.gpus_vs_users[0]
    assert 100 in by_users.x and by_users.gpus_needed[by_users.x.index(100)] == r.gpus_needed


def test_without_gqa_for_mla():
    r = size_deployment(SizingRequest(model="deepseek-v3", kv_dtype="bf16", context=4096, users=1))
    # MHA equivalent: 128 heads × (K 192 + V 128) per layer against the 576-value latent.
    assert r.without_gqa.per_token_bytes == 61 * 128 * (192 + 128) * 2
    assert r.without_gqa.factor == pytest.approx(128 * 320 / 576)


def test_warnings():
    # Query heads typed as KV heads for a known GQA shape (Llama-3.1-70B: 64 q, 8 KV).
    mistaken = ModelShape(layers=80, q_heads=64, kv_heads=64, head_dim=128, params=70 * 10**9)
    codes = {w.code: w for w in size_deployment(SizingRequest(model=mistaken)).warnings}
    assert codes["query_heads_as_kv_heads"].field == "kv_heads" and "8×" in codes["query_heads_as_kv_heads"].message
    codes = {w.code for w in size_deployment(SizingRequest(model="llama-3.1-70b", tp=16, usable_fraction=1.0,
                                                           context=200_000)).warnings}
    assert {"tp_beyond_kv_heads", "usable_fraction_full", "context_beyond_model", "tp_spans_nodes"} <= codes
    assert "weights_exceed_gpu" in {w.code for w in size_deployment(SizingRequest(model="llama-3.1-70b")).warnings}
    clean = size_deployment(SizingRequest(model="llama-3.1-8b", tp=8, context=8192, users=10))
    assert clean.warnings == ()
    jetson = size_deployment(SizingRequest(model="llama-3.1-8b", gpu="jetson-agx-orin-64gb", context=4096, users=1))
    assert "shared_memory" in {w.code for w in jetson.warnings}
    # Gemma-3-27B's sliding layers keep 1,024 tokens: at a 1,024-token context they hold all of it.
    short = {w.code: w for w in size_deployment(SizingRequest(model="gemma-3-27b", context=1024, users=1)).warnings}
    assert short["window_beyond_context"].field == "context" and "1,024-token window" in short["window_beyond_context"].message
    long = size_deployment(SizingRequest(model="gemma-3-27b", context=1025, users=1))
    assert "window_beyond_context" not in {w.code for w in long.warnings}


def test_given_budget_and_json():
    r = size_deployment(SizingRequest(model="llama-3.1-70b", kv_dtype="fp8", kv_budget_bytes=100 * GiB,
                                      block_size=16, context=32_768))
    # 100 GiB ÷ (16 × 160 KiB = 2.5 MiB) = 40,960 blocks = 655,360 tokens = 20 × 32K.
    assert r.capacity.blocks == 40_960 and r.capacity.tokens == 655_360 and r.capacity.max_concurrency == 20
    assert r.kv_budget_given and r.max_users == 20
    out = json.loads(json.dumps(r.to_dict()))
    assert out["kv_capacity_tokens"] == 655_360 and out["per_token_bytes"] == 160 * KiB


def test_report_is_frozen():
    r = size_deployment(SizingRequest())
    with pytest.raises(AttributeError):
        r.users = 5  # type: ignore[misc]
