"""The fixed and per-byte costs of a decode step's kernels on the attached GPU, for the planner's
step model (``planner/efficiency.py`` cites each figure this prints).

What it times, each inside CUDA-graph replays (as vLLM and SGLang decode) unless it says eager:

* ``graph_kernel_us`` — one tiny kernel (an in-place add on 4,096 bf16 values) among 400 in one
  graph: what a kernel costs when it moves nothing, i.e. the floor every kernel of a layer pays.
* ``eager_launch_us`` — the same add launched from Python 2,000 times without a graph: the host
  cost of one eager PyTorch op (``--enforce-eager``).
* ``weight_read`` — ``y = x @ Wᵀ`` (cuBLAS, bf16) for weights of 1–512 MiB at M = 1–256 tokens,
  chained over enough distinct matrices that the working set exceeds the L2: achieved weight
  bytes per second and TFLOP/s, per matmul, launch gaps included.
* ``fp8_weight_read`` — the same with FP8 weights through ``torch._scaled_mm`` (per-tensor scales).
* ``bf16_matmul_tflops`` — one 8192³ bf16 matmul, the compute ceiling.

Run on the device machine, from the project root::

    python3 benchmarks/bench_step_overheads.py --json $OUT/step-overheads.json

Medians of ``--repeat`` timed replays (CUDA events) after warm-up. Not imported by the app or
the tests.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

MiB = 1 << 20
# More than the H200's 60 MB of L2 (H100: 50 MB), so every weight read comes from HBM.
WORKING_SET_BYTES = 512 * MiB
WEIGHT_MIB = (1, 4, 16, 64, 256, 512)
TOKENS = (1, 8, 32, 64, 128, 256)


def _graph_seconds(fn, repeat: int) -> float:
    """Median seconds of one replay of a graph that runs ``fn`` once (three eager warm-ups
    outside the capture: cuBLAS workspaces, autotuning)."""
    from kernels.bench.timing import replay_median_s

    return replay_median_s(fn, repeat, eager_warmups=3)


def graph_kernel_us(repeat: int) -> float:
    x = torch.zeros(4096, device="cuda", dtype=torch.bfloat16)
    n = 400

    def many() -> None:
        for _ in range(n):
            x.add_(1)
    return _graph_seconds(many, repeat) / n * 1e6


def eager_launch_us() -> float:
    x = torch.zeros(4096, device="cuda", dtype=torch.bfloat16)
    n = 2000
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def weight_read(repeat: int, dtype: str) -> list[dict]:
    rows = []
    for mib in WEIGHT_MIB:
        bytes_per_value = 2 if dtype == "bf16" else 1
        k = 4096 if mib < 64 else 8192
        n = mib * MiB // (bytes_per_value * k)
        copies = max(1, WORKING_SET_BYTES // (mib * MiB))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        if dtype == "fp8":
            ws = [w.to(torch.float8_e4m3fn) for w in ws]
        one = torch.ones((), device="cuda", dtype=torch.float32)
        for m in TOKENS:
            if dtype == "fp8" and m % 16:
                continue  # _scaled_mm wants the token count padded to 16
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x8 = x.to(torch.float8_e4m3fn) if dtype == "fp8" else None

            def chain() -> None:
                for w in ws:
                    if dtype == "fp8":
                        torch._scaled_mm(x8, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                    else:
                        x @ w.t()
            seconds = _graph_seconds(chain, repeat) / copies
            rows.append({"weight_mib": mib, "tokens": m, "us": seconds * 1e6,
                         "weight_tbps": mib * MiB / seconds / 1e12,
                         "tflops": 2 * m * n * k / seconds / 1e12})
        del ws
        torch.cuda.empty_cache()
    return rows


def bf16_matmul_tflops(repeat: int) -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return 2 * 8192**3 / _graph_seconds(lambda: a @ b, repeat) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    import dataclasses
    import sys

    from kernels.bench.timing import environment

    result = {
        # GPU, driver, torch/triton/CUDA, date, the command and the commit (KVX_GIT_COMMIT or git).
        "provenance": dataclasses.asdict(environment(" ".join([sys.executable, *sys.argv]))),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "graph_kernel_us": graph_kernel_us(args.repeat),
        "eager_launch_us": eager_launch_us(),
        "bf16_matmul_tflops": bf16_matmul_tflops(args.repeat),
        "weight_read": weight_read(args.repeat, "bf16"),
    }
    try:
        result["fp8_weight_read"] = weight_read(args.repeat, "fp8")
    except (RuntimeError, TypeError) as exc:  # a torch without FP8 matmuls on this GPU
        result["fp8_weight_read"] = f"not run: {exc}"
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
