"""Launch commands for each role of a cluster plan, and the cluster's role table.

Each engine's base command is :mod:`sizing.engine.launch`'s (``vllm_command``, ``sglang_command``:
the model, TP, PP, load-time conversion, KV dtype, context, memory share, sequences, batch
tokens, block size). A role adds its parallel layout and, disaggregated, its KV transfer, spelt
as the engines' sources spell them.

**vLLM** (``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``): ``--data-parallel-size``,
``--enable-expert-parallel`` (the EP group is every TP × DP rank), ``--decode-context-parallel-size``
and ``--kv-transfer-config``, a JSON ``KVTransferConfig`` (``vllm/config/kv_transfer.py``:
``kv_connector``, ``kv_role`` one of ``kv_producer``, ``kv_consumer``, ``kv_both``,
``kv_buffer_device``). Connectors by their registered names
(``vllm/distributed/kv_transfer/kv_connector/factory.py``):

* ``NixlConnector`` — ``kv_role`` ``kv_both`` on both pools (the decode side pulls the blocks;
  which pool prefills is the proxy's choice); ``kv_buffer_device`` ``cpu`` when the plan stages
  through host memory.
* ``LMCacheConnectorV1`` — ``kv_producer`` on the prefill pool, ``kv_consumer`` on the decode
  pool, as vLLM's ``examples/others/lmcache/disagg_prefill_lmcache_v1/disagg_vllm_launcher.sh``;
  LMCache's own settings (``LMCACHE_CONFIG_FILE``) are outside the command.

A layer split of the pipeline is vLLM's ``VLLM_PP_LAYER_PARTITION`` environment variable.

**SGLang** (``python/sglang/srt/server_args.py``, ``ServerArgs``): the base command's ``--tp``
(``--tp-size``), ``--dp-size``, ``--ep-size``, ``--enable-dp-attention``, ``--dcp-size``,
``--disaggregation-mode prefill|decode`` and ``--disaggregation-transfer-backend`` (``nixl``,
``mooncake``, … from ``DISAGG_TRANSFER_BACKEND_CHOICES``). With data-parallel attention SGLang's
TP size is the whole replica and its attention TP is ``tp_size ÷ dp_size``
(``_compute_parallelism_ranks``), so a layout of TP × DP ranks is ``--tp TP×DP --dp-size DP
--enable-dp-attention``; each DP rank's scheduler takes ``max_running_requests ÷ dp_size``
(``tp_worker.py``), so ``--max-running-requests`` is the replica's total. A dense model's DP ranks
are plain replicas: ``--tp TP --dp-size DP``, the limit per rank.

Every figure in a command comes from the plan: ``--max-num-seqs`` is the pool's batch cap per DP
rank (the KV capacity and the TPOT target's batch), ``--max-model-len`` prompt + output, the
memory share the plan's usable fraction.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from inputs.errors import InputError
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pareto import sweep
from planner.cluster.pools import Comparison, Deployment, Pool, compare, nodes
from planner.cluster.replica import ClusterSpec, Load, Role, layout_record, term_record
from sizing.checkpoints import Launchable
from sizing.engine.capacity import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, ENGINE_KV_DTYPES
from sizing.engine.launch import LaunchPlan, sglang_command, sglang_mem_fraction, vllm_command

Connector = Literal["nixl", "lmcache"]
TransferBackend = Literal["nixl", "mooncake"]
CONNECTORS: tuple[Connector, ...] = ("nixl", "lmcache")
TRANSFER_BACKENDS: tuple[TransferBackend, ...] = ("nixl", "mooncake")
# vLLM's registered connector classes and the kv_role each pool takes with them.
_VLLM_CONNECTOR = {"nixl": "NixlConnector", "lmcache": "LMCacheConnectorV1"}
_KV_ROLE = {("nixl", "prefill"): "kv_both", ("nixl", "decode"): "kv_both",
            ("lmcache", "prefill"): "kv_producer", ("lmcache", "decode"): "kv_consumer"}


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """What every role's command shares: the checkpoint (:class:`sizing.checkpoints.Launchable`),
    the plan's engine settings, and how the pools talk."""

    launchable: Launchable
    kv_dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    block_size: int | None  # None: the engine's own (a Mamba / linear hybrid's)
    moe: bool  # DP ranks are data-parallel attention (True) or plain replicas
    connector: Connector = "nixl"
    transfer_backend: TransferBackend = "nixl"
    kv_buffer_device: str = "cuda"
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS

    def __post_init__(self) -> None:
        if self.connector not in CONNECTORS:
            raise InputError("connector", f"must be one of {', '.join(CONNECTORS)}, got {self.connector!r:.40}")
        if self.transfer_backend not in TRANSFER_BACKENDS:
            raise InputError("transfer_backend", f"must be one of {', '.join(TRANSFER_BACKENDS)}, "
                                                 f"got {self.transfer_backend!r:.40}")

    @property
    def why_not(self) -> str:
        """Why no command can be written ("" when one can)."""
        if not self.launchable.launchable:
            return self.launchable.note
        if self.kv_dtype not in ENGINE_KV_DTYPES:
            return f"vLLM and SGLang cache KV as {', '.join(ENGINE_KV_DTYPES)}, not {self.kv_dtype}"
        return ""


def launch_settings(spec: ClusterSpec, load: Load, launchable: Launchable, *, connector: Connector = "nixl",
                    transfer_backend: TransferBackend = "nixl") -> LaunchSettings:
    """The settings a plan's commands carry (``spec``'s KV dtype, block, memory share and staging)."""
    return LaunchSettings(launchable=launchable, kv_dtype=spec.kv_precision.name, max_model_len=load.context,
                          gpu_memory_utilization=spec.usable_fraction,
                          block_size=None if spec.model.n_state_layers else spec.block_size,
                          moe=spec.model.is_moe, connector=connector, transfer_backend=transfer_backend,
                          kv_buffer_device=spec.kv_buffer_device)


def kv_transfer_config(settings: LaunchSettings, role: Role) -> str:
    """vLLM's ``--kv-transfer-config`` JSON for a prefill or decode pool."""
    if role == "aggregated":
        raise InputError("role", "an aggregated pool transfers no KV")
    config: dict[str, Any] = {"kv_connector": _VLLM_CONNECTOR[settings.connector],
                              "kv_role": _KV_ROLE[settings.connector, role]}
    if settings.connector == "nixl" and settings.kv_buffer_device != "cuda":
        config["kv_buffer_device"] = settings.kv_buffer_device
    return json.dumps(config, separators=(",", ":"))


def _plan(settings: LaunchSettings, *, tp: int, pp: int, max_num_seqs: int) -> LaunchPlan:
    return LaunchPlan(model_repo=settings.launchable.repo, tp=tp, pp=pp, kv_dtype=settings.kv_dtype,
                      max_model_len=settings.max_model_len, gpu_memory_utilization=settings.gpu_memory_utilization,
                      max_num_seqs=max_num_seqs, block_size=settings.block_size,
                      max_num_batched_tokens=settings.max_num_batched_tokens,
                      quantization=settings.launchable.quantization, dtype=settings.launchable.dtype)


def _joined(base: str, extra: list[str]) -> str:
    return f"{base} {shlex.join(extra)}" if extra else base


def vllm_role_command(settings: LaunchSettings, layout: ParallelLayout, role: Role, *, max_num_seqs: int) -> str:
    """``vllm serve …`` for one replica of ``role`` (``max_num_seqs`` per DP rank)."""
    extra = []
    if layout.dp > 1:
        extra += ["--data-parallel-size", str(layout.dp)]
    if layout.expert_parallel:
        extra.append("--enable-expert-parallel")
    if layout.dcp > 1:
        extra += ["--decode-context-parallel-size", str(layout.dcp)]
    if role != "aggregated":
        extra += ["--kv-transfer-config", kv_transfer_config(settings, role)]
    command = _joined(vllm_command(_plan(settings, tp=layout.tp, pp=layout.pp, max_num_seqs=max_num_seqs)), extra)
    if layout.pp_layer_partition is not None:
        command = f"VLLM_PP_LAYER_PARTITION={shlex.quote(layout.pp_layer_partition)} {command}"
    return command


def sglang_role_command(settings: LaunchSettings, layout: ParallelLayout, role: Role, *, max_num_seqs: int) -> str:
    """``python -m sglang.launch_server …`` for one replica of ``role`` (``max_num_seqs`` per DP rank)."""
    attention_dp = settings.moe and layout.dp > 1
    tp = layout.tp * layout.dp if attention_dp else layout.tp
    running = max_num_seqs * layout.dp if attention_dp else max_num_seqs
    # SGLang's static pool holds weights + KV: the plan's usable share of the GPU, the rest left
    # to activations, graphs and NCCL (sglang_mem_fraction rounds it as the sizer does).
    share = round(settings.gpu_memory_utilization * 10**6)
    fraction = sglang_mem_fraction(10**6, 0, 10**6 - share, share)
    extra = []
    if layout.dp > 1:
        extra += ["--dp-size", str(layout.dp)]
    if attention_dp:
        extra.append("--enable-dp-attention")
    if layout.expert_parallel:
        extra += ["--ep-size", str(layout.ep_size)]
    if layout.dcp > 1:
        extra += ["--dcp-size", str(layout.dcp)]
    if role != "aggregated":
        extra += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", settings.transfer_backend]
    return _joined(sglang_command(_plan(settings, tp=tp, pp=layout.pp, max_num_seqs=running), fraction), extra)


@dataclass(frozen=True, kw_only=True)
class RoleLaunch:
    """One row of the role table: a pool, its size, and the command each of its replicas runs."""

    role: Role
    layout: ParallelLayout
    replicas: int
    gpus: int
    nodes: int
    vllm: str | None
    sglang: str | None
    notes: tuple[str, ...]

    def as_record(self) -> dict[str, Any]:
        return {"role": self.role, "layout": layout_record(self.layout), "replicas": self.replicas,
                "gpus": self.gpus, "nodes": self.nodes, "vllm": self.vllm, "sglang": self.sglang,
                "notes": list(self.notes)}


def _max_num_seqs(pool: Pool) -> int:
    """The pool's batch cap per DP rank; a prefill pool holds prompts briefly, so vLLM's default."""
    if pool.role == "prefill":
        return DEFAULT_MAX_NUM_SEQS
    return max(1, pool.batch_cap_per_dp_rank or math.ceil(pool.sequences_per_dp_rank))


def role_table(deployment: Deployment, settings: LaunchSettings, *, gpus_per_node: int) -> tuple[RoleLaunch, ...]:
    """Role, GPUs, nodes and commands of every pool that serves (a pool with no replica count
    has no row; :attr:`Deployment.explanation` says why)."""
    rows = []
    why_not = settings.why_not
    for pool in deployment.pools:
        if pool.replicas is None:
            continue
        layout = pool.layout
        notes = []
        if why_not:
            notes.append(f"No command: {why_not}.")
        if layout.gpus > gpus_per_node:
            notes.append(f"A replica spans {math.ceil(layout.gpus / gpus_per_node)} nodes: run the command on each "
                         "with the engine's multi-node options (vLLM: a Ray cluster or --data-parallel-address; "
                         "SGLang: --nnodes, --node-rank, --dist-init-addr).")
        if pool.role != "aggregated" and settings.connector == "lmcache":
            notes.append("LMCache's own disaggregation settings come from LMCACHE_CONFIG_FILE.")
        if layout.pp_layer_partition is not None:
            notes.append("SGLang splits the pipeline's layers its own way; the partition is vLLM's.")
        seqs = _max_num_seqs(pool)
        rows.append(RoleLaunch(
            role=pool.role, layout=layout, replicas=pool.replicas, gpus=pool.gpus,
            nodes=nodes(layout.gpus, pool.replicas, gpus_per_node),
            vllm=None if why_not else vllm_role_command(settings, layout, pool.role, max_num_seqs=seqs),
            sglang=None if why_not else sglang_role_command(settings, layout, pool.role, max_num_seqs=seqs),
            notes=tuple(notes)))
    return tuple(rows)


def comparison_record(spec: ClusterSpec, comparison: Comparison, settings: LaunchSettings) -> dict[str, Any]:
    """Both deployments, the ratios between them and each one's role table, as JSON-ready values."""
    load, per_node = comparison.load, spec.gpus_per_node
    return {
        "model": spec.model.name, "gpu": spec.gpu.name, "link": spec.link.id, "nics": spec.nics,
        "bandwidth_label": spec.estimate.label,
        "load": {"rate_per_s": load.rate_per_s, "prompt_tokens": load.prompt_tokens,
                 "output_tokens": load.output_tokens, "tpot_target_s": load.tpot_target_s,
                 "ttft_target_s": load.ttft_target_s},
        "disaggregated": comparison.disaggregated.as_record(per_node),
        "aggregated": comparison.aggregated.as_record(per_node),
        "comparison": [term_record(t) for t in comparison.terms],
        "launch_note": settings.launchable.note,
        "roles": {mode: [row.as_record() for row in role_table(deployment, settings, gpus_per_node=per_node)]
                  for mode, deployment in (("disaggregated", comparison.disaggregated),
                                           ("aggregated", comparison.aggregated))},
    }


def plan_record(spec: ClusterSpec, load: Load, *, prefill: ParallelLayout, decode: ParallelLayout,
                aggregated: ParallelLayout | None, launchable: Launchable, connector: Connector = "nixl",
                transfer_backend: TransferBackend = "nixl", notes: tuple[str, ...] = (),
                pareto: bool = False) -> dict[str, Any]:
    """The whole cluster plan as the CLI prints it and the page shows it: both deployments
    (:func:`~planner.cluster.pools.compare`), their role tables and commands, the bandwidth
    source's ``notes`` and, with ``pareto``, the layout sweep."""
    comparison = compare(spec, load, prefill=prefill, decode=decode, aggregated=aggregated)
    settings = launch_settings(spec, load, launchable, connector=connector, transfer_backend=transfer_backend)
    record = comparison_record(spec, comparison, settings)
    record["source_notes"] = list(notes)
    if pareto:
        record["pareto"] = sweep(spec, load).as_record()
    return record


__all__ = ["CONNECTORS", "TRANSFER_BACKENDS", "LaunchSettings", "RoleLaunch", "comparison_record", "plan_record", "kv_transfer_config",
           "launch_settings", "role_table", "sglang_role_command", "vllm_role_command"]
