"""``python -m planner cluster``: disaggregated prefill/decode pools beside the aggregated
deployment for one load, the role table with each pool's launch commands, and (``--pareto``)
the layout sweep; strict JSON with ``--json``.

Options: the sizer's model, precision and GPU options (``--tp`` is every role's default TP);
the load (``--rate``, ``--prompt-tokens``, ``--output-tokens``, ``--tpot-ms``, ``--ttft-ms``);
each role's layout (``--prefill-tp/-pp/-dp/-ep``, ``--decode-…``, ``--aggregated-…``, the
aggregated pool taking the decode layout unless given its own); the link between the pools
(``--link``, ``--nics``, ``--kv-buffer-device``); each GPU's KV budget (``--budget engine``, vLLM's
memory profile at ``--usable`` as its ``--gpu-memory-utilization``, the default; ``--budget
formula``, the vendor's GB × ``--usable`` − weights); the connectors the commands use
(``--connector``, ``--transfer-backend``); the roofline's source (``--bandwidth-source``,
``--efficiency``); ``--simulate`` adds the decode and aggregated pools over time
(:mod:`planner.cluster.occupancy`: ``--sim-requests``, ``--sim-seed``). Every figure printed is
the library's (:mod:`planner.cluster.pools`, :mod:`planner.cluster.pareto`,
:mod:`planner.cluster.launch`, :mod:`planner.cluster.occupancy`) as its ``as_record`` gives it.

Bad arguments: exit status 2 and one line naming the option, as the planner's CLI; a layout the
engines refuse names its role's option (``--decode-ep``) and the constraint.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from hardware.links import LINK_IDS, MAX_NICS
from inputs.bounds import Bound
from inputs.cli import OneLineParser, UsageError, arg_type, choice, help_range, run_cli
from inputs.errors import InputError
from inputs.uploads import dumps_strict, read_path_capped
from planner.bandwidth import choose_estimate
from planner.cluster import occupancy
from planner.cluster.budget import BUDGETS
from planner.cluster.launch import CONNECTORS, TRANSFER_BACKENDS, plan_record
from planner.cluster.parallel import MAX_DP, ParallelLayout, routed_expert_params
from planner.cluster.pools import compare
from planner.cluster.replica import MAX_RATE, MAX_TARGET_S, ClusterSpec, Load, fitting_layout
from sizing import cli as sizer_cli
from sizing.catalogue import CatalogueEntry, get_entry
from sizing.checkpoints import Launchable, checkpoint_for
from sizing.engine.memory import ActivationShape
from sizing.engine.pipeline import MAX_PP
from sizing.errors import SizingError
from sizing.hf_config import MAX_CONFIG_BYTES, load_config
from sizing.kv import DEFAULT_BLOCK_SIZE
from sizing.models import MAX_TP_RANKS, ModelShape
from sizing.presets import DEFAULT_PRESET, get_preset

PROG = "python -m planner cluster"
ROLES = ("prefill", "decode", "aggregated")
ESTIMATE_SOURCES = ("h200-results", "datasheet")  # a harness run needs the planner's own --bench-json
DEFAULT_RATE = 1.0
DEFAULT_PROMPT = 2048  # the reference page's average request
DEFAULT_OUTPUT = 256

RATE = Bound(field="rate", low=0, low_open=True, high=MAX_RATE, unit="requests/s")
PROMPT = Bound(field="prompt_tokens", low=1, high=10_000_000, integer=True, unit="tokens")
OUTPUT = Bound(field="output_tokens", low=1, high=10_000_000, integer=True, unit="tokens")
TPOT_MS = Bound(field="tpot_ms", low=0, low_open=True, high=MAX_TARGET_S * 1000, unit="ms")
TTFT_MS = Bound(field="ttft_ms", low=0, low_open=True, high=MAX_TARGET_S * 1000, unit="ms")
NICS = Bound(field="nics", low=1, high=MAX_NICS, integer=True, unit="NICs")
EFFICIENCY = Bound(field="efficiency", low=0.01, high=1)  # below 1 % of the datasheet is no working GPU
SIM_REQUESTS = Bound(field="sim_requests", low=1, high=occupancy.MAX_REQUESTS, integer=True, unit="requests")
SIM_SEED = Bound(field="sim_seed", low=0, high=occupancy.MAX_SEED, integer=True)


def _layout_bounds(role: str) -> dict[str, Bound]:
    return {"tp": Bound(field=f"{role}_tp", low=1, high=MAX_TP_RANKS, integer=True, unit="GPUs"),
            "pp": Bound(field=f"{role}_pp", low=1, high=MAX_PP, integer=True, unit="stages"),
            "dp": Bound(field=f"{role}_dp", low=1, high=MAX_DP, integer=True, unit="ranks")}


LAYOUT_BOUNDS = {role: _layout_bounds(role) for role in ROLES}

# Library fields whose option is not the field's own name with dashes.
_OPTION_FOR_FIELD = {"tpot_target_s": "--tpot-ms", "ttft_target_s": "--ttft-ms", "rate": "--rate",
                     "kv_buffer_device": "--kv-buffer-device", "link": "--link", "nics": "--nics",
                     "sim_requests": "--sim-requests", "sim_seed": "--sim-seed", "budget": "--budget"}


def _add(group, option: str, bound: Bound, text: str, **kwargs: Any) -> None:
    group.add_argument(option, type=arg_type(bound), help=f"{text} ({help_range(bound)})", **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The cluster plan's parser: the sizer's model/precision/hardware groups plus its own."""
    parser = OneLineParser(prog=PROG, description="Disaggregated prefill/decode pools against the aggregated "
                                                  "deployment, with launch commands per role.",
                           epilog="Exit status 2 on a bad argument, with one line naming it.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pareto", action="store_true", help="add the layout sweep: tokens/s per GPU against "
                                                              "TPOT and TTFT, with the Pareto fronts")
    sizer_cli.add_model_arguments(parser)
    sizer_cli.add_precision_arguments(parser)
    sizer_cli.add_hardware_arguments(parser)
    parser.set_defaults(tp=None)  # no --tp: each role gets the smallest layout that holds its sequences
    load = parser.add_argument_group("load")
    _add(load, "--rate", RATE, f"arrival rate (default {DEFAULT_RATE:g})", default=DEFAULT_RATE, metavar="REQ/S")
    _add(load, "--prompt-tokens", PROMPT, f"prompt tokens per request (default {DEFAULT_PROMPT})",
         default=DEFAULT_PROMPT, metavar="N")
    _add(load, "--output-tokens", OUTPUT, f"output tokens per request (default {DEFAULT_OUTPUT})",
         default=DEFAULT_OUTPUT, metavar="N")
    _add(load, "--tpot-ms", TPOT_MS, "TPOT target", metavar="MS")
    _add(load, "--ttft-ms", TTFT_MS, "mean TTFT target (sizes the prefill queue)", metavar="MS")
    for role in ROLES:
        group = parser.add_argument_group(f"{role} layout" + (" (default: the decode layout)"
                                                              if role == "aggregated" else ""))
        bounds = LAYOUT_BOUNDS[role]
        _add(group, f"--{role}-tp", bounds["tp"], "tensor-parallel size (default --tp)", metavar="N")
        _add(group, f"--{role}-pp", bounds["pp"], "pipeline stages (default 1)", metavar="N")
        _add(group, f"--{role}-dp", bounds["dp"], "data-parallel ranks (default 1)", metavar="N")
        group.add_argument(f"--{role}-ep", action="store_true", help="expert parallelism (EP = TP × DP)")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--link", type=choice(LINK_IDS), default="ib-ndr", metavar="{" + ",".join(LINK_IDS) + "}",
                         help="the link between prefill and decode GPUs (default ib-ndr)")
    _add(cluster, "--nics", NICS, "NICs one GPU's transfers stripe over (default 1)", default=1, metavar="N")
    cluster.add_argument("--budget", type=choice(BUDGETS), default="engine", metavar="{" + ",".join(BUDGETS) + "}",
                         help="each GPU's KV budget: engine, vLLM's memory profile (driver-reported memory "
                              "× --usable as gpu_memory_utilization − weights − activation peak − non-torch − "
                              "CUDA graphs); formula, the vendor's GB × --usable − weights (default engine)")
    cluster.add_argument("--kv-buffer-device", type=choice(("cuda", "cpu")), default="cuda", metavar="{cuda,cpu}",
                         help="where the connector stages KV (default cuda: no staging)")
    _add(cluster, "--block-size", sizer_cli.BLOCK_SIZE, f"KV block size in tokens (default {DEFAULT_BLOCK_SIZE})",
         default=DEFAULT_BLOCK_SIZE,
         metavar="N")
    cluster.add_argument("--connector", type=choice(CONNECTORS), default="nixl", metavar="{nixl,lmcache}",
                         help="vLLM's KV connector (default nixl)")
    cluster.add_argument("--transfer-backend", type=choice(TRANSFER_BACKENDS), default="nixl",
                         metavar="{nixl,mooncake}", help="SGLang's disaggregation transfer backend (default nixl)")
    cluster.add_argument("--bandwidth-source", type=choice(ESTIMATE_SOURCES), default="h200-results",
                         metavar="{" + ",".join(ESTIMATE_SOURCES) + "}",
                         help="the roofline's efficiencies: the shipped H200 results, or the datasheet "
                              "(default h200-results)")
    _add(cluster, "--efficiency", EFFICIENCY, "factor on datasheet bandwidth (default: from the source)",
         metavar="F")
    sim = parser.add_argument_group("over time")
    sim.add_argument("--simulate", action="store_true",
                     help="run one DP rank of the decode pool (prefilled arrivals) and of the aggregated pool "
                          "through the over-time simulator: peak and mean KV blocks in use, preemptions")
    _add(sim, "--sim-requests", SIM_REQUESTS, f"requests per simulated pool (default {occupancy.DEFAULT_REQUESTS:,})",
         default=occupancy.DEFAULT_REQUESTS, metavar="N")
    _add(sim, "--sim-seed", SIM_SEED, "seed of the simulated arrivals (default 0)", default=0, metavar="N")
    return parser


def layout_from_args(args: argparse.Namespace, role: str, spec: ClusterSpec, load: Load) -> ParallelLayout | None:
    """The role's layout, None for an aggregated pool given none of its own; a refusal names the
    role's option. A role given no TP (neither ``--<role>-tp`` nor ``--tp``) and nothing else of
    its layout gets the smallest that holds one of its sequences (:func:`fitting_layout`)."""
    get = vars(args).get
    given = {k: get(f"{role}_{k}") for k in ("tp", "pp", "dp", "ep")}
    if role == "aggregated" and not any(given.values()):
        return None
    if not any(given.values()) and args.tp is None:
        return fitting_layout(spec, load, role)
    try:
        return ParallelLayout(tp=given["tp"] or args.tp or 1, pp=given["pp"] or 1, dp=given["dp"] or 1,
                              ep=bool(given["ep"]))
    except InputError as exc:
        raise InputError(f"{role}_{exc.field}", f"{role} layout: {exc.message}") from None


def _entry(args: argparse.Namespace, model: ModelShape) -> CatalogueEntry | None:
    """The catalogue entry of the model as given (None once edited, or for a config or Hub model)."""
    hub = sizer_cli.hub_model_from_args(args)
    if hub is not None:
        return get_entry(hub.catalogue_id) if hub.catalogue_id and model == hub.shape else None
    if args.config is None:
        preset = get_preset(args.model or DEFAULT_PRESET)
        if model == preset.shape:
            return preset
    return None


def _config(args: argparse.Namespace, entry: CatalogueEntry | None) -> dict[str, Any] | None:
    """The model's config.json: the catalogue's, or the file given (None for a hand-typed shape)."""
    if entry is not None:
        return entry.config
    if args.config is not None:
        return load_config(read_path_capped(str(args.config), MAX_CONFIG_BYTES, field="config"))
    return None


def _routed_params(model: ModelShape, config: dict[str, Any] | None) -> int | None:
    """The routed experts' parameters from the config (None: the layout estimates them)."""
    if not model.is_moe or config is None:
        return None
    return routed_expert_params(config)


def _activation(config: dict[str, Any] | None) -> ActivationShape | None:
    """The activation widths of the config (None: none given, or it lacks them; the engine budget
    then assumes them from the attention shape and says so)."""
    if config is None:
        return None
    try:
        return ActivationShape.from_config(config)
    except SizingError:
        return None


def _launchable(args: argparse.Namespace, model: ModelShape, entry: CatalogueEntry | None, weights: str) -> Launchable:
    hub = sizer_cli.hub_model_from_args(args)
    repo = entry.repo if entry else hub.repo_id if hub else model.name
    return checkpoint_for(repo=repo, own_format=model.weight_format, weight_format=weights,
                          preset_id=entry.id if entry else None)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The record ``--json`` prints (library errors propagate, naming their field)."""
    if args.gpus is not None:
        raise UsageError("argument --gpus: the cluster plan sizes its pools itself; give the load instead")
    model = sizer_cli.model_from_args(args)
    kv_precision, weight_precision = sizer_cli.precisions_from_args(args)
    gpu = sizer_cli.gpu_from_args(args)
    estimate, notes = choose_estimate(args.bandwidth_source)
    if args.efficiency is not None:
        estimate = estimate.with_bandwidth_efficiency(args.efficiency)
    entry = _entry(args, model)
    config = _config(args, entry)
    spec = ClusterSpec(model=model, kv_precision=kv_precision, weight_precision=weight_precision, gpu=gpu,
                       estimate=estimate, link=args.link, nics=args.nics, usable_fraction=args.usable,
                       block_size=args.block_size, kv_buffer_device=args.kv_buffer_device,
                       routed_params=_routed_params(model, config), gpus_per_node=args.gpus_per_node,
                       budget=args.budget, activation=_activation(config))
    load = Load(rate_per_s=args.rate, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                tpot_target_s=None if args.tpot_ms is None else args.tpot_ms / 1e3,
                ttft_target_s=None if args.ttft_ms is None else args.ttft_ms / 1e3)
    prefill, decode = layout_from_args(args, "prefill", spec, load), layout_from_args(args, "decode", spec, load)
    aggregated = layout_from_args(args, "aggregated", spec, load)
    record = plan_record(spec, load, prefill=prefill, decode=decode, aggregated=aggregated,
                         launchable=_launchable(args, model, entry, weight_precision.name), connector=args.connector,
                         transfer_backend=args.transfer_backend, notes=tuple(notes), pareto=args.pareto)
    if args.simulate:
        comparison = compare(spec, load, prefill=prefill, decode=decode, aggregated=aggregated)
        record["occupancy"] = occupancy.simulate_occupancy(
            spec, comparison, requests=args.sim_requests, seed=args.sim_seed,
            deadline=occupancy.Deadline(field="sim_requests")).as_record()
    return record


def format_text(record: dict[str, Any]) -> str:
    """A readable summary of :func:`run`'s record: each deployment's terms, then the role tables."""
    lines = [f"{record['model']} on {record['gpu']}, link {record['link']} × {record['nics']}",
             f"bandwidth: {record['bandwidth_label']}"]
    for mode in ("disaggregated", "aggregated"):
        d = record[mode]
        gpus = "—" if d["gpus"] is None else f"{d['gpus']:,} GPUs"
        lines += ["", f"{mode}: {gpus}, {'feasible' if d['feasible'] else 'not feasible'}; {d['explanation']}"]
        for pool in d["pools"]:
            lines.append(f"  {pool['explanation']}")
            lines += [f"    {t['text']}" for t in pool["terms"]]
        lines += [f"  {t['text']}" for t in d["terms"]]
        for row in record["roles"][mode]:
            lines.append(f"  role {row['role']}: {row['replicas']:,} × {row['layout']['gpus']} GPUs = "
                         f"{row['gpus']:,} GPUs on {row['nodes']:,} node{'s' if row['nodes'] != 1 else ''}")
            lines += [f"    {command}" for command in (row["vllm"], row["sglang"]) if command]
            lines += [f"    note: {n}" for n in row["notes"]]
    lines += [""] + [t["text"] for t in record["comparison"]]
    if "occupancy" in record:
        lines += [""] + occupancy_lines(record["occupancy"])
    if "pareto" in record:
        front = sorted((p for p in record["pareto"]["points"] if p["on_front"]), key=lambda p: p["tpot_s"])
        lines += ["", f"Pareto front (TPOT), {len(front)} of {len(record['pareto']['points'])} points:"]
        lines += [f"  {p['mode']:<13} TP {p['layout']['tp']} PP {p['layout']['pp']} DP {p['layout']['dp']}"
                  f"{' EP' if p['layout']['ep'] else ''} b={p['batch']:<5} TPOT {p['tpot_s'] * 1e3:8.2f} ms  "
                  f"{p['tokens_per_s_per_gpu']:9,.0f} tok/s/GPU  {p['binding_limit']}" for p in front]
    return "\n".join(lines)


def occupancy_lines(record: dict[str, Any]) -> list[str]:
    """The ``occupancy`` record (:meth:`planner.cluster.occupancy.Occupancy.as_record`) as text."""
    lines = [f"occupancy over time (one DP rank per pool, {record['requests']:,} requests, seed {record['seed']}):"]
    for p in record["pools"]:
        lines.append(f"  {p['role']}: peak {p['peak_blocks']:,} of {p['kv_blocks']:,} blocks ({p['peak_share']:.1%}), "
                     f"mean {p['mean_blocks']:,.1f} ({p['mean_share']:.1%}), {p['preemptions']:,} preemptions, "
                     f"batch {p['mean_batch_size']:,.1f}, TPOT {p['mean_tpot_s'] * 1e3:,.2f} ms "
                     f"({p['rate_per_dp_rank']:,.3g} requests/s on one of {p['replicas']:,} × DP {p['dp']} ranks"
                     + (f", KV {p['transfer_delay_s'] * 1e3:,.1f} ms after arrival)" if p["role"] == "decode" else ")"))
    lines += [f"  {s['role']}: not simulated, {s['reason']}" for s in record["skipped"]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cluster plan; returns 0, or 2 after one line naming a bad argument."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = build_parser().parse_args(argv)
        record = run(args)
        try:
            text = dumps_strict(record, indent=2) if args.json else format_text(record)
        except ValueError:  # the bounds keep every figure finite; refuse rather than print NaN
            raise UsageError("the options give a result that is not a finite number; use smaller values") from None
        print(text)
        return 0

    return run_cli(PROG, body, option_for_field=_option_for_field)


def _option_for_field(field: str) -> str:
    if field in _OPTION_FOR_FIELD:
        return _OPTION_FOR_FIELD[field]
    if field.split("_", 1)[0] in ROLES or field in ("prompt_tokens", "output_tokens", "block_size"):
        return f"--{field.replace('_', '-')}"
    return sizer_cli.option_for_field(field)


if __name__ == "__main__":
    sys.exit(main())
