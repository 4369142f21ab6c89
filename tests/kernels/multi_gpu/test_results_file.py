"""The multi-GPU results file: a whole harness run on two gloo processes (CPU, toy sizes, the
reference attention), its predictions from the planner, the targets, and the writer/reader
round trip with strict JSON; the formulas against nccl-tests' definitions and hand counts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import timedelta
from fractions import Fraction

import pytest

from hardware.links import get_link
from kernels.bench.records import DecodeShape, Target
from kernels.multi_gpu.bench import PROMPTS, BenchConfig, TransferModel, run_bench
from kernels.multi_gpu.cli import build_parser, config_from_args, gpu_provenance, main
from kernels.multi_gpu.records import (
    SCHEMA, TRANSFER_METHODS, AllReducePoint, MultiGpuJsonError, Prediction, TPStepResult, TransferResult,
    bus_bandwidth_gbps, compute_targets, parse_report, read_report, report_to_json, ring_bytes_per_rank,
    with_predictions, write_report,
)
from kernels.multi_gpu.transfer import METHODS
from planner.cluster.measured import PlannerPredictor
from support.paths import ROOT

SHAPE = DecodeShape(batch=2, context=33, n_q_heads=4, n_kv_heads=2, head_dim=16, block_size=16)
TOY = BenchConfig(decode_shapes=(SHAPE,), tp_sizes=(1, 2),
                  transfer_models=(TransferModel(model="", layout="full", layers=2, n_kv_heads=2, head_dim=16),
                                   TransferModel(model="", layout="mla", layers=2, n_kv_heads=1, head_dim=24)),
                  prompts=(40,), block_sizes=(16,), attention="reference", device="cpu",
                  warmup=1, iters=2, trials=1)
# A collective that waits 20 s is a hang at these sizes (the run takes ~1 s): fail, don't stall.
LIMITS = dict(timeout=timedelta(seconds=20), deadline_s=45.0)
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def report():
    provenance = gpu_provenance("python -m kernels.multi_gpu --json run.json", gpu_count=0, backend="gloo")
    return run_bench(TOY, world_size=2, provenance=provenance, predictor=PlannerPredictor("h200", "nvlink4"),
                     start_method="fork", **LIMITS)


def _strict(text: str):
    return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))


def test_a_run_holds_every_section_measured_and_checked(report):
    tp = {r.tp: r for r in report.tp_steps}
    assert set(tp) == {1, 2} and all(r.status == "ok" for r in tp.values())
    assert tp[1].allreduce_ms is None and tp[2].allreduce_ms > 0
    # hidden = 4 heads x 16; the message is 2 x 64 values x 2 bytes.
    assert tp[2].hidden == 64 and tp[2].allreduce_bytes == 2 * 64 * 2 == 256
    assert all(r.max_abs_err < 2e-2 for r in tp.values())  # the bf16 partials against float32
    (point,) = report.all_reduce
    assert (point.ranks, point.bytes) == (2, 256)
    assert point.busbw_gbps == pytest.approx(point.algbw_gbps)  # 2 (n - 1) / n = 1 at two ranks
    assert len(report.transfers) == 2 * 2 * 2 * 2  # layouts x KV dtypes x modes x methods
    assert {t.method for t in report.transfers} == {"nccl", "peer_copy"}
    assert all(t.status == "ok" and t.bit_exact for t in report.transfers)
    # The bare wire is timed for NCCL's one-message transfer only.
    assert all((t.wire_ms is not None) == (t.method == "nccl" and t.mode == "whole") for t in report.transfers)
    assert all(t.share_of_copy == pytest.approx(t.gbps / t.copy_gbps) for t in report.transfers)


def test_every_measurement_has_the_planners_prediction_and_ratio(report):
    for record, measured in ([(r, r.step_ms) for r in report.tp_steps] + [(p, p.ms) for p in report.all_reduce]
                             + [(t, t.ms) for t in report.transfers]):
        assert record.prediction.ms > 0
        assert record.prediction.ratio == pytest.approx(measured / record.prediction.ms)
    # The all-reduce: 2 (2 - 1) / 2 x 256 B = 256 B each way over NVLink 4's 450 GB/s per direction.
    assert report.all_reduce[0].prediction.ms == pytest.approx(256 / 450e9 * 1e3)
    assert get_link("nvlink4").bytes_per_s == 450 * 10**9
    # A transfer: its wire bytes (the planner's kv_transfer agrees, no mismatch noted) at 450 GB/s.
    full = next(t for t in report.transfers if t.layout == "full" and t.kv_dtype == "bf16" and t.method == "nccl")
    assert full.bytes == 2 * 2 * 3 * 2 * 16 * 16 * 2  # 2 layers x (K, V) x 3 blocks x 2 heads x 16 x 16 x 2 B
    assert full.prediction.ms == pytest.approx(full.bytes / 450e9 * 1e3)
    assert "the run moved" not in full.prediction.model


def test_a_saved_run_can_be_predicted_again_for_another_link(report, tmp_path):
    again = with_predictions(read_report(write_report(report, tmp_path / "run.json")),
                             PlannerPredictor("h200", "pcie5-x16"))
    # PCIe 5 x16: 32 GT/s x 16 lanes, 128b/130b, per direction = 512e9 x 128 / 130 / 8 B/s.
    assert again.all_reduce[0].prediction.ms == pytest.approx(256 / (512e9 * 128 / 130 / 8) * 1e3)
    assert again.all_reduce[0].ms == report.all_reduce[0].ms  # the measurements stay as they were
    bare = with_predictions(report, None)
    assert all(t.prediction == Prediction(model="no prediction in this run") for t in bare.transfers)


def test_the_tp_step_prediction_is_the_planners_step_plus_the_ring(report):
    tp1, tp2 = sorted(report.tp_steps, key=lambda r: r.tp)
    # TP 1, one layer: KV 2 x 33 x 2 heads x 16 x 2 B x 2 (K, V) + w_o 64 x 64 x 2 B, read at
    # the H200's 4.8 TB/s datasheet bandwidth (bandwidth-bound: 2 FLOPs a byte is far below the ridge).
    read = 2 * 2 * 33 * 2 * 16 * 2 + 64 * 64 * 2
    assert tp1.prediction.ms == pytest.approx(read / 4.8e12 * 1e3)
    # TP 2: half of each, plus the 256-byte ring all-reduce at 450 GB/s.
    assert tp2.prediction.ms == pytest.approx(read / 2 / 4.8e12 * 1e3 + 256 / 450e9 * 1e3)


def test_provenance_names_the_run(report):
    p = report.provenance
    assert p.run.command == "python -m kernels.multi_gpu --json run.json" and p.run.date and p.run.torch
    assert (p.backend, p.gpu_count, p.nccl, p.peer_access) == ("gloo", 0, "", None)
    assert p.multicast_env == "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"


def test_the_file_round_trips_as_strict_json(report, tmp_path):
    path = write_report(report, tmp_path / "run.json")
    document = _strict(path.read_text())
    assert document["schema"] == SCHEMA and document["schema_version"] == 1
    assert read_report(path) == report
    # A figure that is not a number is written as null, and read back as None.
    nan = dataclasses.replace(report, all_reduce=(dataclasses.replace(report.all_reduce[0], ms=float("nan")),))
    assert _strict(report_to_json(nan))["all_reduce"][0]["ms"] is None
    assert parse_report(report_to_json(nan)).all_reduce[0].ms is None


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(schema="kv-cache-explorer.kernels.bench"), "not a kernels.multi_gpu result"),
    (lambda d: d.update(schema_version=2), "unsupported kernels.multi_gpu schema_version"),
    (lambda d: d["tp_steps"][0].update(step_ms="fast"), r"report.tp_steps\[0\].step_ms: expected a number"),
    (lambda d: d["transfers"][0].update(extra=1), r"report.transfers\[0\]: unknown fields \['extra'\]"),
    (lambda d: d["all_reduce"][0].pop("bytes"), "missing field 'bytes'"),
    (lambda d: d["all_reduce"][0].update(status="great"), "status: 'great' not in"),
    (lambda d: d["transfers"][0].update(method="rdma"), r"transfers\[0\].method: 'rdma' not in"),
    (lambda d: d["targets"].append(d["targets"][0]), "targets must be distinct names"),
])
def test_a_wrong_file_is_refused_with_the_field_named(report, edit, message):
    document = json.loads(report_to_json(report))
    edit(document)
    with pytest.raises(MultiGpuJsonError, match=message):
        parse_report(json.dumps(document))


def test_content_that_is_not_a_results_file_is_refused():
    for content, message in ((b"[1, 2]", "top level is a list"), (b"{", "JSON"), (b"{}", "schema is")):
        with pytest.raises(MultiGpuJsonError, match=message):
            parse_report(content)
    with pytest.raises(MultiGpuJsonError):
        parse_report(b" " * (16 * 2**20 + 1))


def test_bus_bandwidth_is_nccl_tests_definition():
    # nccl-tests (doc/PERFORMANCE.md): busbw = algbw x 2 (n - 1) / n for all-reduce. 1 GB in 10 ms on
    # 8 ranks: algbw 100 GB/s, busbw 175 GB/s; each rank sends 2 x 7/8 GB.
    assert bus_bandwidth_gbps(10**9, 8, 10.0) == pytest.approx(175.0)
    assert ring_bytes_per_rank(10**9, 8) == pytest.approx(1.75e9)
    assert Fraction(2 * 7, 8) == Fraction(7, 4)


def _step(tp, step_ms, local_ms):
    return TPStepResult(shape=SHAPE, tp=tp, hidden=64, allreduce_bytes=256, status="ok", step_ms=step_ms,
                        local_ms=local_ms)


def _moved(prompt, share, mode="whole", method="nccl"):
    return TransferResult(model="", layout="full", mode=mode, method=method, kv_dtype="bf16", block_size=16,
                          prompt_tokens=prompt,
                          layers=1, n_kv_heads=1, head_dim=8, window=None, blocks=1, messages=1, bytes=1, status="ok",
                          share_of_copy=share)


def test_targets_by_hand():
    sweep = (AllReducePoint(ranks=2, bytes=256, status="ok", ms=0.05),)
    # (0.30 - 0.20) / 0.05 = 2.0 > 1.5: missed; a 0.26 step: (0.06 / 0.05) = 1.2, met.
    steps = (_step(1, 0.2, 0.2), _step(2, 0.30, 0.20))
    transfers = (_moved(8192, 0.85), _moved(32768, 0.81), _moved(4096, 0.10), _moved(16384, 0.20, "per_layer"),
                 _moved(16384, 0.30, method="peer_copy"))
    allreduce, copy = compute_targets(steps, sweep, transfers)
    assert (allreduce.measured, allreduce.met) == (pytest.approx(2.0), False) and allreduce.at_most
    # Prompts below 8K, per-layer moves and the peer copy of the pieces do not count.
    assert (copy.measured, copy.met) == (0.81, True)
    allreduce, _ = compute_targets((_step(2, 0.26, 0.20),), sweep, transfers)
    assert allreduce.measured == pytest.approx(1.2) and allreduce.met
    # No sweep point at the step's size: unmet, and the detail says where.
    missing, empty = compute_targets(steps, (), ())
    assert missing.measured is None and not missing.met and "not measured at TP 2" in missing.detail
    assert not empty.met and "no whole-block transfer" in empty.detail
    assert isinstance(empty, Target)


def test_the_file_knows_the_transfer_methods_the_code_runs():
    assert TRANSFER_METHODS == METHODS == ("nccl", "peer_copy")


def test_prediction_without_a_predictor_says_so():
    assert Prediction.of(None, 1.0) == Prediction(model="no prediction in this run")


def test_without_two_gpus_the_command_exits_2_with_one_line(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["--json", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs at least 2 CUDA GPUs, found 0" in err[0]
    assert not out.exists()
    assert main(["--prompts", "0"]) == 2
    assert "argument --prompts" in capsys.readouterr().err


@pytest.mark.parametrize("argv,expected", [
    ([], dict(run_tp=True, run_all_reduce=True, run_transfer=True, prompts=PROMPTS, cuda_graphs=True)),
    (["--only", "tp", "--eager"], dict(run_tp=True, run_all_reduce=True, run_transfer=False, cuda_graphs=False)),
    (["--only", "all-reduce"], dict(run_tp=False, run_all_reduce=True, run_transfer=False)),
    (["--quick", "--only", "transfer", "--prompts", "8k,32k"],
     dict(run_tp=False, run_all_reduce=False, run_transfer=True, prompts=(8192, 32768))),
    (["--quick"], dict(prompts=(1024, 8192, 32768))),
])
def test_options_choose_what_a_run_measures(argv, expected):
    cfg = config_from_args(build_parser().parse_args(argv))
    assert {name: getattr(cfg, name) for name in expected} == expected
    # The decode shapes are the harness's: 32/8 and 64/8 heads in the full sweep, 32/8 in --quick.
    heads = {(s.n_q_heads, s.n_kv_heads) for s in cfg.decode_shapes}
    assert heads == ({(32, 8)} if "--quick" in argv else {(32, 8), (64, 8)})


@pytest.mark.slow  # a fresh interpreter imports torch, triton and the planner: ~3 s
def test_the_module_entry_forwards_to_the_planners_predictor(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kernels.multi_gpu", "--json", str(tmp_path / "run.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "needs at least 2 CUDA GPUs" in done.stderr
