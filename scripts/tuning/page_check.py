"""Run the live kernel page itself on the GPU machine (Streamlit AppTest) and check measured figures.

Usage, from the repository root on the H200 (streamlit and plotly installed there too)::

    python3 -m scripts.tuning.page_check [--json OUT/page_runs.json] [--quick]

Two presses of the page's Run button, as a user would make them:

1. paged decode, FP8 KV contender on, B = 32, context 8,192 (256K tokens), 32/8 heads, d = 128,
   block 16, with the context and batch sweep;
2. tiled prefill, causal, B = 4, N = 4,096, 32/32 heads, d = 128, with the N sweep and the
   naive-vs-tiled memory series up to N = 32K (naive is expected to run out of memory there).

After each run it asserts that the page is in GPU mode, raised no exception, shows the kernel's
median time, a positive achieved rate, a max error within tolerance, the roofline and sweep
charts; then it prints the session's records as the benchmark's table (and writes the JSON the
page's download button would give). Exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kernels.tolerances import tolerance

ROOT = Path(__file__).resolve().parents[2]

# The error allowed against the fp32 reference on the GPU, for every contender of both runs: the
# bf16 paged-decode bound (the FP8 contender is compared with its own dequantised reference).
MAX_ERR = tolerance("paged_decode", "bf16").atol


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _press_run(query: dict[str, str], toggles: tuple[str, ...], timeout_s: float):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages/3_kernels.py"), default_timeout=timeout_s)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    banner = " ".join(s.value for s in at.success)
    assert banner.startswith("GPU:"), f"page is not in GPU mode: {banner!r} / {[i.value for i in at.info]}"
    for key in toggles:
        at.toggle(key=key).set_value(True)
    t0 = time.perf_counter()
    at.button(key="k_run").click().run()
    wall = time.perf_counter() - t0
    assert not at.exception, [e.message + "\n" + "\n".join(e.stack_trace) for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at, wall


def _number(cell: str) -> float | None:
    try:
        return float(str(cell).replace(",", ""))
    except ValueError:
        return None


def _check_figures(at, kernel: str) -> dict:
    unit = "TB/s" if kernel == "decode" else "TFLOP/s"
    figures = {
        "kernel median time": _metric(at, "Kernel median time"),
        f"achieved {unit}": _metric(at, f"Achieved {unit}"),
        "share of measured ceiling": _metric(at, "Share of measured ceiling"),
        "max abs error": _metric(at, "Max abs error vs reference"),
    }
    assert float(figures[f"achieved {unit}"].replace(",", "")) > 0, figures
    assert float(figures["max abs error"]) <= MAX_ERR, figures
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert any(t.startswith("Roofline") for t in titles), titles
    assert any(("against context" in t) or ("against N" in t) for t in titles), titles
    table = at.dataframe[0].value  # the page's formatted results table ("—" where nothing was measured)
    figures["contenders"] = {row["Contender"]: (row["Status"], row["CUDA-graph replay (µs)"], row[f"Rate ({unit})"],
                                                _number(row["Max abs error vs fp32"]))
                             for _, row in table.iterrows()}
    ok_errs = [e for s, _, _, e in figures["contenders"].values() if s == "ok" and e is not None]
    assert all(e <= MAX_ERR for e in ok_errs), figures["contenders"]
    figures["warnings"] = [w.value for w in at.warning]
    return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the session's records (the page's download) here")
    p.add_argument("--quick", action="store_true", help="no sweeps, no memory series (fastest check)")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds allowed per page run")
    args = p.parse_args()

    from kernels.bench.records import parse_bench_json, report_to_json
    from kernels.bench.text_report import format_report
    from kernels.bench.live import merge_reports

    decode_q = {"kernel": "decode", "dtype": "fp8", "batch": "32", "len": "8192", "hq": "32", "hkv": "8",
                "d": "128", "block": "16"}
    prefill_q = {"kernel": "prefill", "dtype": "bf16", "batch": "4", "len": "4096", "hq": "32", "hkv": "32",
                 "d": "128", "causal": "1"}
    sweep = () if args.quick else ("kernels.sweep",)
    runs = []
    at, wall = _press_run(decode_q, sweep, args.timeout)
    dec = _check_figures(at, "decode")
    print(f"[decode page run: {wall:.1f} s] {json.dumps({k: v for k, v in dec.items() if k != 'contenders'})}")
    for name, (status, ms, rate, err) in dec["contenders"].items():
        print(f"   {name:<32} {status:<12} {ms} µs  {rate} TB/s  err {err}")
    runs += at.session_state["kernels_session_runs"]

    at, wall = _press_run(prefill_q, sweep + (() if args.quick else ("kernels.memory",)), args.timeout)
    pre = _check_figures(at, "prefill")
    print(f"[prefill page run: {wall:.1f} s] {json.dumps({k: v for k, v in pre.items() if k != 'contenders'})}")
    for name, (status, ms, rate, err) in pre["contenders"].items():
        print(f"   {name:<32} {status:<12} {ms} µs  {rate} TFLOP/s  err {err}")
    runs += at.session_state["kernels_session_runs"]

    merged = merge_reports(runs)
    text = report_to_json(merged)
    assert parse_bench_json(text) == merged  # the download is valid benchmark JSON
    print(format_report(merged))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
        print(f"wrote {args.json}")
    print("H200 PAGE CHECK PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
