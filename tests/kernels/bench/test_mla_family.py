"""The MLA section: SGLang's Triton MLA decode loaded from its own source and run on our latent
pool (under the Triton interpreter here), a toy run of the section end to end, its FLOPs, bytes
and targets against hand counts, the strict JSON round trip and the CLI's refusals."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import torch

from kernels.bench import cli
from kernels.bench.mla_family import SM_SCALE, MlaRunConfig, format_mla, run_mla
from kernels.bench.mla_records import (
    MLA_TARGET_SPECS, MlaJsonError, MlaResult, MlaShape, bound_ms, compute_mla_targets, latent_bytes, mla_flops,
    parse_mla_json, read_mla_file, write_mla_json,
)
from kernels.bench.records import Ceilings, Measurement
from kernels.bench.triton_peers import load_sglang_decode, sglang_mla_call, sglang_source_dir
from kernels.cache.mla import build_mla_cache
from kernels.reference.mla import mla_decode_reference

ROOT = Path(__file__).resolve().parents[3]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Rank 256 + rope 32 (SGLang's kernel splits its keys as 512 + 64 or 256 + 32; ours needs powers
# of two), 16 heads, 2 sequences of 64 tokens in pages of 16: every contender runs, and the first
# and last sequence differ.
TOY = MlaRunConfig(shapes=((2, 64),), heads=(16,), kv_lora_rank=256, rope_dim=32, block_size=16, device=DEVICE,
                   warmup_ms=1.0, rep_ms=2.0)
COMMAND = "python -m kernels.bench --mla --json m.json"


@pytest.fixture(scope="module")
def sglang():
    """SGLang's decode-attention source, fetched by the project's script where it is not here yet."""
    if not (sglang_source_dir() / "decode_attention.py").is_file():
        subprocess.run(["bash", "scripts/peer_sources.sh"], cwd=ROOT, check=True, timeout=600, capture_output=True)
    return load_sglang_decode(ROOT / ".peers" / "src" / "sglang")


@pytest.fixture(scope="module")
def report(sglang):
    return run_mla(TOY, command=COMMAND)


def test_sglang_peer_reads_our_pool_as_the_reference_does(sglang):
    # DeepSeek-V3's latent (its kernel's 512 + 64 split), ragged lengths over a shuffled table,
    # pages of 16; float32 values under the interpreter (its bf16 is wrong), bf16 on a GPU.
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    dtype, atol = (torch.bfloat16, 2e-2) if DEVICE == "cuda" else (torch.float32, 1e-4)
    cache = build_mla_cache([37, 80], block_size=16, dtype=dtype, device=DEVICE, shuffle=True, generator=gen)
    q_lat = torch.randn(1, 2, 16, 512, generator=gen, device=DEVICE).to(dtype)
    q_pe = torch.randn(1, 2, 16, 64, generator=gen, device=DEVICE).to(dtype)
    out = sglang_mla_call(sglang, q_lat, q_pe, cache, sm_scale=SM_SCALE, kv_splits=2)(0)
    ref = mla_decode_reference(q_lat[0], q_pe[0], cache, sm_scale=SM_SCALE)
    assert out.shape == (2, 16, 512) and float((out.float() - ref).abs().max()) < atol
    with pytest.raises(ValueError, match="kv_splits"):
        sglang_mla_call(sglang, q_lat, q_pe, cache, sm_scale=SM_SCALE, kv_splits=0)


def test_a_toy_run_times_and_checks_every_contender(report):
    assert report.provenance.command == COMMAND
    assert [r.shape.kv for r in report.results] == ["bf16", "fp8"]
    bf16, fp8 = report.results
    assert [m.contender for m in bf16.measurements] == ["mla", "mla_triton", "sglang_triton_8", "sglang_triton_16"]
    for m in bf16.measurements + fp8.measurements[:2]:
        assert m.status == "ok" and m.median_ms > 0 and m.max_abs_err <= bf16.atol, m
    # FP8: SGLang quantises the query too, so its rows say why they do not run.
    assert [m.status for m in fp8.measurements[2:]] == ["skipped", "skipped"]
    assert "query" in fp8.measurements[2].note
    # FLOPs: 2 x 2 sequences x 64 tokens x 16 heads x (288 + 256).
    assert bf16.measurements[0].work == mla_flops(bf16.shape) == 2 * 2 * 64 * 16 * 544 == 2_228_224
    text = format_mla(report)
    assert "B=2 L=64 H=16 bf16" in text and "mla_decode_vs_triton_peer" in text


def _result(ms: dict[str, float], **shape) -> MlaResult:
    s = MlaShape(**{**dict(batch=64, context=4096, n_heads=128, kv_lora_rank=512, rope_dim=64, block_size=64,
                           kv="bf16"), **shape})
    rows = tuple(Measurement(contender=n, status="ok", median_ms=t, unit="TFLOP/s") for n, t in ms.items())
    return MlaResult(shape=s, tolerance="mla_decode bf16", atol=0.02, num_splits=1, measurements=rows)


def test_bound_and_targets_follow_hand_counts():
    ceilings = Ceilings(copy_tbps=4.0, copy_buffer_bytes=1, matmul_tflops=700.0, matmul_n=8192)
    r = _result({"mla": 0.4, "sglang_triton_8": 1.2, "sglang_triton_16": 1.0})
    # 64 x 4096 x 128 x 2 x 1088 = 73.0 GFLOP: 0.1043 ms at 700 TFLOP/s; the bytes, 64 x 4096 x
    # 576 x 2 = 302 MB, take 0.0755 ms at 4 TB/s, so the matmul bounds the shape.
    assert mla_flops(r.shape) == 73_014_444_032 and latent_bytes(r.shape) == 301_989_888
    assert bound_ms(r.shape, ceilings) == pytest.approx(73_014_444_032 / 700e9)
    small = _result({"mla": 0.05, "sglang_triton_16": 0.2}, batch=1, n_heads=16)
    ceiling, peer = compute_mla_targets((r, small), ceilings)
    assert ceiling.measured == pytest.approx(0.1043063 / 0.4, rel=1e-5) and not ceiling.met  # 0.26
    assert peer.measured == pytest.approx(2.5) and peer.met  # min(1.0 / 0.4, 0.2 / 0.05 = 4.0)
    assert "H=128" in ceiling.detail and "B=64" in peer.detail
    none = compute_mla_targets((small,), ceilings)
    assert none[0].measured is None and "no 128-head" in none[0].detail


def test_json_round_trip_and_refusals(report, tmp_path):
    path = write_mla_json(report, tmp_path / "m.json")
    assert read_mla_file(path) == report
    text = path.read_text()
    data = json.loads(text)
    assert [t["name"] for t in data["targets"]] == [s.name for s in MLA_TARGET_SPECS]
    with pytest.raises(MlaJsonError, match="NaN|JSON"):
        parse_mla_json(text.replace('"wall_s": ', '"wall_s": NaN, "x": ', 1))
    data["results"][0]["measurements"][0]["contender"] = "flashmla"
    with pytest.raises(MlaJsonError, match="contenders"):
        parse_mla_json(json.dumps(data))
    with pytest.raises(MlaJsonError, match="schema"):
        parse_mla_json(text.replace("kernels.bench.mla", "kernels.bench.other"))


def test_cli_refuses_mla_with_the_families_options(capsys):
    assert cli.main(["--mla", "--families"]) == 2
    assert "--mla" in capsys.readouterr().err


def test_config_bounds():
    with pytest.raises(Exception, match="heads"):
        dataclasses.replace(TOY, heads=(0,))


def test_the_shipped_h200_run_reads_back_and_its_targets_are_its_figures():
    (path,) = sorted((ROOT / "benchmarks" / "results" / "mla").glob("mla-h200-*.json"))
    shipped = read_mla_file(path)
    assert shipped.provenance.device.startswith("NVIDIA H200") and shipped.provenance.commit
    assert compute_mla_targets(shipped.results, shipped.ceilings) == shipped.targets
    # Every output was held to its tolerance, and the peer ran wherever the pool was bf16.
    for r in shipped.results:
        mla = r.get("mla")
        assert mla.status == "ok" and mla.max_abs_err <= r.atol
        assert (r.get("sglang_triton_8").status == "ok") == (r.shape.kv == "bf16")


def test_intensity_and_the_ceilings_balance_follow_hand_counts():
    from kernels.bench.mla_records import balance_flops_per_byte, flops_per_latent_byte

    heavy = _result({"mla": 1.0}).shape
    # 2 x 128 heads x 1,088 FLOPs per token over 1,152 bytes per token = 241.8.
    assert flops_per_latent_byte(heavy) == pytest.approx(2 * 128 * 1088 / 1152)
    assert flops_per_latent_byte(dataclasses.replace(heavy, n_heads=16)) == pytest.approx(2 * 16 * 1088 / 1152)
    assert balance_flops_per_byte(Ceilings(copy_tbps=4.0, copy_buffer_bytes=1, matmul_tflops=700.0,
                                           matmul_n=8192)) == pytest.approx(175.0)
    assert balance_flops_per_byte(Ceilings(copy_tbps=None, copy_buffer_bytes=1, matmul_tflops=700.0,
                                           matmul_n=8192)) is None
