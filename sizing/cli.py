"""``python -m sizing``: the sizer from the command line (JSON with ``--json``, else a table).

Options: ``--model NAME`` | ``--model-id ORG/NAME`` (catalogue, else the Hub) | ``--config PATH`` |
``--layers N --q-heads N --kv-heads N --head-dim N --params N`` with ``--layout "18 full + 18
sliding(128)"`` (and ``--kv-lora-rank``, ``--qk-rope-head-dim``, ``--state`` for MLA and recurrent
layers); ``--kv-dtype``, ``--weight-dtype``, ``--context``, ``--users``,
``--gpu``, ``--usable``, ``--tp``, ``--block-size``, ``--kv-budget-gib``. Bad arguments exit
with status 2 and one line naming the argument: no traceback, no usage block.

The option groups (``add_*_arguments``) and the functions that turn parsed options into library
objects (:func:`model_from_args`, :func:`precisions_from_args`, :func:`gpu_from_args`) are public
so that other command lines built on the sizer's inputs (the capacity planner's) parse them the
same way. ``python -m sizing plan ...`` is forwarded by ``sizing/__main__.py`` to
``python -m planner``, by module name, so this package never imports the planner.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from hardware.gpus import (
    CUSTOM_BANDWIDTH_TBS,
    CUSTOM_MEMORY_GB,
    DEFAULT_GPU,
    GPU,
    GPU_IDS,
    custom_gpu,
    get_gpu,
    gpus,
)
from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli
from inputs.errors import InputError
from inputs.uploads import dumps_strict, read_path_capped
from sizing.answer import Answer, EngineSettings, answer_for, engine_weights_total
from sizing.engine.cli import (
    ENGINE_OPTION_FOR_FIELD,
    gib_bytes,
    add_engine_arguments,
    engine_request_from_args,
    format_engine,
    pp_layer_partition_arg,
    run_engine,
)
from sizing.errors import ConfigError
from sizing.hf_config import MAX_CONFIG_BYTES, parse_hf_config
from sizing.kv import DEFAULT_BLOCK_SIZE, DEFAULT_USABLE_FRACTION
from sizing.models import ModelShape
from sizing.precisions import DEFAULT_GROUP_SIZE, PRECISION_NAMES, WEIGHT_FORMAT_NAMES, Precision, get_precision
from sizing.catalogue import catalogue_records, find_entry, get_entry, search_catalogue
from sizing.hub import HubModel, check_repo_id, resolve_model_id
from sizing.layers import LayerKind
from sizing.layout_spec import KV_LORA_RANK, QK_ROPE_HEAD_DIM, layout_shape, parse_layout, parse_state, parse_terms
from sizing.presets import DEFAULT_PRESET, PRESET_IDS, get_preset, presets
from sizing.weights import AUTO, resolve_weight_precision
from sizing.report import SizingReport, SizingRequest, size_deployment
from units import GiB, UnitSystem, both, format_bytes

PROG = "python -m sizing"

# ---- ranges of the numeric options (also shown by --help) -----------------------------------
# Far past any published model or deployment, so only typing mistakes and hostile values
# (1e308, nan) are refused; the library's own checks (heads that divide, TP groups) still apply.
LAYERS = Bound(field="layers", low=1, high=10_000, integer=True)
Q_HEADS = Bound(field="q_heads", low=1, high=65_536, integer=True)
KV_HEADS = Bound(field="kv_heads", low=1, high=65_536, integer=True)
HEAD_DIM = Bound(field="head_dim", low=1, high=65_536, integer=True)
PARAMS = Bound(field="params", low=1, high=10**15, integer=True, unit="parameters")
GROUP_SIZE = Bound(field="group_size", low=0, high=1_048_576, integer=True, unit="values")
USABLE = Bound(field="usable", low=0.01, high=1)  # under 1 % of memory holds no model
TP = Bound(field="tp", low=1, high=1024, integer=True, unit="GPUs")
N_GPUS = Bound(field="gpus", low=1, high=1_000_000, integer=True, unit="GPUs")
GPUS_PER_NODE = Bound(field="gpus_per_node", low=1, high=1024, integer=True, unit="GPUs")
CONTEXT = Bound(field="context", low=1, high=10_000_000, integer=True, unit="tokens")
USERS = Bound(field="users", low=1, high=10_000_000, integer=True, unit="users")
BLOCK_SIZE = Bound(field="block_size", low=1, high=65_536, integer=True, unit="tokens")
KV_BUDGET_GIB = Bound(field="kv_budget_gib", low=0, high=1_000_000, unit="GiB")

# Library field -> the option that sets it, so errors raised deep in the library still name
# what the user typed.
_OPTION_FOR_FIELD = {
    "model": "--model", "config": "--config", "model_id": "--model-id", "model_source": "--model-id",
    "layers": "--layers", "q_heads": "--q-heads",
    "kv_heads": "--kv-heads", "head_dim": "--head-dim", "params": "--params",
    "kv_dtype": "--kv-dtype", "weight_dtype": "--weight-dtype",
    "kv_dtype_group_size": "--kv-group-size", "weight_dtype_group_size": "--weight-group-size",
    "context": "--context", "users": "--users", "gpu": "--gpu", "usable_fraction": "--usable",
    "tp": "--tp", "n_gpus": "--gpus", "block_size": "--block-size",
    "kv_budget_bytes": "--kv-budget-gib", "gpus_per_node": "--gpus-per-node",
    "gpu_memory_gb": "--gpu-memory-gb", "gpu_bandwidth_tbs": "--gpu-bandwidth-tbs",
    "gpu_bf16_tflops": "--gpu-bf16-tflops",
}
_MANUAL_OPTIONS = ("layers", "q_heads", "kv_heads", "head_dim", "params")
_PARAM_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def option_for_field(field: str) -> str:
    """The option that sets library field ``field`` (``"kv_heads"`` → ``"--kv-heads"``)."""
    return _OPTION_FOR_FIELD.get(field, f"--{field.replace('_', '-')}")


# ---- argument types beyond inputs.cli's: a parameter count with a suffix, a TP degree --------
def _param_count(text: str) -> int:
    """``70000000000``, ``70e9``, ``70B`` or ``7.24b`` → an integer parameter count in PARAMS."""
    raw = text.strip().replace("_", "").replace(",", "")
    scale = 1
    if raw and raw[-1].lower() in _PARAM_SUFFIXES:
        scale, raw = _PARAM_SUFFIXES[raw[-1].lower()], raw[:-1]
    try:
        if len(raw) > 64:
            raise ValueError(raw)
        value = Fraction(raw) * scale
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"must be a parameter count such as 70e9 or 70B, got {text[:40]!r}") from None
    try:
        return PARAMS.check(round(value) if value >= 1 else 0, shown_as=text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _tp_degree(text: str) -> int:
    """A tensor-parallel degree: a power of two in TP (GPUs split a layer's heads in halves)."""
    value = arg_type(TP)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two from 1 to 1,024, got {text!r}")
    return value


def _help(text: str, bound: Bound) -> str:
    return f"{text} ({help_range(bound)})"


# ---- option groups ---------------------------------------------------------------------------
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model`` | ``--config`` | the manual shape (whose options also override a preset)."""
    group = parser.add_argument_group("model (one of: a preset, a config.json, or a manual shape)")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--model", type=choice(PRESET_IDS), metavar="NAME",
                        help=f"preset id (default {DEFAULT_PRESET}): {', '.join(PRESET_IDS)}")
    source.add_argument("--config", type=Path, metavar="PATH",
                        help=f"a Hugging Face config.json (at most {MAX_CONFIG_BYTES:,} bytes)")
    source.add_argument("--model-id", type=_model_id, metavar="ORG/NAME",
                        help="a catalogue id or Hugging Face repo id (e.g. Qwen/Qwen3-32B): from the "
                             "catalogue when it ships it (see `python -m sizing models`), else from the Hub "
                             "(HF_TOKEN for gated repos, HF_ENDPOINT for a mirror)")
    group.add_argument("--layers", type=arg_type(LAYERS), metavar="N", help=_help("transformer layers", LAYERS))
    group.add_argument("--q-heads", type=arg_type(Q_HEADS), metavar="N", help=_help("query (attention) heads", Q_HEADS))
    group.add_argument("--kv-heads", type=arg_type(KV_HEADS), metavar="N",
                       help=_help("KV heads (GQA groups), not query heads", KV_HEADS))
    group.add_argument("--head-dim", type=arg_type(HEAD_DIM), metavar="N", help=_help("values per head", HEAD_DIM))
    group.add_argument("--params", type=_param_count, metavar="N",
                       help=_help("parameters, e.g. 70e9 or 70B", PARAMS))
    group.add_argument("--layout", metavar="TEXT",
                       help='layer kinds: "18 full + 18 sliding(128)" (in order) or "5 sliding(1024) : 1 full" '
                            "(a period repeated over --layers); kinds full, sliding(W), chunked(C), mla, mamba, "
                            "linear, mlp. Also overrides a preset's or config's layers")
    group.add_argument("--kv-lora-rank", type=arg_type(KV_LORA_RANK), metavar="N",
                       help=_help("MLA latent width, for mla layers", KV_LORA_RANK))
    group.add_argument("--qk-rope-head-dim", type=arg_type(QK_ROPE_HEAD_DIM), metavar="N",
                       help=_help("MLA decoupled RoPE key cached beside the latent (default 0)", QK_ROPE_HEAD_DIM))
    group.add_argument("--state", metavar="SIZES",
                       help='state of each mamba / linear layer: "kernel=4 channels=8192 heads=128 per_head=8192" '
                            "(plus groups=N group_channels=N for Mamba2 B/C groups, dtype=bf16|fp16|fp32)")


def add_precision_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kv-dtype``, ``--weight-dtype`` and their integer formats' group sizes."""
    group = parser.add_argument_group("precision")
    names = "{" + ",".join(PRECISION_NAMES) + "}"
    group.add_argument("--kv-dtype", type=choice(PRECISION_NAMES), default="bf16", metavar=names,
                       help="KV-cache precision (default bf16)")
    weight_names = (*WEIGHT_FORMAT_NAMES, AUTO)
    group.add_argument("--weight-dtype", type=choice(weight_names), default=None,
                       metavar="{" + ",".join(weight_names) + "}",
                       help="weight format (default bf16; with --model-id: auto, the model's quantization_config)")
    for what, option in (("KV values", "--kv-group-size"), ("weights", "--weight-group-size")):
        group.add_argument(option, type=arg_type(GROUP_SIZE), default=DEFAULT_GROUP_SIZE, metavar="N",
                           help=_help(f"{what} per fp16 scale for int formats; 0: no scales "
                                      f"(default {DEFAULT_GROUP_SIZE})", GROUP_SIZE))


def add_hardware_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu`` or a custom GPU, ``--usable``, ``--tp``, ``--gpus``, ``--gpus-per-node``."""
    group = parser.add_argument_group("hardware")
    group.add_argument("--gpu", type=choice(GPU_IDS), default=None, metavar="NAME",
                       help=f"GPU id (default {DEFAULT_GPU}): {', '.join(GPU_IDS)}")
    group.add_argument("--gpu-memory-gb", type=arg_type(CUSTOM_MEMORY_GB), metavar="GB",
                       help=_help("a custom GPU with this much memory (vendor GB) instead of --gpu",
                                  CUSTOM_MEMORY_GB))
    group.add_argument("--gpu-bandwidth-tbs", type=arg_type(CUSTOM_BANDWIDTH_TBS), default=1.0,
                       metavar="TB/s", help=_help("custom GPU memory bandwidth (default 1)",
                                                  CUSTOM_BANDWIDTH_TBS))
    group.add_argument("--usable", type=arg_type(USABLE), default=DEFAULT_USABLE_FRACTION, metavar="FRACTION",
                       help=_help("share of GPU memory for weights + KV (default 0.9)", USABLE))
    group.add_argument("--tp", type=_tp_degree, default=1, metavar="N",
                       help="tensor-parallel size, a power of two from 1 to 1,024 (default 1)")
    group.add_argument("--gpus", type=arg_type(N_GPUS), metavar="N",
                       help=_help("GPUs deployed, for the KV budget and reverse questions (default: --tp)",
                                  N_GPUS))
    group.add_argument("--gpus-per-node", type=arg_type(GPUS_PER_NODE), default=8, metavar="N",
                       help=_help("default 8", GPUS_PER_NODE))


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """``--context``, ``--users``, ``--block-size``, ``--kv-budget-gib``."""
    group = parser.add_argument_group("workload and KV budget")
    group.add_argument("--context", type=arg_type(CONTEXT), default=32_768, metavar="TOKENS",
                       help=_help("tokens per user at full context (default 32768)", CONTEXT))
    group.add_argument("--users", type=arg_type(USERS), default=100, metavar="N",
                       help=_help("concurrent users (default 100)", USERS))
    group.add_argument("--block-size", type=arg_type(BLOCK_SIZE), default=DEFAULT_BLOCK_SIZE, metavar="N",
                       help=_help(f"tokens per KV block (default {DEFAULT_BLOCK_SIZE}, as vLLM)", BLOCK_SIZE))
    group.add_argument("--kv-budget-gib", type=arg_type(KV_BUDGET_GIB), metavar="X",
                       help=_help("a KV budget in GiB over the whole TP group (all its GPUs together): prints "
                                  "kv_capacity_tokens (whole blocks) and max_concurrency; for vLLM's per-GPU "
                                  "figure use --kv-budget-gib-per-gpu", KV_BUDGET_GIB))


def _epilog() -> str:
    models = "\n".join(f"  {p.id:<22} {p.name}" for p in presets())
    devices = "\n".join(f"  {g.id:<22} {g.name}, {g.memory_gb:g} GB, {g.bandwidth_tbs:g} TB/s" for g in gpus())
    return f"models:\n{models}\n\nGPUs:\n{devices}\n\nExit status 2 on a bad argument, with one line naming it."


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Size an LLM's KV cache and the GPUs it needs (reference-page count and a TP plan).",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_model_arguments(parser)
    add_precision_arguments(parser)
    add_workload_arguments(parser)
    add_hardware_arguments(parser)
    add_engine_arguments(parser)
    parser.add_argument("--pp-layer-partition", type=pp_layer_partition_arg, metavar="N,N,...",
                        help="with --engine vllm: vLLM's VLLM_PP_LAYER_PARTITION, the layers of each pipeline stage "
                             "(16,32: PP 2); the engine figures are then the stage's that holds the fewest requests")
    return parser


# ---- parsed options -> library objects -------------------------------------------------------
def hub_model_from_args(args: argparse.Namespace) -> HubModel | None:
    """The model ``--model-id`` names (catalogue first, else the Hub); None without one.

    Kept on ``args`` once resolved, so that the options read twice (auto weights, then the
    request) ask the Hub once per run.
    """
    model_id = getattr(args, "model_id", None)
    if model_id is None:
        return None
    resolved = vars(args).get("_resolved_model_id")
    if resolved is None or resolved[0] != model_id:
        resolved = (model_id, resolve_model_id(model_id))
        vars(args)["_resolved_model_id"] = resolved
    return resolved[1]


def model_from_args(args: argparse.Namespace) -> ModelShape:
    """The model the options describe: a preset, a catalogue or Hub id, a config.json (read
    with a size cap) or a manual shape; manual options (and ``--layout``) given with one of
    the others override its fields."""
    manual = {name: getattr(args, name) for name in _MANUAL_OPTIONS if getattr(args, name) is not None}
    layout = getattr(args, "layout", None)
    _check_layout_options(args)
    if getattr(args, "model_id", None) is not None:
        base = hub_model_from_args(args).shape
    elif args.config is not None:
        data = read_path_capped(str(args.config), MAX_CONFIG_BYTES, field="config")
        try:
            base = parse_hf_config(data, name=args.config.stem if args.config.name != "config.json" else None)
        except ConfigError as exc:
            raise UsageError(f"argument --config: {exc}") from None
    elif args.model is not None or not (manual or layout):
        base = get_preset(args.model or DEFAULT_PRESET).shape
    elif layout is not None:
        return _layout_model(args, manual, None)
    else:
        missing = [name for name in _MANUAL_OPTIONS if name not in manual]
        if missing:
            raise UsageError(f"argument --{missing[0].replace('_', '-')}: required for a manual shape "
                             f"(or give --model / --config)")
        return ModelShape(name="custom", **manual)
    if layout is not None:
        return _layout_model(args, manual, base)
    if not manual:
        return base
    # Manual options override the preset or config (e.g. --model llama-3.1-70b --kv-heads 64).
    if base.kv_lora_rank and {"kv_heads", "head_dim"} & manual.keys():
        manual = {**manual, "kv_lora_rank": 0, "qk_rope_head_dim": 0}
    return replace(base, name=f"{base.name} (edited)", **manual)


def _check_layout_options(args: argparse.Namespace) -> None:
    """The latent and state options size layers of a ``--layout``; alone they would be ignored."""
    layout = getattr(args, "layout", None)
    for name in ("kv_lora_rank", "qk_rope_head_dim", "state"):
        if getattr(args, name, None) is None:
            continue
        option = f"--{name.replace('_', '-')}"
        if layout is None:
            raise UsageError(f"argument {option}: sizes the layers of --layout; give --layout too")
        terms, _ = parse_terms(layout)
        kinds = {term.kind for term in terms}
        wanted = {LayerKind.MAMBA, LayerKind.LINEAR} if name == "state" else {LayerKind.MLA}
        if not kinds & wanted:
            raise UsageError(f"argument {option}: --layout has no {' or '.join(sorted(wanted))} layers to size")


def _layout_model(args: argparse.Namespace, manual: dict[str, int], base: ModelShape | None) -> ModelShape:
    """A shape with ``--layout``'s layers: a manual one, or ``base`` with its layers replaced
    (its heads, latent and state kept unless given)."""
    layers = manual.get("layers", base.layers if base is not None else None)
    layout = parse_layout(args.layout, layers=layers)
    kind = layout.state_kind
    if args.state is not None and kind is not None:
        state = parse_state(args.state, kind)
    else:
        state = base.state if base is not None and base.state is not None and base.state.kind is kind else None
    if base is None:
        q_heads = manual.get("q_heads")
        kv_heads = manual.get("kv_heads", q_heads if layout.has_mla else None)
        shape = {"q_heads": q_heads, "kv_heads": kv_heads, "head_dim": manual.get("head_dim"),
                 "params": manual.get("params")}
        missing = [name for name, value in shape.items() if value is None]
        if missing:
            raise UsageError(f"argument --{missing[0].replace('_', '-')}: required with --layout "
                             "(or give --model / --model-id / --config)")
        name = "custom"
    else:
        shape = {"q_heads": base.q_heads, "kv_heads": base.kv_heads, "head_dim": base.head_dim, "params": base.params,
                 **{k: v for k, v in manual.items() if k != "layers"}}
        name = f"{base.name} (edited)"
    lora = args.kv_lora_rank if args.kv_lora_rank is not None else (base.kv_lora_rank if base else None)
    rope = args.qk_rope_head_dim if args.qk_rope_head_dim is not None else (base.qk_rope_head_dim if base else 0)
    if layout.has_mla and not lora:
        raise UsageError("argument --kv-lora-rank: required for mla layers (the latent width)")
    return layout_shape(layout, **shape, kv_lora_rank=lora or 0, qk_rope_head_dim=rope, state=state, name=name)


def precisions_from_args(args: argparse.Namespace) -> tuple[Precision, Precision]:
    """The KV-cache and weight precisions (a group size of 0 means no scales)."""
    weights = args.weight_dtype or "bf16"
    if weights == AUTO:  # the model's own format, from its quantization_config
        return (get_precision(args.kv_dtype, group_size=args.kv_group_size or None, field="kv_dtype"),
                resolve_weight_precision(AUTO, model_from_args(args), group_size=args.weight_group_size or None))
    return (get_precision(args.kv_dtype, group_size=args.kv_group_size or None, field="kv_dtype"),
            get_precision(weights, group_size=args.weight_group_size or None, field="weight_dtype"))


def gpu_from_args(args: argparse.Namespace) -> GPU:
    """The catalogue GPU ``--gpu``, or the custom one ``--gpu-memory-gb`` describes."""
    if args.gpu_memory_gb is not None:
        if args.gpu is not None:
            raise UsageError("argument --gpu-memory-gb: not allowed with argument --gpu")
        return custom_gpu(args.gpu_memory_gb, bandwidth_tbs=args.gpu_bandwidth_tbs)
    return get_gpu(args.gpu or DEFAULT_GPU)


def request_from_args(args: argparse.Namespace, *, context: int | None = None) -> SizingRequest:
    """The :class:`SizingRequest` the parsed options describe (library errors propagate).

    ``context`` replaces ``--context`` for a command line whose context option means something
    else (the planner's ``--max-context`` is the engine's ``max_model_len``)."""
    gpu = gpu_from_args(args)
    budget = None
    if getattr(args, "kv_budget_gib", None) is not None:
        budget = math.floor(Fraction(repr(args.kv_budget_gib)) * GiB)
    model: ModelShape | str = model_from_args(args)
    if getattr(args, "model_id", None) is None and args.config is None:
        preset = get_preset(args.model or DEFAULT_PRESET)
        if model == preset.shape:  # the catalogue's model as it is: keep its id (its repo, its config)
            model = preset.id
    return SizingRequest(
        model=model,
        kv_dtype=args.kv_dtype,
        weight_dtype=args.weight_dtype or (AUTO if getattr(args, "model_id", None) else "bf16"),
        kv_group_size=args.kv_group_size or None,
        weight_group_size=args.weight_group_size or None,
        context=args.context if context is None else context,
        users=args.users,
        gpu=gpu,
        usable_fraction=args.usable,
        tp=args.tp,
        n_gpus=getattr(args, "gpus", None),
        block_size=args.block_size,
        kv_budget_bytes=budget,
        gpus_per_node=args.gpus_per_node,
        model_source=_model_source(args),
    )


def _model_source(args: argparse.Namespace) -> str:
    """Where the model came from: the catalogue (an id), the Hub, a config.json, or a manual shape."""
    hub = hub_model_from_args(args)
    if hub is not None:
        return hub.source
    if args.model is not None:
        return "catalogue"
    if args.config is not None:
        return "config"
    manual = any(getattr(args, name) is not None for name in _MANUAL_OPTIONS)
    return "manual" if manual or getattr(args, "layout", None) is not None else "catalogue"


def _model_id(text: str) -> str:
    """A catalogue id (as the catalogue spells it) or a well-formed Hub repo id; anything else
    (a URL, a path, an unknown bare name) is refused before any request."""
    entry = find_entry(text)
    if entry is not None:
        return entry.id if "/" not in text else entry.repo
    try:
        if "/" not in text:
            get_entry(text)  # raises, naming near matches in the catalogue
        return check_repo_id(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def models_main(argv: Sequence[str]) -> int:
    """``python -m sizing models [--json] [--search TEXT]``: the shipped catalogue."""
    parser = OneLineParser(prog=f"{PROG} models", description="List the shipped model catalogue.")
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.add_argument("--search", default="", metavar="TEXT", help="only models matching every word")

    def body() -> int:
        args = parser.parse_args(argv)
        wanted = {e.id for e in search_catalogue(args.search[:200])}
        records = [r for r in catalogue_records() if r["id"] in wanted]
        if args.json:
            print(dumps_strict(records, indent=2))
        else:
            print("\n".join(f"{r['id']:<22} {r['params'] / 1e9:>8,.1f} B  {r['layout']}"
                             f"{'' if r['verified'] else '  (sizing keys, unverified)'}" for r in records))
        return 0

    return run_cli(f"{PROG} models", body)


def engine_settings_from_args(args: argparse.Namespace) -> EngineSettings:
    """The engine settings the answer follows (the engine options, with or without ``--engine``);
    a measured per-GPU budget belongs to ``--tp``."""
    return EngineSettings(
        gpu_memory_utilization=args.gpu_memory_utilization, max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs, rule=args.engine_rule, enforce_eager=args.enforce_eager,
        kv_budget_bytes_per_gpu=gib_bytes(args.kv_budget_gib_per_gpu), activation_bytes=gib_bytes(args.activation_gib),
        non_torch_bytes=gib_bytes(args.non_torch_gib), cuda_graph_bytes=gib_bytes(args.cuda_graph_gib),
        total_bytes_per_gpu=gib_bytes(args.gpu_total_gib), measured_tp=args.tp,
        cuda_graphs_profiled=not args.cuda_graphs_not_profiled, vllm_version=args.vllm_version,
        mxfp4_backend=args.mxfp4_backend)


# ---- output --------------------------------------------------------------------------------
def format_answer(answer: Answer) -> list[str]:
    """The answer's lines: what to deploy, why, and the commands that launch it."""
    lines = [f"Answer: {answer.summary}",
             f"  basis: {answer.rule}"]
    if answer.fits and answer.basis == "vllm":
        lines.append(f"  gpu_memory_utilization: {answer.planned_utilization:g} planned, "
                     f"{answer.required_utilization:g} needed for {answer.load_per_replica:,} requests per replica")
    lines += [f"  note: {n}" for n in answer.notes]
    if answer.timing is not None:  # only where a step model was at hand (python -m planner)
        lines.append(f"  {answer.timing.line}")
    if answer.vllm_command:
        lines += [f"  {answer.vllm_command}", f"  {answer.sglang_command}"]
    return lines


def format_table(report: SizingReport, answer: Answer) -> str:
    """A readable summary: the answer first, then the worked formula and the main figures in GiB
    and GB, each GPU count labelled with the question it answers."""
    r, d = report, UnitSystem.DECIMAL
    lines = [f"{r.model.name}: {r.model.summary}", f"GPU: {r.gpu.label}", "", *format_answer(answer), "",
             "Worked formula:"]
    lines += [f"  {step.text}" for step in r.steps]
    plan = r.plan
    rows = [
        ("per token", both(r.per_token_bytes)),
        (f"per user ({r.context:,} tokens)", both(r.per_user_bytes)),
        (f"KV, {r.users:,} users", both(r.kv_bytes_total)),
        ("weights", both(r.weights_bytes)),
        ("GPUs if memory were one pool (lower bound)", r.gpus.label),
        (f"KV per token per GPU at TP {r.tp}", format_bytes(r.per_gpu_kv_bytes_per_token)),
        ("reference formula's TP plan (vendor GB × usable)", plan.summary),
        (f"KV budget ({'given' if r.kv_budget_given else f'{r.n_gpus} GPUs'})", both(max(r.kv_budget_bytes, 0))),
        *((("capacity (state only)", f"no per-token KV: {r.capacity.max_concurrency:,.0f} sequence states"),)
          if not r.model.n_kv_layers else
          ((f"capacity ({r.block_size}-token blocks)", f"{r.capacity.blocks:,} blocks = {r.capacity.tokens:,} tokens"),
           (f"max concurrency at {r.context:,}", f"{r.capacity.max_concurrency:,.2f}"))),
        (f"most users at {r.context:,} on {r.n_gpus} GPUs deployed", f"{r.max_users:,}"
         + ("" if r.max_users >= r.users else f" (fewer than the {r.users:,} asked)")),
        (f"longest context for {r.users:,} users",
         ("unbounded (every layer slides)" if r.model.n_kv_layers else "unbounded (no layer's memory grows with "
          "length)") if r.max_context is None else f"{r.max_context:,} tokens"),
        ("without GQA (MHA)", f"{format_bytes(r.without_gqa.per_token_bytes)}/token, "
                               f"{both(r.without_gqa.kv_bytes_total)}, {r.without_gqa.gpus.label} GPUs"),
    ]
    width = max(len(k) for k, _ in rows)
    lines += ["", *(f"  {k:<{width}}  {v}" for k, v in rows)]
    if r.warnings:
        lines += ["", "Warnings:", *(f"  ! {w.message}" for w in r.warnings)]
    lines += ["", "Reference table (KV precision × GPU):"]
    for row in r.table:
        lines.append(f"  {row.kv_label:<12} {row.gpu_name:<22} KV {format_bytes(row.kv_all_users_bytes, d, largest='GB'):>12}"
                     f"  total {format_bytes(row.total_bytes, d, largest='GB'):>12}  {row.gpus.label} GPUs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0, or 2 for a bad argument)."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = build_parser().parse_args(argv)
        if args.pp_layer_partition is not None and not args.engine:
            raise UsageError("argument --pp-layer-partition: sizes the engine's pipeline stages; give --engine vllm")
        request = request_from_args(args)
        report = size_deployment(request)
        answer = answer_for(report, engine_settings_from_args(args))
        engine = None
        if args.engine:
            weights = engine_weights_total(report)
            engine = run_engine(engine_request_from_args(args, request.model, request.gpu, weights,
                                                         weight_dtype=report.weight_precision.name))
        if args.json:
            print(dumps_strict({**report.to_dict(), **(engine.to_dict() if engine else {}),
                                "answer": answer.as_dict()}, indent=2))
        else:
            print("\n".join([format_table(report, answer), *(format_engine(engine) if engine else [])]))
        return 0

    return run_cli(PROG, body, option_for_field=lambda f: ENGINE_OPTION_FOR_FIELD.get(f) or option_for_field(f))
