"""Bandwidth and efficiency sources: harness run, shipped H200 results, datasheet, in that order."""

from __future__ import annotations

import json

import pytest

from kernels.bench.records import (
    TARGET_SPECS,
    BenchJsonError,
    BenchReport,
    Ceilings,
    Provenance,
    Target,
    read_bench_file,
    write_bench_json,
)
from planner.bandwidth import (
    UnusableReport,
    choose_estimate,
    datasheet_estimate,
    estimate_from_bench,
)


def _report(*, targets=(), copy_tbps=None, matmul_tflops=None, device="NVIDIA H200") -> BenchReport:
    """A typed harness report with only the figures a test names."""
    return BenchReport(
        schema="kv-cache-explorer.kernels.bench", schema_version=1,
        provenance=Provenance(device=device, sm_count=132, driver="", cuda="12.8", torch="2.11",
                              triton="3.6.0", python="3.12", date="2025-01-01", command="x"),
        ceilings=Ceilings(copy_tbps=copy_tbps, copy_buffer_bytes=2**30,
                          matmul_tflops=matmul_tflops, matmul_n=8192),
        targets=tuple(Target(name=name, measured=measured, required=1.0, met=True)
                      for name, measured in targets))


# The bench report's contract: a ``targets`` list of {name, measured, required, met}.
BENCH = _report(targets=(("decode_large_tbps", 4.2), ("decode_b1_32k_vs_cudnn", 1.05)),
                copy_tbps=4.25, matmul_tflops=672.0)


def test_datasheet_is_efficiency_one():
    estimate = datasheet_estimate()
    assert (estimate.bandwidth_efficiency, estimate.compute_efficiency) == (1.0, 1.0)
    assert "datasheet" in estimate.label


def test_efficiencies_from_a_bench_run_on_an_h200():
    estimate = estimate_from_bench(BENCH, source="h200-results")
    assert estimate.bandwidth_efficiency == pytest.approx(4.2 / 4.8)  # 0.875
    assert estimate.compute_efficiency == pytest.approx(672 / 989)  # 0.679
    assert "shipped H200 results" in estimate.label and "NVIDIA H200" in estimate.label


def test_a_measured_run_on_another_gpu_uses_that_gpus_datasheet():
    # an H100 SXM run reading 2.9 TB/s of a 3.35 TB/s datasheet
    h100_run = _report(device="NVIDIA H100", targets=(("decode_large_tbps", 2.9),))
    estimate = estimate_from_bench(h100_run, source="measured", datasheet_bandwidth_tbps=3.35,
                                   datasheet_bf16_tflops=989)
    assert estimate.bandwidth_efficiency == pytest.approx(2.9 / 3.35)
    assert estimate.compute_efficiency == 1.0  # no matmul figure in the JSON: datasheet rate
    assert "harness run on this GPU" in estimate.label


@pytest.mark.parametrize("broken, field", [
    (_report(), "targets"),
    (_report(targets=(("decode_large_tbps", -1.0),)), "decode_large_tbps"),
    (_report(targets=(("decode_large_tbps", None),)), "decode_large_tbps"),
    (_report(targets=(("other", 1.0),)), "decode_large_tbps"),
])
def test_unusable_bench_report_names_the_field(broken, field):
    with pytest.raises(UnusableReport, match=field):
        estimate_from_bench(broken, source="measured")


def test_override_of_the_bandwidth_efficiency():
    estimate = estimate_from_bench(BENCH, source="h200-results").with_bandwidth_efficiency(1.0)
    assert estimate.bandwidth_efficiency == 1.0 and estimate.source == "h200-results"
    with pytest.raises(ValueError, match="bandwidth_efficiency"):
        datasheet_estimate().with_bandwidth_efficiency(0)


def _write_valid_report(path, *, decode_tbps=4.2, matmul_tflops=672.0):
    """A complete, schema-valid harness report (kernels.bench.records) with chosen figures."""
    measured = {"decode_large_tbps": decode_tbps}
    report = BenchReport(
        schema="kv-cache-explorer.kernels.bench", schema_version=1,
        provenance=Provenance(device="NVIDIA H200", sm_count=132, driver="", cuda="12.8",
                              torch="2.11", triton="3.6.0", python="3.12", date="2025-01-01",
                              command="python -m kernels.bench --json x"),
        ceilings=Ceilings(copy_tbps=4.25, copy_buffer_bytes=2**30, matmul_tflops=matmul_tflops,
                          matmul_n=8192),
        targets=tuple(Target(name=spec.name, measured=measured.get(spec.name, 1.0),
                             required=spec.required, met=True) for spec in TARGET_SPECS),
    )
    write_bench_json(report, path)
    return path


def test_validated_harness_json_gives_the_same_efficiencies(tmp_path):
    data = read_bench_file(_write_valid_report(tmp_path / "run.json"))
    estimate = estimate_from_bench(data, source="measured")
    assert estimate.bandwidth_efficiency == pytest.approx(4.2 / 4.8)  # datasheet from the JSON
    assert estimate.compute_efficiency == pytest.approx(672 / 989)
    assert "NVIDIA H200" in estimate.label


def test_decode_not_measured_falls_back_to_the_copy_ceiling(tmp_path):
    data = read_bench_file(_write_valid_report(tmp_path / "run.json", decode_tbps=None))
    estimate = estimate_from_bench(data, source="measured")
    assert estimate.bandwidth_efficiency == pytest.approx(4.25 / 4.8)
    assert "streaming copy" in estimate.label


def test_invalid_harness_file_is_refused_with_the_loaders_reason(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(BenchJsonError, match="schema"):
        read_bench_file(bad)


def test_preference_order_falls_back_with_notes(tmp_path):
    empty = tmp_path / "none"
    estimate, notes = choose_estimate("measured", measured=None, results_dir=empty)
    assert estimate.source == "datasheet"
    assert notes == ["no harness run on this GPU yet",
                     "no shipped H200 results in benchmarks/results/"]

    shipped = tmp_path / "results"
    shipped.mkdir()
    _write_valid_report(shipped / "h200.json")
    estimate, notes = choose_estimate("measured", measured=None, results_dir=shipped)
    assert estimate.source == "h200-results" and notes == ["no harness run on this GPU yet"]

    estimate, notes = choose_estimate("measured", measured=BENCH, results_dir=shipped)
    assert estimate.source == "measured" and notes == []

    # asking for the datasheet gets the datasheet even when better sources exist
    estimate, _ = choose_estimate("datasheet", measured=BENCH, results_dir=shipped)
    assert estimate.source == "datasheet"


def test_files_that_are_not_harness_reports_are_skipped(tmp_path):
    (tmp_path / "h200.json").write_text("not json")
    (tmp_path / "prefill-tune.json").write_text(json.dumps({"device": "NVIDIA H200", "tune": []}))
    estimate, notes = choose_estimate("h200-results", results_dir=tmp_path)
    assert estimate.source == "datasheet"
    assert notes == ["no harness report among the 2 file(s) in benchmarks/results/"]
    # a valid report next to the others is found whatever its name
    _write_valid_report(tmp_path / "a-first.json")
    estimate, _ = choose_estimate("h200-results", results_dir=tmp_path)
    assert estimate.source == "h200-results"
