"""Results files that pass the schema but not sense: a ceiling of 1e-300 TB/s, zero or negative
ceilings, zero batch or heads, absurd times. Each is refused at load, naming its path, by the
reader the planner and the pages use — so no page or CLI divides by it."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest

from kernels.bench.records import BenchJsonError, parse_bench_json
from planner.cli import main as planner_main
from support.paths import ROOT

SHIPPED = ROOT / "benchmarks" / "results" / "h200-2026-12-03.json"


def _document() -> dict:
    return json.loads(SHIPPED.read_text())


def _set(document: dict, path: tuple, value) -> dict:
    changed = copy.deepcopy(document)
    where = changed
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return changed


LIES = [
    (("ceilings", "copy_tbps"), 1e-300, "report.ceilings.copy_tbps"),
    (("ceilings", "datasheet_tbps"), 0.0, "report.ceilings.datasheet_tbps"),
    (("ceilings", "matmul_tflops"), -5.0, "report.ceilings.matmul_tflops"),
    (("ceilings", "datasheet_tflops"), 1e300, "report.ceilings.datasheet_tflops"),
    (("decode", 0, "shape", "batch"), 0, "report.decode[0].shape.batch"),
    (("decode", 0, "shape", "n_kv_heads"), 0, "report.decode[0].shape.n_kv_heads"),
    (("decode", 0, "shape", "head_dim"), -128, "report.decode[0].shape.head_dim"),
    (("decode", 0, "measurements", 0, "median_ms"), 1e300, "report.decode[0].measurements[0].median_ms"),
    (("prefill", 0, "shape", "seq_len"), 0, "report.prefill[0].shape.seq_len"),
    (("decode", 0, "num_splits"), 0, "report.decode[0].num_splits"),
]


def test_the_shipped_files_are_within_every_range():
    assert parse_bench_json(SHIPPED.read_bytes()).decode


@pytest.mark.parametrize(("path", "value", "named"), LIES, ids=[n for _, _, n in LIES])
def test_a_figure_out_of_range_is_refused_by_its_path(path, value, named):
    with pytest.raises(BenchJsonError) as info:
        parse_bench_json(json.dumps(_set(_document(), path, value)))
    assert named in info.value.message and info.value.field == "bench_json"


@pytest.mark.parametrize(("path", "value", "named"), LIES[:3], ids=[n for _, _, n in LIES[:3]])
def test_the_planner_cli_refuses_it_in_one_line(path, value, named, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_set(_document(), path, value)))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = planner_main(["--json", "--bandwidth-source", "measured", "--bench-json", str(bench)])
    assert code == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert "--bench-json" in err.getvalue() and named in err.getvalue()
