"""Time the library work behind one sizer-page rerun: ``size_deployment`` for a request.

One rerun of the page calls :func:`sizing.report.size_deployment` once (figures, worked
formula, chart data, reference table, warnings, hand-off) and converts the table to a
DataFrame for display/CSV. Target: under 20 ms, so a slider feels immediate. Run from the project root::

    .venv/bin/python benchmarks/bench_sizing.py            # readable
    .venv/bin/python benchmarks/bench_sizing.py --json     # one JSON object

Cases cover the cheap default, a MoE/MLA model with TP, a sliding-window model, a parsed
config.json and the heaviest chart ranges (many users, long context). Each case is timed
as the median of ``--repeat`` calls after one warm-up call (the presets' cache fills on the
first call, as it would on the page's first run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

TARGET_MS = 20.0  # library work behind one page rerun: well under a frame of interaction


def _cases():
    from sizing.hf_config import parse_hf_config
    from sizing.presets import get_preset
    from sizing.report import SizingRequest

    config_text = json.dumps(dict(get_preset("qwen2.5-72b").config))
    return {
        "default (llama-3.1-70b, 100 users × 32K)": lambda: SizingRequest(),
        "reference problem 4 (fp8, TP 8, 8 GPUs)": lambda: SizingRequest(
            kv_dtype="fp8", weight_dtype="fp8", tp=8, n_gpus=8),
        "deepseek-v3 MLA, TP 8, int4 scales": lambda: SizingRequest(
            model="deepseek-v3", kv_dtype="int4", weight_dtype="fp8", tp=8, n_gpus=16, gpu="h200"),
        "gemma-2-27b sliding windows, 1,000 users": lambda: SizingRequest(
            model="gemma-2-27b", users=1000, context=8192, gpu="l40s"),
        "config.json parsed each rerun (qwen2.5-72b)": lambda: SizingRequest(
            model=parse_hf_config(config_text), kv_dtype="fp8"),
        "heavy charts (405b, 100k users × 1M tokens)": lambda: SizingRequest(
            model="llama-3.1-405b", users=100_000, context=1_000_000, gpu="b200",
            compare_kv_dtypes=("fp32", "bf16", "fp8", "int8", "int4", "int2")),
    }


def time_case(make_request, repeat: int) -> float:
    """Median milliseconds of one rerun: build the request, size it, table → DataFrame."""
    import pandas as pd

    from sizing.report import size_deployment

    def rerun():
        report = size_deployment(make_request())
        pd.DataFrame(report.table_records())
        return report

    rerun()  # warm-up: fills the preset cache, imports pandas' lazy parts
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        rerun()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


LOG_TARGET_MS = 100.0  # parsing a 1 MB pasted start-up log


def _engine_cases():
    from sizing.engine.capacity import EngineRequest

    return {
        "engine: llama-3.1-405b bf16 on H100, pipeline stages in the answer": EngineRequest(
            model="llama-3.1-405b", gpu="h100-sxm", tp=8, max_model_len=32_768, users=10),
        "engine: llama-3.1-70b TP 8 on H200, 64 users (reverse questions)": EngineRequest(
            model="llama-3.1-70b", gpu="h200", tp=8, max_model_len=32_768, users=64),
        "engine: gemma-2-9b sliding groups, 100 users": EngineRequest(
            model="gemma-2-9b", gpu="h100-sxm", max_model_len=8192, users=100),
        "engine: deepseek-v3 MLA TP 8, fp8 weights": EngineRequest(
            model="deepseek-v3", gpu="h200", tp=8, weight_dtype="fp8", max_model_len=32_768, users=16),
    }


def time_engine(request, repeat: int) -> float:
    """Median milliseconds of one engine-mode rerun: the sizer's report, :func:`plan_engine` at
    the asked TP (:func:`sizing.engine.cli.run_engine`) and the answer over every layout
    (:func:`sizing.answer.answer_for`)."""
    from sizing.answer import answer_for
    from sizing.engine.cli import run_engine
    from sizing.report import SizingRequest, size_deployment

    sizing = SizingRequest(model=request.model, gpu=request.gpu, tp=request.tp, n_gpus=request.tp,
                           context=request.max_model_len, users=request.users or 1,
                           weight_dtype=request.weight_dtype)

    def rerun():
        answer_for(size_deployment(sizing))
        return run_engine(request)

    rerun()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        rerun()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def time_log_parse(repeat: int) -> float:
    """Median milliseconds to parse a 1 MB log (a real excerpt padded with compile chatter)."""
    from sizing.engine.vllm_log import parse_vllm_log

    real = (Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_logs" / "gemma3-1b-v0.13-rtx.log").read_bytes()
    filler = b"(EngineCore_DP0 pid=1) INFO 01-16 14:20:21 [backends.py:643] Using cache directory: /x for torch.compile\n"
    data = filler * ((2**20 - len(real)) // len(filler)) + real
    samples = []
    for _ in range(max(3, repeat // 10)):
        start = time.perf_counter()
        parse_vllm_log(data)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per case (default 50)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    results = {name: time_case(make, args.repeat) for name, make in _cases().items()}
    results |= {name: time_engine(request, args.repeat) for name, request in _engine_cases().items()}
    worst = max(results.values())
    log_ms = time_log_parse(args.repeat)
    results["parse a 1 MB vLLM log (target 100 ms, not in the worst case)"] = log_ms
    if args.json:
        print(json.dumps({"median_ms": results, "worst_ms": worst, "target_ms": TARGET_MS,
                          "within_target": worst < TARGET_MS}, indent=2))
    else:
        width = max(map(len, results))
        for name, ms in results.items():
            print(f"{name:<{width}}  {ms:7.2f} ms")
        print(f"{'worst case':<{width}}  {worst:7.2f} ms  (target < {TARGET_MS:g} ms: "
              f"{'met' if worst < TARGET_MS else 'MISSED'})")
    return 0 if worst < TARGET_MS and log_ms < LOG_TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
