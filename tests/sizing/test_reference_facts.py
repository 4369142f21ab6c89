"""Every figure of the reference page's problems 3 and 4 that the sizer must get right.

Assumptions stated as the reference states them:
* the "Llama-style 70B": 80 layers, 64 query heads, 8 KV heads, head dim 128;
* weights "about 70 GB" at FP8: the shape is given 70e9 parameters at 1 byte each;
* 4-bit KV "= 80 KiB (+ a little for scales)": the scale overhead is switched off
  (``kv_group_size=None``) for the exact figures, and a separate test checks it is "a little".
"""

from __future__ import annotations

import math

import pytest

from hardware.gpus import get_gpu
from sizing.kv import KVCacheSpec, kv_capacity, max_users, usable_bytes
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.report import SizingRequest, size_deployment
from units import GB, GiB, KiB, MiB, format_bytes

LLAMA_70B = ModelShape(name="Llama-style 70B", layers=80, q_heads=64, kv_heads=8, head_dim=128, params=70 * 10**9)
USERS, CONTEXT = 100, 32_768


def spec(dtype: str, tp: int = 1, model: ModelShape = LLAMA_70B) -> KVCacheSpec:
    return KVCacheSpec(model=model, precision=get_precision(dtype, group_size=None), tp=tp)


def report(kv: str, gpu: str = "h100-sxm", **kw) -> object:
    return size_deployment(SizingRequest(model=LLAMA_70B, kv_dtype=kv, kv_group_size=None, weight_dtype="fp8",
                                         context=CONTEXT, users=USERS, gpu=gpu, **kw))


def test_values_per_token():
    # 2 × 80 × 8 × 128
    assert LLAMA_70B.values_per_token == 163_840


@pytest.mark.parametrize(("dtype", "kib"), [("bf16", 320), ("fp8", 160), ("int4", 80)])
def test_bytes_per_token(dtype, kib):
    assert spec(dtype).bytes_per_token == kib * KiB
    if dtype == "bf16":
        assert spec(dtype).bytes_per_token == 327_680


def test_four_bit_scales_are_a_little():
    with_scales = KVCacheSpec(model=LLAMA_70B, precision=get_precision("int4", group_size=128)).bytes_per_token
    assert 80 * KiB < with_scales < 1.05 * 80 * KiB  # "+ a little": one fp16 per 128 values is 3 %


@pytest.mark.parametrize(("dtype", "gib"), [("bf16", 10), ("fp8", 5), ("int4", 2.5)])
def test_per_user_at_32k(dtype, gib):
    assert spec(dtype).sequence_bytes(CONTEXT) == gib * GiB


@pytest.mark.parametrize(("dtype", "gib", "gb"), [("bf16", 1000, "1,073.7 GB"), ("fp8", 500, "536.9 GB"),
                                                  ("int4", 250, "268.4 GB")])
def test_hundred_users(dtype, gib, gb):
    total = spec(dtype).total_bytes(CONTEXT, USERS)
    assert total == gib * GiB
    assert format_bytes(total, "decimal", largest="GB") == gb
    assert report(dtype).kv_bytes_total == gib * GiB


def test_without_gqa():
    mha = LLAMA_70B.without_gqa()
    assert mha.kv_heads == 64
    s = spec("bf16", model=mha)
    assert s.bytes_per_token == 2.5 * MiB
    total = s.total_bytes(CONTEXT, USERS)
    assert total == 8000 * GiB
    assert round(total / GB) == 8590  # ≈ 8,590 GB
    r = report("bf16")
    assert r.without_gqa.per_token_bytes == 2.5 * MiB
    assert r.without_gqa.factor == 8  # "GQA saves 8×"


@pytest.mark.parametrize(("gpu", "gb"), [("h100-sxm", 72), ("h200", 126.9)])
def test_usable_memory(gpu, gb):
    assert usable_bytes(get_gpu(gpu), 0.9) == round(gb * GB)


@pytest.mark.parametrize(("kv", "total_gb", "h100", "h200"), [
    ("bf16", "1,143.7 GB", ("15.9", 16), ("9.0", 10)),
    ("fp8", "606.9 GB", ("8.4", 9), ("4.8", 5)),
    ("int4", "338.4 GB", ("4.7", 5), ("2.7", 3)),
])
def test_gpus_needed_table(kv, total_gb, h100, h200):
    for gpu, (ratio, count) in (("h100-sxm", h100), ("h200", h200)):
        r = report(kv, gpu)
        assert r.weights_bytes == 70 * GB
        assert format_bytes(r.total_bytes, "decimal", largest="GB") == total_gb
        assert f"{r.gpus.ratio:.1f}" == ratio
        assert r.gpus_needed == count
        assert r.gpus.label == f"{ratio} → {count}"
    # The same figures come out of the reference table rows.
    rows = {(row.kv_dtype, row.gpu_id): row for row in report(kv).table}
    assert rows[(kv, "h100-sxm")].gpus.count == h100[1]
    assert rows[(kv, "h200")].gpus.count == h200[1]


def test_tp8_per_gpu_fp8():
    s = spec("fp8", tp=8)
    assert s.bytes_per_token_per_gpu == 20 * KiB
    assert LLAMA_70B.kv_heads_per_gpu(8) == 1
    assert report("fp8", tp=8).per_gpu_kv_bytes_per_token == 20 * KiB


def test_tp_beyond_kv_heads_replicates():
    # TP 16 > 8 KV heads: still one head (20 KiB) per GPU, each head held twice.
    s = spec("fp8", tp=16)
    assert s.bytes_per_token_per_gpu == 20 * KiB
    assert LLAMA_70B.kv_replication(16) == 2
    assert s.bytes_per_token_all_gpus == 2 * 160 * KiB


def test_average_context_8k_fits_one_node():
    # "If the average live context is 8K, the FP8 cache for 100 users is 125 GiB."
    assert spec("fp8").total_bytes(8192, USERS) == 125 * GiB


def test_problem4_budget_and_fits():
    # The contiguous and paged request counts (94 at 6 %, ≈ 1,500 at 99.6 %) are the
    # fragmentation simulator's figures and are checked against it in tests/simulation.
    s = KVCacheSpec(model=LLAMA_70B, precision=get_precision("fp8"), tp=8, block_size=16)
    budget = 8 * usable_bytes(get_gpu("h100-sxm"), 0.9) - 70 * GB
    assert budget == 506 * GB  # 8 × 80 GB × 0.9 − 70 GB
    assert round(budget / GiB) == 471  # ≈ 471 GiB
    assert s.sequence_bytes_all_gpus(32_768) == 5 * GiB  # one contiguous 32K reservation
    assert max_users(s, budget, 32_768) == 94
    assert round(s.sequence_bytes_all_gpus(2048 + 8) / MiB) == 321  # (2,048 + 8) × 160 KiB ≈ 321 MiB
    assert s.block_bytes == 2.5 * MiB  # 16 × 160 KiB
    assert s.block_bytes_per_gpu == 320 * KiB  # at TP 8
    capacity = kv_capacity(s, budget, 32_768)
    assert capacity.blocks == math.floor(506 * GB / (2.5 * MiB))  # vLLM: floor(budget / block bytes)
    assert capacity.tokens == capacity.blocks * 16
    assert math.floor(capacity.max_concurrency) == 94


def test_problem4_through_the_report_and_handoff():
    r = size_deployment(SizingRequest(model=LLAMA_70B, kv_dtype="fp8", weight_dtype="fp8", tp=8, n_gpus=8,
                                      gpu="h100-sxm", context=32_768, users=100, block_size=16))
    assert r.kv_budget_bytes == 506 * GB
    assert r.max_users == 94
    assert r.handoff.kv_budget_bytes == 506 * GB
    assert r.handoff.per_token_bytes == 160 * KiB
    assert r.handoff.max_context == 32_768
    assert r.handoff.block_size == 16
    assert "506 GB" in r.handoff.summary and "471.2 GiB" in r.handoff.summary
    # A shape given directly comes from no preset; the precisions and deployment travel along.
    assert r.handoff.preset_id is None and r.handoff.weight_dtype == "fp8" and r.handoff.kv_dtype == "fp8"
    assert (r.handoff.gpu_id, r.handoff.tp, r.handoff.n_gpus) == ("h100-sxm", 8, 8)
    by_id = size_deployment(SizingRequest(model="Llama-3.1-70B", weight_dtype="int4"))
    assert by_id.handoff.preset_id == "llama-3.1-70b" and by_id.handoff.weight_dtype == "int4"


def test_worked_formula_steps():
    r = report("bf16")
    texts = [step.text for step in r.steps]
    assert texts[0].endswith("2 × 80 × 8 × 128 = 163,840 values")
    assert r.steps[1].value_bytes == 327_680 and "320 KiB" in texts[1]
    assert "10 GiB" in texts[2]
    assert "1,000 GiB" in texts[3] and "1,073.7 GB" in texts[3]
    assert "72 GB" in texts[6]
    assert r.steps[7].value == 16 and "15.9" in texts[7] and "1,143.7 GB" in texts[7]
