"""A catalogue model's attention layer mix (planner.layer_mix, kernels.bench.layer_mix): the
kinds, heads and bytes against hand counts from the models' configs, a whole run under the Triton interpreter (or timed, on a GPU) checked against the
float32 references, the strict JSON round trip and its refusals, and the CLI's refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from inputs.errors import InputError
from kernels.bench.layer_mix import format_layer_mixes, run_layer_mixes
from kernels.bench.layer_mix_records import LayerMixJsonError, MixRequest, parse_layer_mix_json, write_layer_mix_json
from kernels.bench.results_json import report_to_json
from planner import cli
from planner.layer_mix import check_against_catalogue, kinds_of, mix_job, read_checked_layer_mix

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _kinds(**kw):
    return {k.label: k for k in kinds_of(MixRequest(**kw))}


def test_gemma_3_27b_five_sliding_to_one_full_in_fp8():
    # config.json: 62 layers, sliding_window 1024, every 6th layer global; 16 KV heads of 128.
    kinds = _kinds(model="gemma-3-27b", batch=32, context=32768, kv="fp8")
    sliding, full = kinds["Sliding window 1,024"], kinds["Full attention"]
    assert (sliding.layers, full.layers) == (52, 10)
    assert sliding.kv_bytes_per_token == full.kv_bytes_per_token == 16 * (128 + 128) * 1 == 4096
    assert sliding.keys_seen == 1024 and full.keys_seen == 32768
    assert sliding.bytes_read == 32 * 1024 * 4096 and full.bytes_read == 32 * 32768 * 4096
    assert (sliding.q_heads, sliding.kv_heads, sliding.head_dim) == (32, 16, 128) and not sliding.sinks


def test_gpt_oss_has_sinks_on_both_kinds_and_tp_splits_the_heads():
    # gpt-oss-120b: 36 layers alternating 128-token windows and full attention, 64 query and
    # 8 KV heads of 64, a learned sink per head; at TP 4 each rank holds 16 and 2 of them.
    kinds = _kinds(model="gpt-oss-120b", batch=8, context=4096, kv="bf16", tp=4)
    assert set(kinds) == {"Sliding window 128 + sinks", "Full attention + sinks"}
    sliding = kinds["Sliding window 128 + sinks"]
    assert (sliding.layers, sliding.q_heads, sliding.kv_heads, sliding.head_dim) == (18, 16, 2, 64)
    assert sliding.kv_bytes_per_token == 2 * (64 + 64) * 2 == 512 and sliding.bytes_read == 8 * 128 * 512


def test_llama_4_chunks_and_mla_latent_and_state_layers():
    # Llama 4 Scout's chunked layers (8,192-token chunks): at 10,000 tokens the query's chunk
    # began at 8,192, so it sees 1,808 keys.
    chunk = _kinds(model="llama-4-scout", batch=1, context=10_000)["Chunked local 8,192"]
    assert chunk.layers == 36 and chunk.keys_seen == 10_000 - 8192
    # DeepSeek-V3 at TP 8: 16 of the 128 heads, the 512 + 64 latent replicated on every rank.
    mla = _kinds(model="deepseek-v3", batch=4, context=1000, tp=8)["MLA latent"]
    assert (mla.layers, mla.q_heads, mla.kv_heads, mla.head_dim, mla.latent_rank) == (61, 16, 1, 576, 512)
    assert mla.sm_scale == pytest.approx((128 + 64) ** -0.5)  # qk_nope_head_dim + qk_rope_head_dim
    assert mla.kv_bytes_per_token == 576 * 2 and mla.bytes_read == 4 * 1000 * 1152
    # Qwen3-Next's gated-delta-net layers: a state, no per-token KV, no kernel here.
    state = _kinds(model="qwen3-next-80b-a3b", batch=2, context=4096)["Recurrent state"]
    assert state.layers == 36 and state.kv_bytes_per_token == 0 and state.keys_seen == 0
    assert state.bytes_read == 2 * state.state_bytes_per_sequence > 0 and "no kernel" in state.reason


@pytest.mark.parametrize("kw, field", [
    (dict(model="gpt-oss-120b", batch=0, context=8), "batch"),
    (dict(model="gpt-oss-120b", batch=1, context=300_000), "context"),
    (dict(model="gpt-oss-120b", batch=1, context=8, kv="int4"), "kv"),
    (dict(model="gpt-oss-120b", batch=1, context=8, tp=3), "tp"),
    (dict(model="no-such-model", batch=1, context=8), "model"),
])
def test_requests_are_refused_naming_the_field(kw, field):
    with pytest.raises(InputError) as info:
        kinds_of(MixRequest(**kw))
    assert info.value.field == field


REQUESTS = (MixRequest(model="gpt-oss-20b", batch=2, context=200),
            MixRequest(model="llama-4-scout", batch=2, context=96, kv="fp8", tp=8),
            MixRequest(model="deepseek-v2-lite", batch=2, context=100),
            MixRequest(model="qwen3-next-80b-a3b", batch=1, context=64))


@pytest.fixture(scope="module")
def report():
    return run_layer_mixes(tuple(mix_job(r).as_tuple() for r in REQUESTS), device=DEVICE, rep_ms=2.0,
                           command="python -m planner layer-mix")


def test_every_attention_kind_runs_and_matches_its_reference(report):
    assert [r.request for r in report.results] == list(REQUESTS)
    for r in report.results:
        assert r.complete, [(k.label, k.reason) for k in r.kinds]
        for k in r.timed:
            m = k.measurement
            assert m.status == "ok" and m.max_abs_err is not None and m.median_ms > 0, (k.label, m)
        # The step's attention time is the kinds' time per layer x layers; the shares add up to 1.
        assert r.attention_ms == pytest.approx(sum(k.layer_ms * k.layers for k in r.timed))
        assert sum(r.share(k) for k in r.timed) == pytest.approx(1.0)
    qwen = report.results[-1]
    assert [k.label for k in qwen.timed] == ["Full attention"] and qwen.kinds[0].measurement is None
    text = format_layer_mixes(report)
    assert "gpt-oss-20b B=2 L=200" in text and "no kernel in this project" in text


def test_the_json_round_trip_is_strict_and_checks_the_catalogue(report, tmp_path):
    path = write_layer_mix_json(report, tmp_path / "mix.json")
    document = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
    assert document["schema"] == "kv-cache-explorer.kernels.bench.layer_mix"
    assert read_checked_layer_mix(path) == report
    # A result whose layer groups are not the catalogue model's is not this program's.
    r = report.results[0]
    wrong = dataclasses.replace(r, kinds=(dataclasses.replace(r.kinds[0], layers=7), *r.kinds[1:]))
    text = report_to_json(dataclasses.replace(report, results=(wrong,)))
    parse_layer_mix_json(text)  # well-formed on its own ...
    with pytest.raises(LayerMixJsonError, match="not the layer groups"):  # ... but not the catalogue's model
        parse_layer_mix_json(text, check_against_catalogue)
    text = report_to_json(report).replace('"gpt-oss-20b"', '"gpt-oss-21b"')
    with pytest.raises(LayerMixJsonError, match="gpt-oss-21b"):
        parse_layer_mix_json(text, check_against_catalogue)
    with pytest.raises(LayerMixJsonError, match="kind"):
        parse_layer_mix_json(report_to_json(report).replace('"kind": "mla"', '"kind": "latent"'))


@pytest.mark.parametrize("argv, named", [
    (["layer-mix", "--model", "gpt-oss-120b", "--tp", "3"], "--tp"),
    (["layer-mix", "--model", "nope"], "--model"),
    (["layer-mix", "--context", "1k,x"], "--context"),
    (["layer-mix", "--batch", "1000"], "--batch"),
    (["layer-mix", "--rep-ms", "0"], "--rep-ms"),
])
def test_cli_refuses_bad_layer_mix_options_in_one_line(argv, named, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]
