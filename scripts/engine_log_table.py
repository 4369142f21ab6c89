"""Print, as Markdown, how far the engine's memory profile is from the logged "Available KV cache
memory" of every real start-up log whose GPU and settings are known.

Run from the repository root::

    .venv/bin/python -m scripts.engine_log_table

For each case of :mod:`scripts.engine_log_cases` with ``in_table`` the prediction is
:func:`sizing.engine.capacity.plan_engine` with no KV budget: the GPU's catalogue entry (or the
log's own ``total_gpu_memory`` where it prints one), ``gpu_memory_utilization``, the weights the
engine holds for the checkpoint's format (:func:`sizing.weights.engine_weight_bytes`: embeddings,
``lm_head`` and norms 16-bit; MXFP4 experts with the padding of the MoE kernel the case names,
:mod:`sizing.engine.mxfp4`), and the memory profile's own activation, non-torch
and CUDA-graph estimates. A second column drops the CUDA-graph term for logs of vLLM releases that
did not yet subtract it (before 0.21), to separate that term from the rest. The logged weights,
activation peak and non-torch memory are shown beside the estimates wherever the log prints them.
Where the profile leaves no room for the KV cache (the engine refuses the plan), the row shows
what it leaves (negative) and its terms, marked "no KV room". The logs left out are listed with
the reason.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, replace

from hardware.gpus import GPU, custom_gpu, get_gpu
from scripts.engine_log_cases import CASES, LogCase
from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import pipeline_stage
from sizing.engine.vllm_log import ParsedLog, parse_vllm_log
from sizing.errors import NoKVRoom, SizingError
from sizing.precisions import get_precision
from sizing.presets import get_preset
from sizing.weights import engine_weight_bytes
from units import GiB

_V0_TOTAL = re.compile(r"total_gpu_memory=(\d+\.\d+)GiB")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One log's comparison, GiB per GPU (None where the log or the profile has no figure)."""

    case: LogCase
    parsed: ParsedLog
    total_source: str
    logged: float
    predicted: float | None
    predicted_version_graphs: float | None
    weights: float
    activation: float
    non_torch: float
    cuda_graph: float
    refused: str = ""

    @property
    def error_percent(self) -> float | None:
        return None if self.predicted is None else (self.predicted - self.logged) / abs(self.logged) * 100

    @property
    def error_percent_version_graphs(self) -> float | None:
        if self.predicted_version_graphs is None:
            return None
        return (self.predicted_version_graphs - self.logged) / abs(self.logged) * 100


def _gpu(case: LogCase) -> GPU:
    if case.gpu is not None:
        return get_gpu(case.gpu)
    return custom_gpu(24, name=case.gpu_label)


def _v0_total_gib(case: LogCase) -> float | None:
    """``total_gpu_memory=23.58GiB`` of V0's one-line profiling summary, which the parser does not read."""
    match = _V0_TOTAL.search(case.path.read_text())
    return float(match.group(1)) if match else None


def _request(case: LogCase, parsed: ParsedLog, *, graphs_profiled: bool = True) -> tuple[EngineRequest, str]:
    shape = case.shape if case.shape is not None else get_preset(case.preset).shape
    weights = engine_weight_bytes(shape, get_precision(case.weight_dtype)).bytes
    model = case.preset if case.shape is None else case.shape
    widths = case.widths
    if case.pp > 1:
        # The log is rank 0's: pipeline stage 0, with its share of the layers (vLLM's split) and
        # no sampler (the last stage runs it); the engine divides what it is given by TP.
        stage = pipeline_stage(shape, case.pp, 0)
        weights = weights * stage.layers // shape.layers
        if widths is None and case.preset is not None:
            widths = ActivationShape.from_config(get_preset(case.preset).config)
        model = stage
    gpu = _gpu(case)
    total = None
    source = f"{gpu.name} catalogue, {'driver total' if gpu.engine_total_measured else 'vendor GB'}"
    logged_total = parsed.total_gib if parsed.total_gib is not None else _v0_total_gib(case)
    if logged_total is not None:
        total = round(logged_total * GiB)
        source = "the log's total_gpu_memory"
    request = EngineRequest(
        model=model, gpu=gpu, tp=case.tp, kv_dtype=case.kv_dtype, last_pp_stage=case.pp == 1,
        max_model_len=case.max_model_len, gpu_memory_utilization=case.gpu_memory_utilization,
        max_num_batched_tokens=case.max_num_batched_tokens, max_num_seqs=case.max_num_seqs,
        enforce_eager=case.enforce_eager, activation=widths, total_bytes_per_gpu=total,
        weights_total_bytes=weights, weight_dtype=case.weight_dtype, mxfp4_backend=case.mxfp4_backend,
        cuda_graphs_profiled=graphs_profiled)
    return request, source


def compare(case: LogCase) -> Row:
    """The comparison for one ``in_table`` case."""
    parsed = parse_vllm_log(case.path.read_bytes(), field_name=case.file)
    request, source = _request(case, parsed)
    version_differs = not (case.cuda_graph_profiled or case.enforce_eager)
    refused = ""
    try:
        report = plan_engine(request)
    except NoKVRoom as exc:
        # The terms are what the comparison is about: read them from a plan given a 1 GiB budget
        # (which replaces only the available memory), and show what the profile leaves.
        refused = exc.message
        report = plan_engine(replace(request, kv_budget_bytes_per_gpu=GiB))
    except SizingError as exc:
        return Row(case=case, parsed=parsed, total_source=source, logged=parsed.available_gib, predicted=None,
                   predicted_version_graphs=None, weights=0, activation=0, non_torch=0, cuda_graph=0,
                   refused=exc.message)
    profile = report.profile
    predicted = (profile.requested_bytes - profile.non_kv_bytes) / GiB
    matched = predicted
    if version_differs:
        request = _request(case, parsed, graphs_profiled=False)[0]
        if refused:
            request = replace(request, kv_budget_bytes_per_gpu=GiB)
        version = plan_engine(request).profile
        matched = (version.requested_bytes - version.non_kv_bytes) / GiB
    return Row(case=case, parsed=parsed, total_source=source, logged=parsed.available_gib, predicted=predicted,
               predicted_version_graphs=matched, weights=profile.weights.bytes / GiB,
               activation=profile.activation.bytes / GiB, non_torch=profile.non_torch.bytes / GiB,
               cuda_graph=profile.cuda_graph.bytes / GiB, refused=refused)


def _pair(logged: float | None, estimate: float) -> str:
    return f"{estimate:.2f}" if logged is None else f"{logged:.2f} / {estimate:.2f}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f} %"


def markdown(rows: list[Row], skipped: list[LogCase]) -> str:
    """The comparison table, then the logs left out."""
    lines = [
        "| log | model | GPU (total from) | vLLM | logged available | predicted | error | "
        "predicted, graphs as the version did | error | weights logged / est. | activation logged / est. | "
        "non-torch logged / est. | CUDA graphs est. |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        c, p = row.case, row.parsed
        if row.predicted is None:
            lines.append(f"| `{c.file}` | {c.model} | {c.gpu_label} ({row.total_source}) | {c.version or '—'} | "
                         f"{row.logged:.2f} | refused: {row.refused} | — | — | — | — | — | — | — |")
            continue
        room = " (no KV room)" if row.refused else ""
        lines.append(
            f"| `{c.file}` | {c.model} | {c.gpu_label} ({row.total_source}) | {c.version or '—'} | "
            f"{row.logged:.2f} | {row.predicted:.2f}{room} | {_percent(row.error_percent)} | "
            f"{row.predicted_version_graphs:.2f}{room} | {_percent(row.error_percent_version_graphs)} | "
            f"{_pair(p.weights_gib, row.weights)} | {_pair(p.activation_gib, row.activation)} | "
            f"{_pair(p.non_torch_gib, row.non_torch)} | {row.cuda_graph:.2f} |")
    lines += ["", "GiB per GPU. Left out:", ""]
    lines += [f"- `{c.file}`: {c.why_not}" for c in skipped]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    rows = [compare(c) for c in CASES if c.in_table]
    print(markdown(rows, [c for c in CASES if not c.in_table]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
