"""The engine's MXFP4 expert padding by MoE backend and GPU, and "GPU KV cache size" by the vLLM
release engine mode models (``EngineRequest.vllm_version``, ``--vllm-version``)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sizing.cli import main
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.groups import DEFAULT_VLLM_VERSION, vllm_release
from sizing.engine.mxfp4 import ExpertShape, Mxfp4Backend, default_backend, padded_sizes
from sizing.errors import SizingError
from sizing.models import ModelShape
from sizing.precisions import get_precision
from sizing.presets import get_preset
from sizing.weights import model_weight_bytes
from tests.sizing.engine.test_cited_logs import QWEN36_35B_VLLM
from units import GiB

GPT_OSS_120B = ExpertShape(layers=36, experts=128, hidden=2880, intermediate=2880)
CHECKPOINT_EXPERT = (5760 + 2880) * (1440 + 90 + 2)  # w13 + w2 rows × (FP4 pairs + scales + bf16 bias)


@pytest.mark.parametrize(("gpu", "backend"), [
    ("a100-80gb", Mxfp4Backend.MARLIN), ("a10", Mxfp4Backend.MARLIN), ("l40s", Mxfp4Backend.MARLIN),
    ("rtx-4090", Mxfp4Backend.MARLIN), ("rtx-5090", Mxfp4Backend.MARLIN), ("h100-sxm", Mxfp4Backend.TRITON),
    ("h200", Mxfp4Backend.TRITON), ("b200", Mxfp4Backend.FLASHINFER_TRTLLM), ("mi300x", Mxfp4Backend.ROCM),
    ("custom", None)])
def test_the_backend_vllm_picks_by_compute_capability(gpu, backend):
    # SM 8.x / 12.x: neither FlashInfer's MXFP4 kernels nor triton_kernels (9.0 ≤ cc < 11.0) run.
    assert default_backend(gpu) is backend


def test_padded_sizes_per_backend():
    assert padded_sizes(Mxfp4Backend.MARLIN, 2880, 2880) == (3072, 2944)
    assert padded_sizes(Mxfp4Backend.FLASHINFER_TRTLLM, 2880, 2880) == (3072, 3072)
    assert padded_sizes(Mxfp4Backend.FLASHINFER_CUTLASS, 2880, 2880) == (2944, 2944)
    assert padded_sizes(Mxfp4Backend.ROCM, 2880, 1440) == (3072, 1536)
    assert padded_sizes(Mxfp4Backend.TRITON, 2880, 2880) == (2880, 2880)  # 2,880 = 45 × 64


def test_marlin_at_tp2_pads_each_ranks_intermediate():
    # TP 2: 1,440 intermediate a rank → 1,536; hidden 3,072. One expert: w13 3,072 × (1,536 + 96 + 2),
    # w2 3,072 × (768 + 48 + 2) = 7,532,544 B, against half the checkpoint's 13,236,480.
    per_expert = 3072 * 1634 + 3072 * 818 - CHECKPOINT_EXPERT // 2
    assert GPT_OSS_120B.padding_bytes_per_gpu(Mxfp4Backend.MARLIN, 2) == per_expert * 128 * 36
    assert round(per_expert * 128 * 36 / GiB, 2) == 3.92


def test_triton_on_hopper_pads_into_triton_kernels_layouts():
    # Values: the FP4 pairs along the scaled axis to 64 bytes, the other axis to 256 (w13 1,472 ×
    # 5,888, w2 1,472 × 3,072); scales: rows to 256, columns to 2 (5,888 × 90, 3,072 × 90); fp32 biases.
    per_expert = (1472 * 5888 + 5888 * 90 + 5760 * 4) + (1472 * 3072 + 3072 * 90 + 2880 * 4) - CHECKPOINT_EXPERT
    extra = GPT_OSS_120B.padding_bytes_per_gpu(Mxfp4Backend.TRITON, 1)
    assert extra == per_expert * 128 * 36 and round(extra / GiB, 2) == 3.41
    # vLLM 0.14.1 on one H100 ("Using Triton backend") logged "Model loading took 64.38 GiB"
    # (https://github.com/vllm-project/vllm/issues/33155): 60.68 + 3.41 = 64.09, within 0.5 %.
    checkpoint = model_weight_bytes(get_preset("gpt-oss-120b").shape, get_precision("mxfp4")).bytes
    assert (checkpoint + extra) / GiB == pytest.approx(64.38, rel=0.005)


def test_trtllm_on_blackwell_pads_both_to_256():
    # 3,072 × 3,072 with fp32 biases: w13 6,144 × (1,536 + 96 + 4), w2 3,072 × (1,536 + 96 + 4).
    per_expert = 6144 * 1636 + 3072 * 1636 - CHECKPOINT_EXPERT
    assert GPT_OSS_120B.padding_bytes_per_gpu(Mxfp4Backend.FLASHINFER_TRTLLM, 1) == per_expert * 128 * 36


def _gpt_oss(**kw) -> EngineRequest:
    checkpoint = model_weight_bytes(get_preset("gpt-oss-20b").shape, get_precision("mxfp4")).bytes
    return EngineRequest(**{"model": "gpt-oss-20b", "gpu": "a100-80gb", "weight_dtype": "mxfp4",
                            "weights_total_bytes": checkpoint, "max_model_len": 8192, **kw})


def test_the_engine_adds_the_padding_only_to_mxfp4_experts():
    padded = plan_engine(_gpt_oss())
    plain = plan_engine(_gpt_oss(weight_dtype="bf16"))
    assert padded.mxfp4_backend is Mxfp4Backend.MARLIN and plain.mxfp4_backend is None
    assert padded.profile.weights.bytes - plain.profile.weights.bytes == (
        (5888 * 1634 + 3072 * 1566) - CHECKPOINT_EXPERT) * 32 * 24
    assert "MXFP4 expert padding (marlin: hidden 2,880 → 3,072" in padded.profile.weights.basis
    assert padded.to_dict()["engine_mxfp4_backend"] == "marlin"
    # A measured weight figure is taken as it is.
    measured = plan_engine(_gpt_oss(weights_bytes_per_gpu=13 * GiB))
    assert measured.profile.weights.bytes == 13 * GiB and measured.mxfp4_backend is None


def test_an_unknown_gpu_or_shape_leaves_the_padding_out_and_says_so():
    from hardware.gpus import custom_gpu

    report = plan_engine(_gpt_oss(gpu=custom_gpu(80)))
    assert report.mxfp4_backend is None and any("compute capability of Custom GPU" in n for n in report.notes)
    named = plan_engine(_gpt_oss(gpu=custom_gpu(80), mxfp4_backend="marlin"))
    assert named.mxfp4_backend is Mxfp4Backend.MARLIN
    moe = ModelShape(name="moe", layers=4, q_heads=8, kv_heads=2, head_dim=64, params=10**9, num_experts=8,
                     experts_per_token=2)
    assumed = plan_engine(EngineRequest(model=moe, gpu="a100-80gb", weight_dtype="mxfp4", max_model_len=4096))
    assert assumed.mxfp4_backend is None and any("expert widths are not known" in n for n in assumed.notes)


@pytest.mark.parametrize("bad", ["marlin2", "", None, 3])
def test_a_bad_backend_names_the_field(bad):
    with pytest.raises(SizingError) as info:
        plan_engine(_gpt_oss(mxfp4_backend=bad))
    assert info.value.field == "mxfp4_backend"


# ---- "GPU KV cache size" by the release modelled ------------------------------------------------

def _qwen36(version: str):
    # The cited Qwen3.6-35B log's pool: 5.98 GiB, fp8 KV, prefix caching's two state pages.
    return plan_engine(EngineRequest(model=QWEN36_35B_VLLM, kv_dtype="fp8", max_model_len=131_072,
                                     kv_budget_bytes_per_gpu=round(5.98 * GiB), vllm_version=version))


def test_engine_tokens_follow_the_release():
    # 299 blocks; a request holds cdiv(131,072, 2,096) = 63 attention blocks + 3 state groups × 1
    # page ("none" mode: plan_engine keeps one) = 66: 0.24 prints int(299 / 66 × 131,072) =
    # int(593,795.8…) = 593,795; 0.23 prints 299 // 4 groups × 2,096 = 155,104.
    new, old = _qwen36("0.24.0"), _qwen36("0.23.1")
    assert new.num_blocks == old.num_blocks == 299 and new.blocks_per_request == 66
    assert new.kv_cache_tokens == int(299 / 66 * 131_072) == 593_795
    assert old.kv_cache_tokens == 299 // 4 * 2096 == 155_104
    assert _qwen36(DEFAULT_VLLM_VERSION).kv_cache_tokens == 593_795 and vllm_release(DEFAULT_VLLM_VERSION) >= (0, 24)


def test_a_release_before_0_21_leaves_the_cuda_graphs_out():
    new = plan_engine(EngineRequest(model="llama-3.1-8b", max_model_len=8192))
    old = plan_engine(EngineRequest(model="llama-3.1-8b", max_model_len=8192, vllm_version="0.19.0"))
    assert old.profile.cuda_graph.bytes == 0 and new.profile.cuda_graph.bytes == round(0.4 * GiB)


@pytest.mark.parametrize("bad", ["0.1.dev7548", "banana", "9" * 80])
def test_a_bad_version_names_the_field(bad):
    with pytest.raises(SizingError) as info:
        plan_engine(EngineRequest(model="llama-3.1-8b", vllm_version=bad))
    assert info.value.field == "vllm_version"


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_cli_vllm_version_and_mxfp4_backend():
    base = ["--json", "--engine", "vllm", "--model", "gemma-2-9b", "--gpu", "h200", "--context", "32768"]
    reports = {v: json.loads(_cli([*base, "--vllm-version", v])[1]) for v in ("0.23.0", "0.24.0")}
    groups = reports["0.23.0"]["kv_cache_groups"]
    blocks = reports["0.24.0"]["engine_num_blocks"]
    per_request = reports["0.24.0"]["engine_blocks_per_request"]
    assert reports["0.23.0"]["engine_kv_cache_tokens"] == blocks // len(groups["groups"]) * 16
    assert reports["0.24.0"]["engine_kv_cache_tokens"] == int(blocks / per_request * 32_768)
    assert reports["0.24.0"]["engine_vllm_version"] == "0.24.0"
    code, out, _ = _cli(["--json", "--engine", "vllm", "--model", "gpt-oss-20b", "--gpu", "h100-sxm",
                         "--context", "8192", "--weight-dtype", "mxfp4", "--mxfp4-backend", "marlin"])
    assert code == 0 and json.loads(out)["engine_mxfp4_backend"] == "marlin"


@pytest.mark.parametrize(("option", "value"), [("--vllm-version", "0.1.dev7548"), ("--vllm-version", "x" * 100),
                                               ("--mxfp4-backend", "cutlass")])
def test_cli_bad_version_or_backend_is_one_line_naming_the_option(option, value):
    code, out, err = _cli(["--engine", "vllm", option, value])
    assert code == 2 and out == "" and option in err and len(err.strip().splitlines()) == 1
