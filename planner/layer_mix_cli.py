"""``python -m planner layer-mix``: catalogue models' attention layer mixes timed on this GPU.

One layer of each kind a model has (:func:`planner.layer_mix.kinds_of`) is timed on the decode
kernels (:mod:`kernels.bench.layer_mix`) at every batch x context and KV format asked for; the
text gives each kind's time per layer, its layers, the step's attention time and each kind's
share; ``--json PATH`` writes the records (``kernels.bench.layer_mix_records``) with provenance.
Options are checked before the GPU is looked for: a bad one is one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from inputs.bounds import Bound
from inputs.cli import MAX_LIST_CHARS, OneLineParser, UsageError, arg_type, help_range, run_cli, token_list
from inputs.errors import InputError
from kernels.bench.layer_mix_records import MAX_MIX_BATCH, MAX_MIX_CONTEXT, write_layer_mix_json
from planner.layer_mix import DEFAULT_MODELS, DEFAULT_SHAPES, default_jobs
from sizing.catalogue import get_entry

__all__ = ["PROG", "build_parser", "main"]

PROG = "python -m planner layer-mix"
BATCH = Bound(field="batch", low=1, high=MAX_MIX_BATCH, integer=True, unit="sequences")
CONTEXT = Bound(field="context", low=1, high=MAX_MIX_CONTEXT, integer=True, unit="tokens")
TP = Bound(field="tp", low=1, high=64, integer=True, unit="ranks")
REP_MS = Bound(field="rep-ms", low=0, high=60_000, low_open=True, unit="ms")


def _models(text: str) -> tuple[str, ...]:
    """An argparse ``type``: comma-separated catalogue model ids (a near match is suggested)."""
    if len(text) > MAX_LIST_CHARS:
        raise argparse.ArgumentTypeError(f"expected catalogue model ids, got {len(text)} characters")
    ids = tuple(part.strip() for part in text.split(",") if part.strip())
    if not ids:
        raise argparse.ArgumentTypeError("expected catalogue model ids such as gpt-oss-120b,deepseek-v3")
    try:
        return tuple(get_entry(m).id for m in ids)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Time catalogue models' attention layer mixes on this GPU: one layer "
                                             "of each kind, the step's attention time and each kind's share.")
    p.add_argument("--model", type=_models, help=f"catalogue model ids, comma-separated (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--batch", type=token_list(BATCH), help=f"batches, e.g. 1,32 (each {help_range(BATCH)})")
    p.add_argument("--context", type=token_list(CONTEXT), help=f"contexts, e.g. 8k,32k (each {help_range(CONTEXT)})")
    p.add_argument("--tp", type=arg_type(TP), default=1, help=f"tensor-parallel degree (default 1; {help_range(TP)})")
    p.add_argument("--no-fp8", action="store_true", help="bf16 KV only (default: bf16 and FP8)")
    p.add_argument("--rep-ms", type=arg_type(REP_MS), default=20.0, help=f"do_bench time per measurement ({help_range(REP_MS)})")
    p.add_argument("--json", metavar="PATH", help="also write the records as JSON to PATH")
    return p


def _body(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    batches = args.batch or tuple(dict.fromkeys(b for b, _ in DEFAULT_SHAPES))
    contexts = args.context or tuple(dict.fromkeys(L for _, L in DEFAULT_SHAPES))
    shapes = DEFAULT_SHAPES if not (args.batch or args.context) else tuple((b, L) for b in batches for L in contexts)
    try:
        jobs = default_jobs(args.model or DEFAULT_MODELS, shapes, ("bf16",) if args.no_fp8 else ("bf16", "fp8"),
                            tp=args.tp)
    except InputError as exc:  # a TP the model's KV heads do not divide, named as the option
        raise UsageError(f"argument --{exc.field.replace('_', '-')}: {exc.message}") from None
    import torch

    if not torch.cuda.is_available():
        print(f"{PROG}: no CUDA GPU here; timing needs one (the tests run the kernels under the Triton "
              "interpreter instead).", file=sys.stderr)
        return 2
    from kernels.bench.layer_mix import format_layer_mixes, run_layer_mixes

    command = shlex.join([sys.executable, "-m", "planner", "layer-mix", *argv])
    report = run_layer_mixes(tuple(j.as_tuple() for j in jobs), rep_ms=args.rep_ms, command=command,
                             progress=lambda ev: print(f"[{ev.done}/{ev.total}] {ev.message}", file=sys.stderr,
                                                       flush=True))
    print(format_layer_mixes(report))
    if args.json:
        print(f"\nwrote {write_layer_mix_json(report, args.json)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_cli(PROG, lambda: _body(argv))
