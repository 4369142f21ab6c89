"""The attention-families section: a whole run on the CPU (the kernels under the Triton
interpreter, a toy shape), its bytes and targets against hand counts, the strict JSON round trip
and the loader's refusals, and the CLI's options (bad ones: one line naming the option, exit 2)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from kernels.bench import cli
from kernels.bench.families import FamilyConfig, format_families, run_families
from kernels.bench.family_records import (
    FAMILY_TARGET_SPECS, SCHEMA, FamiliesJsonError, FamilyResult, FamilyShape, WindowResult,
    compute_family_targets, families_to_json, parse_families_json, read_families_file, write_families_json,
)
from kernels.bench.records import Measurement
from kernels.tolerances import tolerance

# Batch 2 (first and last sequence differ), context 64, window 8 (W / L = 1/8: every target has
# a figure; inside one page, so window_full's table is that page), 4 query heads on 1 KV head,
# pages of 16 tokens; head dim 16 under the interpreter, 64 (the smallest the compiled kernels
# take) on a GPU, where the same run is timed as the harness times (CUDA graphs).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
D = 64 if DEVICE == "cuda" else 16
TOY = FamilyConfig(shapes=((2, 64),), windows=(8,), heads=((4, 1),), head_dim=D, block_size=16, device=DEVICE,
                   warmup_ms=1.0, rep_ms=2.0)
COMMAND = "python -m kernels.bench --families --json f.json"


@pytest.fixture(scope="module")
def report():
    return run_families(TOY, command=COMMAND)


def _strict(text: str):
    return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))


def test_a_toy_run_times_and_checks_every_contender_on_both_pools(report):
    assert report.provenance.device.startswith("cpu") == (DEVICE == "cpu") and report.provenance.command == COMMAND
    assert [r.shape.kv for r in report.results] == ["bf16", "fp8"]
    for r in report.results:
        # At head dim 16 or 64 a plain call runs the Triton kernel too (the register-dequant one takes
        # 128), so there is no full_auto row.
        assert [m.contender for m in r.measurements] == ["full", "full_sinks"]
        assert r.measurements[0].status == "ok", r.measurements[0].note
        (w,) = r.windows
        assert w.window == 8
        assert [m.contender for m in w.measurements] == ["window_full", "sliding", "sliding_sinks", "sdpa_mask"]
        assert r.atol == tolerance("paged_decode", r.shape.kv).atol and r.error_misses() == []
        for m in r.measurements + w.measurements:
            assert m.status == "ok" and m.median_ms > 0 and m.max_abs_err <= r.atol, (r.shape.kv, m)
            assert "sequences [0, 1]" in m.note
    bf16, fp8 = report.results
    # Bytes read: 2 (K, V) x 2 sequences x tokens x 1 KV head x D x bytes per value
    # (at D = 16: 8,192 over the 64 tokens, 1,024 over the window's 8).
    work = {m.contender: m.work for m in bf16.measurements + bf16.windows[0].measurements}
    assert work["full"] == work["full_sinks"] == 2 * 2 * 64 * D * 2 == 512 * D
    assert work["window_full"] == work["sliding"] == work["sliding_sinks"] == 2 * 2 * 8 * D * 2 == 64 * D
    assert work["sdpa_mask"] == 512 * D + 512 * D  # the pool's 64 tokens and the bf16 copy SDPA reads
    fp8_work = {m.contender: m.work for m in fp8.measurements + fp8.windows[0].measurements}
    assert fp8_work["full"] == 256 * D and fp8_work["sliding"] == 32 * D and fp8_work["sdpa_mask"] == 256 * D + 512 * D
    assert "dequantised FP8" in fp8.get("full").note


def test_the_runs_targets_are_its_ratios_and_the_report_shows_them(report):
    t = {x.name: x for x in report.targets}
    assert [x.name for x in report.targets] == [s.name for s in FAMILY_TARGET_SPECS]

    def ms(where, name):
        return where.get(name).median_ms

    pools = [(r, r.windows[0]) for r in report.results]
    assert t["sliding_decode_vs_window_full"].measured == pytest.approx(
        max(ms(w, "sliding") / ms(w, "window_full") for _, w in pools))
    assert t["sliding_decode_vs_full"].measured == pytest.approx(
        min(ms(r, "full") / ms(w, "sliding") for r, w in pools))
    assert t["sinks_overhead"].measured == pytest.approx(max(
        [ms(w, "sliding_sinks") / ms(w, "sliding") for _, w in pools] + [ms(r, "full_sinks") / ms(r, "full")
                                                                       for r, _ in pools]))
    text = format_families(report)
    for name in ("full", "full_sinks", "window_full", "sliding", "sliding_sinks", "sdpa_mask", "GB/s",
                 "every output within its tolerance", COMMAND):
        assert name in text
    assert sum(line.lstrip().startswith(("[MET ]", "[MISS]")) for line in text.splitlines()) == 3


def test_the_json_round_trip_is_strict(report, tmp_path):
    path = write_families_json(report, tmp_path / "f" / "families.json")
    document = _strict(path.read_text())
    assert document["schema"] == SCHEMA and document["schema_version"] == 1
    assert read_families_file(path) == report
    # A figure that is not finite is written as null and read back as "not measured".
    r = report.results[0]
    nan = dataclasses.replace(r, measurements=(dataclasses.replace(r.measurements[0], max_abs_err=float("nan")),))
    text = families_to_json(dataclasses.replace(report, results=(nan,)))
    assert _strict(text)["results"][0]["measurements"][0]["max_abs_err"] is None
    assert parse_families_json(text).results[0].measurements[0].max_abs_err is None


@pytest.mark.parametrize("edit, pattern", [
    (lambda d: d.update(schema="kv-cache-explorer.kernels.bench"), "not a families result"),
    (lambda d: d.update(schema_version=2), "schema_version 2"),
    (lambda d: d["results"][0].update(extra=1), r"results\[0\]: unknown fields \['extra'\]"),
    (lambda d: d["results"][0]["shape"].update(kv="int4"), "results\\[0\\].shape.kv"),
    (lambda d: d["results"][0]["measurements"][0].update(contender="sliding"), "contenders must be distinct"),
    (lambda d: d["results"][0]["windows"][0]["measurements"][0].update(status="fast"), "status"),
    (lambda d: d["results"][0]["windows"][0].update(window=0), "window: 0 is outside"),
    (lambda d: d["targets"][0].update(name="decode_large_tbps"), "targets must be distinct names"),
])
def test_the_loader_refuses_what_the_harness_does_not_write(report, edit, pattern):
    document = _strict(families_to_json(report))
    edit(document)
    with pytest.raises(FamiliesJsonError, match=pattern):
        parse_families_json(json.dumps(document))


def test_the_loader_refuses_nan_tokens_and_non_json():
    with pytest.raises(FamiliesJsonError, match="NaN"):
        parse_families_json('{"schema": NaN}')
    with pytest.raises(FamiliesJsonError, match="not valid JSON"):
        parse_families_json(b"{")


# ---------------------------------------------------------------------------------------------
# Targets by hand
# ---------------------------------------------------------------------------------------------


def _m(name: str, ms: float | None) -> Measurement:
    if ms is None:
        return Measurement(contender=name, status="skipped", note="over the limit")
    return Measurement(contender=name, status="ok", median_ms=ms, timing="cuda_graph", max_abs_err=1e-3)


def _result(batch, context, *, full, full_sinks, windows, kv="bf16", full_auto=None):
    shape = FamilyShape(batch=batch, context=context, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16, kv=kv)
    rows = [_m("full", full), _m("full_sinks", full_sinks)] + ([_m("full_auto", full_auto)] if full_auto else [])
    return FamilyResult(shape=shape, tolerance="paged_decode bf16", atol=2e-2, num_splits=4, measurements=tuple(rows),
                        windows=tuple(WindowResult(window=w, num_splits=2, measurements=(
                            _m("window_full", wf), _m("sliding", s), _m("sliding_sinks", ss)))
                            for w, (wf, s, ss) in windows.items()))


def test_targets_by_hand():
    results = (
        # B=1 L=8K: W=128 (1/64) and W=1024 (1/8) count for sliding_vs_full, W=4096 (1/2) does not.
        _result(1, 8192, full=0.0200, full_sinks=0.0204, windows={
            128: (0.0080, 0.0084, 0.0085),  # 0.0084 / 0.0080 = 1.05; 0.0200 / 0.0084 = 2.381
            1024: (0.0090, 0.0099, 0.0100),  # 0.0099 / 0.0090 = 1.10; 0.0200 / 0.0099 = 2.020 (the worst)
            4096: (0.0120, 0.0126, 0.0150)}),  # W/L = 1/2: 0.0200 / 0.0126 = 1.587 would be lower, not read
        # FP8 with full_auto faster than full: full attention at its fastest, 0.30 / 0.05 = 6.0
        _result(8, 32768, kv="fp8", full=0.40, full_sinks=0.412, full_auto=0.30, windows={
            1024: (0.045, 0.050, 0.0505)}),  # 0.050 / 0.045 = 1.111 (the worst); full_sinks 0.412 / 0.40 = 1.03
    )
    t = {x.name: x for x in compute_family_targets(results)}
    vs_window = t["sliding_decode_vs_window_full"]
    assert vs_window.measured == pytest.approx(0.050 / 0.045) and vs_window.met  # 1.111 <= 1.15
    assert "B=8 L=32768" in vs_window.detail and "W=1024" in vs_window.detail
    vs_full = t["sliding_decode_vs_full"]
    assert vs_full.measured == pytest.approx(0.0200 / 0.0099) and not vs_full.met  # 2.020 < 3
    assert "B=1 L=8192" in vs_full.detail and "W=1024" in vs_full.detail
    sinks = t["sinks_overhead"]
    # sliding_sinks / sliding: 1.0119, 1.0101, 1.1905 (W=4096: the worst), 1.01; full_sinks / full 1.02, 1.03
    assert sinks.measured == pytest.approx(0.0150 / 0.0126) and not sinks.met and "W=4096 sliding" in sinks.detail


def test_a_missing_figure_leaves_its_target_unmet_and_says_where():
    r = _result(1, 8192, full=0.02, full_sinks=None, windows={128: (0.008, None, 0.0085)})
    t = {x.name: x for x in compute_family_targets((r,))}
    assert all(x.measured is None and not x.met for x in t.values())
    assert "not measured at B=1 L=8192" in t["sinks_overhead"].detail
    empty = {x.name: x for x in compute_family_targets(())}
    assert "no shape with W / L <= 1/8" in empty["sliding_decode_vs_full"].detail


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_options_narrow_the_families_run():
    args = cli.build_parser().parse_args(["--families", "--batch", "1,8", "--context", "8k,32k", "--window", "128,1k",
                                          "--heads", "64:8", "--rep-ms", "5", "--no-fp8", "--eager"])
    cfg = cli._families_config(args)
    assert cfg.shapes == ((1, 8192), (1, 32768), (8, 8192), (8, 32768))
    assert cfg.windows == (128, 1024) and cfg.heads == ((64, 8),) and cfg.rep_ms == 5.0
    assert cfg.kv_formats == ("bf16",) and not cfg.cuda_graphs
    default = cli._families_config(cli.build_parser().parse_args(["--families"]))
    assert default == FamilyConfig() and {128, 1024, 4096} <= set(default.windows)
    # every default context has a window of at most 1/8 of it, for sliding_decode_vs_full
    assert all(min(default.windows) <= L / 8 for _, L in default.shapes)


@pytest.mark.parametrize("argv, named", [
    (["--families", "--window", "0"], "--window"),
    (["--families", "--window", "12x"], "--window"),
    (["--families", "--context", "4k", "--window", "4k"], "--window"),  # not shorter than the context
    (["--window", "128"], "--window"),  # the main sweep has no windows
    (["--families", "--only", "decode"], "--families"),
    (["--families", "--variant", "bf16"], "--families"),
])
def test_bad_family_arguments_are_one_line_naming_the_option(argv, named, capsys):
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{cli.PROG}: error: argument {named}"), lines
