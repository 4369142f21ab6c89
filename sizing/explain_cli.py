"""``python -m sizing explain-log PATH|-``: parse a vLLM start-up log and reproduce its figures
(JSON), with the model given as for ``python -m sizing`` (a preset, a config, a Hub id or a
manual shape) and the settings the log may not state as options.

Without a model option the log's own model name is matched to the catalogue
(:mod:`sizing.engine.log_model`); when it names no catalogue model the output is still JSON, exit
0: every figure parsed, the catalogue models whose KV bytes fit them, what a reconstruction
would need, and the fix for a refused start-up.

Under pipeline parallelism (``--pp``, or the log's ``pipeline_parallel_size``) the layer split is
``--pp-layer-partition 16,32`` when given, else the one the log's text states
(``VLLM_PP_LAYER_PARTITION=…`` in a pasted command, or vLLM's "Hidden layers were unevenly
partitioned: [14,13]"), else vLLM's even split.

It sits above both CLIs: the model options come from :mod:`sizing.cli` and the engine's bounds
from :mod:`sizing.engine.cli`, which therefore needs nothing from :mod:`sizing.cli`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from inputs.cli import OneLineParser, arg_type, choice, run_cli
from inputs.uploads import dumps_strict, read_capped, read_path_capped
from inputs.bounds import Bound
from sizing.cli import BLOCK_SIZE, CONTEXT, _tp_degree, add_model_arguments, model_from_args, option_for_field
from sizing.engine.cli import (
    BATCHED_TOKENS, ENGINE_OPTION_FOR_FIELD, NUM_SEQS, activation_from_config, add_hybrid_arguments,
    hybrid_options_from_args, pp_layer_partition_arg, vllm_version_arg,
)
from sizing.engine.explain import explain_log
from sizing.engine.startup_fix import startup_fix
from sizing.engine.groups import GroupingRule
from sizing.engine.log_model import identify_log_model
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import MAX_PP, log_layer_partition
from sizing.engine.vllm_log import MAX_LOG_BYTES, ParsedLog, parse_vllm_log
from sizing.presets import get_preset

__all__ = ["explain_main"]

PROG = "python -m sizing explain-log"
PP = Bound(field="pp", low=1, high=MAX_PP, integer=True, unit="stages")


def _explain_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Parse a vLLM start-up log and reproduce its figures (JSON).")
    parser.add_argument("path", metavar="PATH", help="the log file, or - for standard input")
    add_model_arguments(parser)
    group = parser.add_argument_group("settings the log may not state")
    group.add_argument("--tp", type=_tp_degree, metavar="N", help="tensor-parallel size")
    group.add_argument("--pp", type=arg_type(PP), metavar="N", help="pipeline-parallel size (1 to 64)")
    group.add_argument("--pp-layer-partition", type=pp_layer_partition_arg, metavar="N,N,...",
                       help="vLLM's VLLM_PP_LAYER_PARTITION, the layers of each stage (16,32); sets --pp when the "
                            "log does not; default: the log's, else vLLM's even split")
    group.add_argument("--kv-dtype", type=choice(("bf16", "fp16", "fp32", "fp8")), metavar="{bf16,fp16,fp32,fp8}")
    group.add_argument("--context", type=arg_type(CONTEXT), metavar="TOKENS", help="max_model_len")
    group.add_argument("--block-size", type=arg_type(BLOCK_SIZE), metavar="N")
    group.add_argument("--max-num-batched-tokens", type=arg_type(BATCHED_TOKENS), metavar="N")
    group.add_argument("--max-num-seqs", type=arg_type(NUM_SEQS), metavar="N")
    group.add_argument("--engine-rule", type=choice(tuple(GroupingRule)), metavar="{" + ",".join(GroupingRule) + "}")
    group.add_argument("--vllm-version", type=vllm_version_arg, metavar="X.Y.Z",
                       help="the vLLM release that wrote the log (how it counts 'GPU KV cache size'); default: the "
                            "log's own, else both counts are tried")
    add_hybrid_arguments(group, defaults=False)
    return parser


def _log_bytes(path: str) -> bytes:
    if path == "-":
        return read_capped(sys.stdin.buffer, MAX_LOG_BYTES, field="log")
    return read_path_capped(path, MAX_LOG_BYTES, field="log")


def _unexplained(parsed: ParsedLog, identified, args: argparse.Namespace) -> dict:
    """What a log says when no model shape is known: its figures, the candidates, the needs."""
    needs = ["a model shape: --model ID (a catalogue id), --config config.json, or a manual shape "
             "(--layers, --q-heads, --kv-heads, --head-dim, --params)"]
    if parsed.available_gib is None:
        needs.append("the log's 'Available KV cache memory' line, to rebuild tokens and blocks")
    if parsed.kv_tokens is None and parsed.gpu_blocks is None and parsed.concurrency is None:
        needs.append("the log's 'GPU KV cache size' or 'Maximum concurrency' line, to check a reconstruction")
    if parsed.tp is None and args.tp is None:
        needs.append("the tensor-parallel size (--tp): the log does not state it (1 is assumed)")
    if parsed.kv_cache_dtype is None and parsed.dtype is None and args.kv_dtype is None:
        needs.append("the KV-cache dtype (--kv-dtype): the log does not state it (bf16 is assumed)")
    fix = startup_fix(parsed, tp=args.tp, max_model_len=args.context,
                      max_num_batched_tokens=args.max_num_batched_tokens or parsed.max_num_batched_tokens or 8192)
    return {"parsed": parsed.as_dict(), **identified.as_dict(), "needs": needs,
            "startup_fix": None if fix is None else fix.as_dict(), "checks": [], "all_within": None}


def explain_main(argv: Sequence[str] | None = None) -> int:
    """``python -m sizing explain-log``: exit 0 with JSON, or 2 with one line naming the input."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = _explain_parser().parse_args(argv)
        raw = _log_bytes(args.path)
        parsed = parse_vllm_log(raw)
        partition = args.pp_layer_partition or log_layer_partition(raw.decode("utf-8", "replace"))
        manual = any(getattr(args, n) is not None for n in ("layers", "q_heads", "kv_heads", "head_dim", "params"))
        activation = None
        identified = identify_log_model(parsed)
        if args.model is None and args.config is None and not manual:
            entry = identified.match.entry
            if entry is None:
                print(dumps_strict(_unexplained(parsed, identified, args), indent=2))
                return 0
            model, activation = entry.shape, ActivationShape.from_config(entry.config)
        else:
            model = model_from_args(args)
            if args.config is not None:
                activation = activation_from_config(args.config)
            elif args.model is not None and not manual:
                activation = ActivationShape.from_config(get_preset(args.model).config)
        explanation = explain_log(parsed, model, activation=activation, tp=args.tp, pp=args.pp,
                                  pp_layer_partition=partition, kv_dtype=args.kv_dtype,
                                  max_model_len=args.context, block_size=args.block_size,
                                  max_num_batched_tokens=args.max_num_batched_tokens,
                                  max_num_seqs=args.max_num_seqs, rule=args.engine_rule,
                                  vllm_version=args.vllm_version, **hybrid_options_from_args(args))
        print(dumps_strict({**explanation.as_dict(), **identified.as_dict()}, indent=2))
        return 0

    return run_cli(PROG, body, option_for_field=lambda f: ENGINE_OPTION_FOR_FIELD.get(f) or option_for_field(f))
