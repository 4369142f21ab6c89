"""``python -m kernels.bench``: the Triton kernels against PyTorch's best on the same GPU, in one run.

Prints a readable table; ``--json PATH`` also writes the records (``kernels.bench.records``),
with provenance and the benchmark's targets. Options narrow the sweep (``SweepConfig``); every
number has a range (shown in ``--help``), lists are comma-separated with an optional ``k``
(x 1024: ``1k,32k``) and heads are ``query:KV`` pairs (``32:8``). A bad argument ends as one
line naming the option and exit status 2, before the GPU is looked for. ``--families`` runs the
attention-families section instead (:mod:`kernels.bench.families`; ``--json`` then writes its records),
``--mla`` the MLA decode section. A catalogue model's layer mix is ``python -m planner layer-mix``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace

import torch

from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli, token_list
from inputs.errors import InputError, shown
from kernels.bench.families import FamilyConfig, family_config, format_families, run_families
from kernels.bench.family_records import write_families_json
from kernels.bench.mla_family import MlaRunConfig, format_mla, run_mla
from kernels.bench.mla_records import write_mla_json
from kernels.bench.records import write_bench_json
from kernels.bench.text_report import format_report
from kernels.bench.sweeps import ProgressEvent, SweepConfig, run_sweep
from kernels.bench.variants import DECODE_VARIANTS, variant_names

__all__ = ["PROG", "build_parser", "config_from_args", "main", "head_pairs", "variant_list"]

PROG = "python -m kernels.bench"
MAX_TOKENS = 2**20  # 1M tokens: past any context this benchmark's GPUs can hold for one sequence
BATCH = Bound(field="batch", low=1, high=4096, integer=True, unit="sequences")
CONTEXT = Bound(field="context", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
LONG_CONTEXT = Bound(field="long-context", low=0, high=MAX_TOKENS, integer=True, unit="tokens")
SEQ_LEN = Bound(field="seq-len", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
HEADS = Bound(field="heads", low=1, high=256, integer=True, unit="heads")
BLOCK_SIZE = Bound(field="block-size", low=1, high=256, integer=True, unit="tokens")  # the kernel's limit
REP_MS = Bound(field="rep-ms", low=0, high=60_000, low_open=True, unit="ms")
WINDOW = Bound(field="window", low=1, high=MAX_TOKENS, integer=True, unit="tokens")
ONLY = ("all", "decode", "prefill", "mixed", "memory", "page-sizes")


def _checked(bound: Bound, value: int, shown_as: str) -> int:
    try:
        return int(bound.check(value, shown_as=shown_as))
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def variant_list(text: str) -> tuple[str, ...]:
    """An argparse ``type``: tuning variants by name or KV format (:func:`kernels.bench.variants.variant_names`)."""
    if len(text) > 4096:
        raise argparse.ArgumentTypeError(f"expected variant names, got {len(text)} characters")
    try:
        return variant_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(repr(text), shown(text))) from None


def head_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """An argparse ``type``: comma-separated ``query:KV`` head pairs, each count in :data:`HEADS`,
    the query count a multiple of the KV count."""
    pairs = []
    for part in text.split(","):
        counts = part.split(":")
        if len(counts) != 2 or not all(c.strip().isdigit() for c in counts):
            raise argparse.ArgumentTypeError(f"expected query:KV pairs such as 32:8, got {shown(part)}")
        hq, hkv = (_checked(HEADS, int(c), c) for c in counts)
        if hq % hkv:
            raise argparse.ArgumentTypeError(f"{shown(part)}: query heads must be a multiple of KV heads")
        pairs.append((hq, hkv))
    return tuple(pairs)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="The Triton kernels against PyTorch's best on the same GPU, in one run.")
    p.add_argument("--json", metavar="PATH", help="also write the records as JSON to PATH")
    p.add_argument("--only", type=choice(ONLY), default="all", help=f"which part to run: {', '.join(ONLY)}")
    p.add_argument("--quick", action="store_true", help="a short sweep (SweepConfig.quick)")
    p.add_argument("--batch", type=token_list(BATCH), help=f"decode batches, e.g. 1,8,32 (each {help_range(BATCH)})")
    p.add_argument("--context", type=token_list(CONTEXT),
                   help=f"decode contexts, e.g. 1k,32k (each {help_range(CONTEXT)})")
    p.add_argument("--long-context", type=token_list(LONG_CONTEXT),
                   help=f"extra batch-1 contexts (default 128k; 0 for none; each {help_range(LONG_CONTEXT)})")
    p.add_argument("--heads", type=head_pairs,
                   help=f"decode query:KV heads, e.g. 32:8,64:8 (each count {help_range(HEADS)})")
    p.add_argument("--block-size", type=arg_type(BLOCK_SIZE),
                   help=f"decode KV block size (default 16; {help_range(BLOCK_SIZE)})")
    p.add_argument("--prefill-n", type=token_list(SEQ_LEN),
                   help=f"prefill sequence lengths, e.g. 1k,4k (each {help_range(SEQ_LEN)})")
    p.add_argument("--memory-n", type=token_list(SEQ_LEN),
                   help=f"naive-vs-tiled memory sweep lengths (each {help_range(SEQ_LEN)})")
    p.add_argument("--no-naive", action="store_true", help="skip naive attention in decode/prefill")
    p.add_argument("--no-fp8", action="store_true", help="skip the FP8-KV decode contender")
    p.add_argument("--rep-ms", type=arg_type(REP_MS),
                   help=f"do_bench repetition time per measurement ({help_range(REP_MS)})")
    p.add_argument("--eager", action="store_true", help="decode: time plain calls, no CUDA graphs")
    p.add_argument("--no-peers", action="store_true", help="decode: skip cuDNN's and FlashInfer's paged kernels")
    p.add_argument("--variant", type=variant_list, metavar="NAMES",
                   help="decode: also time these tuning variants (names, or bf16/fp8/int4 for all of a format)")
    p.add_argument("--list-variants", action="store_true", help="print the tuning variants' names and exit")
    p.add_argument("--families", action="store_true",
                   help="run the attention-families section instead: sliding windows and sinks against full "
                        "attention (takes --batch, --context, --window, --heads, --block-size, --rep-ms, --eager, "
                        "--no-fp8, --quick)")
    p.add_argument("--mla", action="store_true",
                   help="run the MLA decode section instead: DeepSeek-V3's latent (512 + 64), 128 and 16 heads, "
                        "against the ceilings and SGLang's Triton MLA decode (its source: scripts/peer_sources.sh)")
    p.add_argument("--window", type=token_list(WINDOW),
                   help=f"--families: sliding windows, e.g. 128,1k,4k (each {help_range(WINDOW)}, under every context)")
    return p


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    cfg = SweepConfig.quick() if args.quick else SweepConfig()
    changes: dict[str, object] = {}
    if args.only != "all":
        changes.update(run_decode=args.only == "decode", run_prefill=args.only == "prefill",
                       run_mixed=args.only == "mixed", run_memory=args.only == "memory",
                       run_page_sizes=args.only == "page-sizes")
    if args.long_context is not None:
        changes["b1_long_contexts"] = tuple(c for c in args.long_context if c > 0)
    for option, fld in (("batch", "decode_batches"), ("context", "decode_contexts"), ("heads", "decode_heads"),
                        ("block_size", "block_size"), ("prefill_n", "prefill_ns"), ("memory_n", "memory_ns"),
                        ("rep_ms", "rep_ms")):
        if getattr(args, option):
            changes[fld] = getattr(args, option)
    if args.variant:
        changes["variants"] = args.variant
    for flag, fld in (("no_naive", "naive"), ("no_fp8", "decode_fp8"), ("eager", "cuda_graphs"), ("no_peers", "peers")):
        if getattr(args, flag):
            changes[fld] = False
    return replace(cfg, **changes)


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.list_variants:
        for name, v in DECODE_VARIANTS.items():
            print(f"{name:56s} {'default ' if v.default else '        '}{v.config}")
        return 0
    if args.window and not args.families:
        raise UsageError("argument --window: goes with --families")
    if args.mla and (args.families or args.window):
        raise UsageError("argument --mla: runs its own section; leave out --families and --window")
    families = _families_config(args) if args.families else None  # a bad window is refused before the GPU check
    if not torch.cuda.is_available():
        print("kernels.bench: no CUDA GPU here; the benchmark needs one (tests run the kernels "
              "under the Triton interpreter instead).", file=sys.stderr)
        return 2
    command = shlex.join([sys.executable, "-m", "kernels.bench", *argv])

    def show(ev: ProgressEvent) -> None:
        print(f"[{ev.done}/{ev.total}] {ev.message}", file=sys.stderr, flush=True)

    if args.mla:
        mla = run_mla(MlaRunConfig(peers=not args.no_peers), progress=show, command=command)
        print(format_mla(mla))
        if args.json:
            print(f"\nwrote {write_mla_json(mla, args.json)}")
        return 0
    if families is not None:
        fam = run_families(families, progress=show, command=command)
        print(format_families(fam))
        if args.json:
            print(f"\nwrote {write_families_json(fam, args.json)}")
        return 0
    report = run_sweep(config_from_args(args), progress=show, command=command)
    print(format_report(report))
    if args.json:
        path = write_bench_json(report, args.json)
        print(f"\nwrote {path}")
    return 0


def _families_config(args: argparse.Namespace) -> FamilyConfig:
    """The families run's config from the options it takes; the main sweep's own options are refused."""
    if args.only != "all" or args.prefill_n or args.memory_n or args.long_context is not None or args.variant:
        raise UsageError("argument --families: runs its own section; leave out --only, --prefill-n, --memory-n, "
                         "--long-context and --variant")
    return family_config(quick=args.quick, batches=args.batch, contexts=args.context, windows=args.window,
                         heads=args.heads, block_size=args.block_size, rep_ms=args.rep_ms, fp8=not args.no_fp8,
                         cuda_graphs=not args.eager)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_cli(PROG, lambda: _run(argv))
