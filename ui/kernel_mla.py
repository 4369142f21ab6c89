"""The kernel page's MLA decode section: the newest shipped MLA run (``benchmarks/results/mla/``,
written by ``python -m kernels.bench --mla``), shown on any machine: per shape our absorbed-form
kernel against SGLang's Triton MLA decode on the same latent pool, its share of the bound the run's
ceilings set, the targets, and why 128 heads are bound by the matmul rate rather than by HBM."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from kernels.bench.family_records import ok_ms, ratio
from kernels.bench.mla_records import (CEILING_HEADS, MlaReport, balance_flops_per_byte, best_peer_ms, bound_ms,
                                       flops_per_latent_byte, read_mla_file)
from kernels.bench.records import measured_text, required_text
from kernels.bench.results_json import newest_readable
from kernels.bench.shipped import RESULTS_DIR, shown_command
from kernels.bench.target_notes import label_of
from ui.kernel_tables import times_text, us_text

__all__ = ["MLA_DIR", "newest_mla", "mla_frame", "mla_targets_frame", "provenance_text",
           "intensity_text", "mla_section"]

MLA_DIR = RESULTS_DIR / "mla"

def newest_mla(directory: Path = MLA_DIR) -> tuple[MlaReport, str] | None:
    """The newest valid MLA file and its name, or None (:func:`kernels.bench.results_json.newest_readable`)."""
    return newest_readable(directory, read_mla_file)


def _fixed(value: float | None, spec: str) -> str:
    return "—" if value is None else f"{value:{spec}}"


def mla_frame(report: MlaReport) -> pd.DataFrame:
    """One row per shape: our kernel's CUDA-graph µs, its TFLOP/s and share of the bound
    (the ceilings' least time ÷ its time), the project's Triton kernel on the same call where the
    run timed it (on Hopper the default is the Gluon kernel), SGLang's best µs and the speed ratios
    (their µs ÷ ours)."""
    rows = []
    for result in report.results:
        s, ours = result.shape, ok_ms(result, "mla")
        mla = result.get("mla")
        bound, peer, triton = bound_ms(s, report.ceilings), best_peer_ms(result), ok_ms(result, "mla_triton")
        rows.append({
            "Shape": f"B={s.batch} L={s.context} H={s.n_heads}", "Latent": s.kv, "Ours (µs)": us_text(ours),
            "TFLOP/s": _fixed(mla.rate if ours is not None and mla is not None else None, ",.0f"),
            "Share of bound": _fixed(ratio(bound, ours), ".2f"),
            "Triton kernel (µs)": us_text(triton), "Ours ÷ Triton kernel (speed)": times_text(ratio(triton, ours)),
            "SGLang Triton best (µs)": us_text(peer), "Ours ÷ SGLang (speed)": times_text(ratio(peer, ours)),
        })
    return pd.DataFrame(rows)


def mla_targets_frame(report: MlaReport) -> pd.DataFrame:
    """The run's two targets in words, with the figure, the bound, where it is worst and whether it is met."""
    return pd.DataFrame({"Target": [label_of(t.name) for t in report.targets],
                         "Measured": [measured_text(t) or "—" for t in report.targets],
                         "Required": [required_text(t) for t in report.targets],
                         "Where": [t.detail or "—" for t in report.targets],
                         "Met": ["yes" if t.met else "no" for t in report.targets]})


def provenance_text(report: MlaReport, name: str) -> str:
    """One line: the file, GPU, driver, torch, triton, date, commit and the command as a reader would
    type it (the run machine's absolute paths cut to file names)."""
    p = report.provenance
    command = shown_command(p.command).replace("`", "'")  # a backtick would end the code span early
    return (f"Shipped run `{name}`: {p.device}, driver {p.driver or '?'}, torch {p.torch}, triton {p.triton}, "
            f"{p.date[:10]}, commit {p.commit or '?'}, command `{command}`.")


def intensity_text(report: MlaReport) -> str | None:
    """Why 128 heads are bound by the matmul rate: the absorbed form's FLOPs per latent byte (bf16)
    against the run's balance point, matmul TFLOP/s ÷ copy TB/s (FLOPs per byte). None without a
    128-head bf16 shape or without both ceilings."""
    c = report.ceilings
    bf16 = [r.shape for r in report.results if r.shape.kv == "bf16"]
    heavy = next((s for s in bf16 if s.n_heads == CEILING_HEADS), None)
    balance = balance_flops_per_byte(c)
    if heavy is None or balance is None:
        return None
    per_byte = flops_per_latent_byte
    heavy_bound = "the matmul rate bounds it, not HBM" if per_byte(heavy) > balance else "the read bounds it"
    text = (f"At {heavy.n_heads} heads the absorbed form does {per_byte(heavy):,.0f} FLOPs per bf16 latent byte, "
            f"{'past' if per_byte(heavy) > balance else 'below'} the {balance:,.0f} this GPU balances at "
            f"({c.matmul_tflops:,.0f} TFLOP/s matmul ÷ {c.copy_tbps:.2f} TB/s copy in the same run), so "
            f"{heavy_bound}")
    light = min(bf16, key=lambda s: s.n_heads)
    if light.n_heads < heavy.n_heads and per_byte(light) <= balance:
        text += f"; at {light.n_heads} heads it does {per_byte(light):,.0f} and the read bounds it"
    return text + "."


def mla_section() -> None:
    """The section, or one line saying no MLA run is shipped."""
    found = newest_mla()
    st.subheader("MLA decode (DeepSeek's latent cache)")
    if found is None:
        st.caption("No MLA run is shipped (`python -m kernels.bench --mla --json …` writes one).")
        return
    report, name = found
    widths = sorted({(r.shape.kv_lora_rank, r.shape.rope_dim) for r in report.results})
    st.caption(provenance_text(report, name) + " One latent row per token ("
               + ", ".join(f"{rank} + {rope}" for rank, rope in widths)
               + " values) serves every query head; times are CUDA-graph replays, and the share of bound is "
                 "the least time the run's copy and matmul ceilings allow for the call's bytes and FLOPs, "
                 "over its time.")
    sentence = intensity_text(report)
    if sentence:
        st.caption(sentence)
    st.dataframe(mla_frame(report), hide_index=True, width="stretch")
    st.dataframe(mla_targets_frame(report), hide_index=True, width="stretch")
