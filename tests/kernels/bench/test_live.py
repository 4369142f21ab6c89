"""The live page's plan, the session merge, and the shipped-results finder."""


import pytest

from kernels.bench.records import DecodeShape, PrefillShape, parse_bench_json, read_bench_file, report_to_json
from kernels.bench.live import PREFILL_SWEEP_NS, RunPlan, merge_reports, plan_steps
from ui.kernel_charts import roofline_rows
from kernels.bench.shipped import find_shipped_results

from support.paths import FIXTURES

FIXTURE = FIXTURES / "kernels_bench_synthetic.json"
DEC = DecodeShape(batch=8, context=4096, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16)


def test_decode_plan_chosen_shape_first_with_every_baseline():
    steps = plan_steps(RunPlan(kernel="decode", decode=DEC, fp8=True))
    assert len(steps) == 1
    assert steps[0].contenders == ("triton_paged", "triton_paged_fp8", "gather_sdpa", "sdpa_flash", "sdpa_cudnn",
                                   "sdpa_efficient", "naive")


def test_decode_sweep_has_each_point_once():
    steps = plan_steps(RunPlan(kernel="decode", decode=DEC, sweep=True))
    points = [(s.decode.batch, s.decode.context) for s in steps]
    # 4 contexts at batch 8 (4096 is the chosen shape) + 4 batches at 4096 (8 is the chosen one).
    assert len(points) == len(set(points)) == 1 + 3 + 3


def test_prefill_sweep_and_memory_steps():
    shape = PrefillShape(batch=1, seq_len=3000, n_q_heads=8, n_kv_heads=8, head_dim=64, causal=True)
    steps = plan_steps(RunPlan(kernel="prefill", prefill=shape, sweep=True, memory_ns=(1024, 2048)))
    assert [s.kind for s in steps] == ["prefill"] * (1 + len(PREFILL_SWEEP_NS)) + ["memory"] * 4
    assert [s.contender for s in steps if s.kind == "memory"] == ["naive", "triton_flash"] * 2
    # The chosen shape times both forwards (the shipped dispatch and the triton.language kernel).
    assert steps[0].contenders[:2] == ("triton_flash", "triton_flash_tl")


def test_plan_needs_its_own_shape():
    with pytest.raises(ValueError, match="exactly its own shape"):
        RunPlan(kernel="decode", prefill=PrefillShape(batch=1, seq_len=8, n_q_heads=1, n_kv_heads=1, head_dim=64,
                                                      causal=False))


def test_merge_keeps_every_record_and_round_trips():
    rep = read_bench_file(FIXTURE)
    merged = merge_reports([rep, rep])
    assert len(merged.decode) == 2 * len(rep.decode) and len(merged.memory) == 2 * len(rep.memory)
    assert merged.provenance.command.startswith("2 run(s)")
    assert parse_bench_json(report_to_json(merged)) == merged  # the download is valid harness JSON
    assert merge_reports([]) is None


def test_shipped_results_skip_foreign_files(tmp_path):
    (tmp_path / "a.json").write_bytes(FIXTURE.read_bytes())
    (tmp_path / "b.json").write_text('{"schema": "other"}')
    found = find_shipped_results(tmp_path)
    assert [r.path.name for r in found.results] == ["a.json"]
    assert found.rejected[0][0].name == "b.json" and "schema" in found.rejected[0][1]


def test_roofline_rows_prefill_naive_moves_the_matrix():
    rep = read_bench_file(FIXTURE)
    r = next(p for p in rep.prefill if p.shape.seq_len == 1024 and not p.shape.causal)
    rows = roofline_rows(r).set_index("contender")
    s = r.shape
    io = s.batch * s.seq_len * s.head_dim * 2 * (2 * 32 + 2 * 32)
    assert rows.loc["Triton tiled forward", "intensity"] == pytest.approx(r.flops / io)
    naive_bytes = io + 4 * s.batch * 32 * 1024 * 1024 * 2
    assert rows.loc["naive softmax(QKᵀ)V", "intensity"] == pytest.approx(r.flops / naive_bytes)
    assert rows.loc["Triton tiled forward", "tflops"] == pytest.approx(420.0)  # the fixture's rate
