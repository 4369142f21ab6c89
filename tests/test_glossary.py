"""One set of display names (``glossary.py``) and the kernel targets in plain words: every option
value the code offers has its name, the names are the ones written here by hand, and the pages
and the CLIs print the same words for FP8 and for the allocators."""

from __future__ import annotations

import ast
import json
import re

import pytest

from glossary import (
    ALLOCATOR_LABELS, ALLOCATOR_SHORT, DTYPE_LABELS, LAYER_KIND_LABELS, POLICY_LABELS, TERMS,
    allocator_label, dtype_label, layer_kind_label,
)
from kernels.bench.family_records import FAMILY_TARGET_SPECS
from kernels.bench.mla_records import MLA_TARGET_SPECS
from kernels.bench.records import TARGET_SPECS
from kernels.bench.target_notes import TARGET_LABELS, label_of
from kernels.multi_gpu.records import TARGET_SPECS as MULTI_GPU_TARGET_SPECS
from planner import cli as planner_cli
from simulation import cli as simulation_cli
from simulation.policies import ReservationPolicy
from simulation.timeline_types import Allocation
from sizing import cli as sizing_cli
from sizing.layers import LayerKind
from sizing.precisions import PRECISION_NAMES, WEIGHT_FORMAT_NAMES, get_precision
from support.apptest import open_page
from support.paths import ROOT

# The names, written out: what a reader sees wherever the page or CLI names these.
FP8 = "FP8 (e4m3)"
ORCA_MAX = "Contiguous, reserve the maximum (Orca-Max)"
ORCA_POW2 = "Contiguous, reserve a power of two (Orca-Pow2)"
PAGED = "Paged (vLLM blocks)"


def test_the_glossary_is_a_library_that_imports_nothing_of_the_project():
    tree = ast.parse((ROOT / "glossary.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__"}


def test_every_format_the_code_offers_has_one_distinct_name():
    assert set(WEIGHT_FORMAT_NAMES) == set(DTYPE_LABELS) and set(PRECISION_NAMES) < set(DTYPE_LABELS)
    assert len(set(DTYPE_LABELS.values())) == len(DTYPE_LABELS)
    assert (dtype_label("fp8"), dtype_label("bf16"), dtype_label("int4")) == (FP8, "BF16", "INT4")
    # A group size is named for integer formats only: FP8 has one per-tensor scale.
    assert dtype_label("int4", 128) == "INT4 (g128)" and dtype_label("int8", 64) == "INT8 (g64)"
    assert dtype_label("fp8", 128) == FP8 and dtype_label("int4", 0) == "INT4"
    assert dtype_label("bfloat16") == "BF16" and dtype_label("FP8") == FP8  # config spellings, any case


def test_the_sizers_precisions_are_named_by_the_glossary():
    labels = {n: get_precision(n, field="weight_dtype").label for n in WEIGHT_FORMAT_NAMES}
    assert labels == {n: dtype_label(n, 128 if n in ("int8", "int4", "int2") else None) for n in WEIGHT_FORMAT_NAMES}
    assert (labels["fp8"], labels["fp8_block"], labels["gptq_int4"], labels["int4"]) == (
        FP8, "FP8 (e4m3, 128 × 128 blocks)", "INT4 (GPTQ, g128)", "INT4 (g128)")
    assert get_precision("int4", group_size=None).label == "INT4"  # no scales counted, none named


@pytest.mark.parametrize("call, field", [
    (lambda: dtype_label("fp6", field="kv_dtype"), "kv_dtype"),
    (lambda: dtype_label(None), "dtype"),
    (lambda: dtype_label("int4", True), "dtype_group_size"),
    (lambda: dtype_label("int4", -1), "dtype_group_size"),
    (lambda: allocator_label("slab"), "allocator"),
    (lambda: allocator_label(3), "allocator"),
    (lambda: layer_kind_label("convolution"), "layer kind"),
])
def test_unknown_values_are_refused_naming_the_field(call, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        call()


def test_each_allocator_and_its_policy_share_one_name():
    assert set(ALLOCATOR_LABELS) == {a.value for a in Allocation}
    assert set(POLICY_LABELS) == {p.value for p in ReservationPolicy}
    for policy in ReservationPolicy:
        assert allocator_label(policy.value) == allocator_label(f"contiguous-{policy.value}")
    assert (allocator_label("max"), allocator_label("pow2"), allocator_label("paged")) == (ORCA_MAX, ORCA_POW2, PAGED)
    assert len(set(ALLOCATOR_LABELS.values())) == 4
    # The legend's short name is the part of the long one in parentheses.
    assert all(f"({ALLOCATOR_SHORT[a]})" in ALLOCATOR_LABELS[a] for a in ALLOCATOR_LABELS if a != "paged")
    assert allocator_label("contiguous-oracle", short=True) == "Orca-Oracle"


def test_layer_kinds_are_named_as_the_sizers_table_names_them():
    from ui.layer_kinds_view import KIND_LABELS

    assert set(LAYER_KIND_LABELS) == {k.value for k in LayerKind}
    assert {k.value: v for k, v in KIND_LABELS.items()} == LAYER_KIND_LABELS
    assert layer_kind_label(LayerKind.SLIDING) == "Sliding window"


def test_the_glossary_defines_the_terms_in_one_sentence_each():
    terms = dict(TERMS)
    assert {"KV cache", "Block / page", "TP", "PP", "DP", "EP", "TTFT", "TPOT", "ITL", "MLA", "GQA",
            "Sliding window", "Sinks"} <= set(terms)
    for term, text in TERMS:
        assert text.endswith(".") and not re.search(r"\.\s+[A-Z]", text), term  # one sentence
        assert len(text) <= 200, term


NEW_TARGETS = {
    "decode_fp8_b1_vs_bf16": "FP8 KV vs bf16 at batch 1",
    "decode_int4_b1_vs_bf16": "INT4 KV vs bf16 at batch 1",
    "prefill_short_causal_vs_cudnn": "Short causal prefill (16 × 1K) vs cuDNN",
    "prefill_d256_vs_cudnn": "Head dim 256 prefill vs cuDNN",
}


def test_every_target_of_every_harness_has_a_plain_words_label():
    names = {s.name for s in (*TARGET_SPECS, *FAMILY_TARGET_SPECS, *MLA_TARGET_SPECS, *MULTI_GPU_TARGET_SPECS)}
    names |= set(NEW_TARGETS)
    assert names <= set(TARGET_LABELS), sorted(names - set(TARGET_LABELS))
    assert all(TARGET_LABELS[n] and "_" not in TARGET_LABELS[n] for n in names)  # words, not ids
    assert {n: TARGET_LABELS[n] for n in NEW_TARGETS} == NEW_TARGETS
    assert label_of("decode_large_vs_cudnn") == "Paged decode vs cuDNN on contiguous KV, large shapes"
    assert label_of("a_newer_target") == "a_newer_target"  # a newer file's id is shown as it is


def _planner_text(capsys) -> str:
    argv = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", "fp8", "--weight-dtype", "fp8",
            "--policy", "pow2", "--context", "2048", "--max-context", "8192"]
    assert planner_cli.main(argv) == 0
    return capsys.readouterr().out


def _simulation(capsys, *argv: str) -> str:
    assert simulation_cli.main(list(argv)) == 0
    return capsys.readouterr().out


def _sizer(capsys, *extra: str) -> str:
    argv = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--kv-dtype", "fp8", "--weight-dtype", "fp8", *extra]
    assert sizing_cli.main(argv) == 0
    return capsys.readouterr().out


def test_fp8_and_the_allocators_read_the_same_on_the_pages_and_in_the_clis(capsys):
    planner_text = _planner_text(capsys)
    assert f"{FP8} KV, {FP8} weights" in planner_text and f"{PAGED} against {ORCA_POW2}" in planner_text
    snapshot = ["snapshot", "--dist", "fixed", "--length", "100", "--kv-budget-tokens", "1000", "--n", "200"]
    assert f"{ORCA_MAX} [max]" in _simulation(capsys, *snapshot)
    assert json.loads(_simulation(capsys, *snapshot, "--json"))["policy"] == "max"  # JSON keeps the value
    timeline = ["timeline", "--dist", "fixed", "--length", "100", "--kv-budget-tokens", "1000", "--n", "20",
                "--rate", "5", "--max-context", "128", "--max-num-batched-tokens", "256"]
    assert f"{PAGED} [paged]" in _simulation(capsys, *timeline, "--allocator", "paged")
    sizer_text = _sizer(capsys)
    # The worked formula and the reference table's FP8 rows (160 KiB per token: 80 × 8 × 128 × 2 × 1 B).
    assert f"Bytes per token, {FP8}: 163,840 × 1 B = 160 KiB" in sizer_text
    assert f"Weights, {FP8}: 70.6 B params × 1 B" in sizer_text
    assert re.search(rf"^  {re.escape(FP8)} +H100 SXM +KV +536\.9 GB", sizer_text, re.M)
    sized = json.loads(_sizer(capsys, "--json"))
    assert (sized["kv_dtype"], sized["weight_dtype"]) == ("fp8", "fp8")  # JSON keeps the values

    planner = open_page("4_planner.py", {"kv": "fp8", "policy": "pow2"})
    assert FP8 in planner.selectbox(key="planner.kv").options
    assert planner.selectbox(key="planner.policy").options == [ORCA_MAX, ORCA_POW2,
                                                                "Contiguous, reserve the exact length (Orca-Oracle)"]
    table = next(d.value for d in planner.dataframe if "Allocator" in d.value.columns)
    assert list(table["Allocator"]) == [ORCA_POW2, PAGED]
    cluster = open_page("5_cluster.py", {"kv": "fp8"})
    assert cluster.selectbox(key="cluster.kv").options[PRECISION_NAMES.index("fp8")] == FP8
    sizer = open_page("1_sizer.py", {"kv": "fp8"})
    assert sizer.selectbox(key="sizer.kv_dtype").options[PRECISION_NAMES.index("fp8")] == FP8
    assert f" · {FP8} KV · H100 SXM" in "\n".join(m.value for m in sizer.markdown)
    reference = next(d.value for d in sizer.dataframe if "KV precision" in d.value.columns)
    assert FP8 in set(reference["KV precision"])
    for at in (planner, cluster):  # the glossary in the sidebar names both
        glossary = next(e for e in at.sidebar.expander if e.label == "Glossary")
        shown = "\n".join(m.value for m in glossary.markdown)
        assert f"{FP8} (`fp8`)" in shown and f"{ORCA_MAX} (`contiguous-max`)" in shown and "**TPOT**" in shown
