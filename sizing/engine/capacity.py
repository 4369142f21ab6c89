"""Engine mode in one call: :func:`plan_engine` turns an :class:`EngineRequest` into a frozen
:class:`EngineReport` — the per-GPU memory profile, the KV-cache groups, the figures vLLM will
print ("Available KV cache memory", "GPU KV cache size", "Maximum concurrency"), the reverse
questions in engine terms and the launch commands.

Reverse questions:

* the ``gpu_memory_utilization`` needed for ``users`` concurrent requests of ``max_model_len``
  tokens: the smallest ``u`` (to 0.001) with ``total × u − non-KV ≥ users × blocks per request ×
  bytes per block``;
* the largest ``max_model_len`` one request of which fits (vLLM's own binary search);
* the smallest TP — a power of two that divides the query heads and suits the KV heads, as
  vLLM requires (it pads the vocabulary, so that need not divide) — at which the users fit.

The weights are the engine's checkpoint figure ÷ TP (:func:`sizing.weights.engine_weight_bytes`:
embeddings, ``lm_head`` and norms 16-bit in every quantised format), plus the rows vLLM pads the
vocabulary with (to a multiple of 64) and, for MXFP4 experts, the padding of the MoE kernel vLLM
picks for the GPU (:mod:`sizing.engine.mxfp4`). ``vllm_version`` picks how "GPU KV
cache size" is counted (:func:`~sizing.engine.groups.reported_kv_tokens`) and, before 0.21,
leaves the CUDA-graph estimate out.

``pp_layer_partition`` (vLLM's ``VLLM_PP_LAYER_PARTITION``, "16,32") plans one pipeline stage
of a PP deployment, PP being the partition's count (:mod:`sizing.engine.pipeline`): the stage's
layers and its share of the weights, the sampler on the last stage only. One request is checked
as the release checks it: vLLM 0.14–0.16 against every stage's layers merged, other releases
against the stage's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from hardware.gpus import GPU, get_gpu
from inputs.errors import InputError
from sizing.engine.groups import (
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_VLLM_VERSION,
    GroupingRule,
    KVCacheLayout,
    kv_cache_layout,
    reported_kv_tokens,
    tokens_rule,
    vllm_release,
)
from sizing.engine.launch import LaunchPlan, sglang_command, sglang_max_total_tokens, sglang_mem_fraction, vllm_command
from sizing.engine.memory import (
    CUDA_GRAPHS_PROFILED_SINCE,
    LOGIT_BYTES,
    SAMPLER_VOCAB_COPIES,
    ActivationShape,
    MemoryProfile,
    memory_profile,
)
from sizing.engine.mxfp4 import AUTO, ExpertShape, Mxfp4Backend, check_backend_name, padded_sizes, resolve_backend
from sizing.engine.pipeline import (
    OneRequestRule,
    one_request_rule,
    parse_layer_partition,
    partition_counts,
    pipeline_stage,
)
from sizing.errors import NoKVRoom, SizingError
from sizing.models import MAX_TOKENS, ModelShape, check_int
from sizing.precisions import Precision, get_precision
from sizing.presets import get_preset
from sizing.weights import engine_weight_bytes, padded_vocab, vocab_padding_bytes
from units import GiB, MiB, cdiv

ENGINE_KV_DTYPES = ("bf16", "fp16", "fp32", "fp8")  # what vLLM's --kv-cache-dtype can hold
MAX_ENGINE_TP = 64
DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's chunked-prefill default for the API server on big GPUs
DEFAULT_MAX_NUM_SEQS = 256


@dataclass(frozen=True, kw_only=True)
class EngineRequest:
    """What engine mode is asked. Byte overrides are per GPU; None means "estimate it".

    ``kv_budget_bytes_per_gpu`` is the engine's "Available KV cache memory" and replaces the
    whole memory profile; ``users`` asks for the utilisation that serves them.
    ``attention_backend`` sets the kernel block alignment of a hybrid model's attention block
    (``kernel_block_alignment`` overrides it, in tokens); ``speculative_tokens`` is vLLM's
    ``num_speculative_tokens``, which lengthens the convolution state of Mamba2 / gated-delta-net
    layers. ``weight_dtype`` names the checkpoint's format also when ``weights_total_bytes`` gives
    its bytes (a safetensors total is taken as given, plus vLLM's vocabulary padding as for an
    estimate): MXFP4 experts are then held at the padded shapes of ``mxfp4_backend`` (``auto``:
    the backend vLLM picks on the GPU, :func:`sizing.engine.mxfp4.default_backend`). ``vllm_version``
    (default :data:`~sizing.engine.groups.DEFAULT_VLLM_VERSION`, the newest release the rules were
    checked against) picks how "GPU KV cache size" is counted; before 0.21 the CUDA graphs are
    not subtracted, as with ``cuda_graphs_profiled=False``. ``pp_layer_partition`` ("16,32", or
    the ints) makes the request one of a pipeline, one stage per count: ``pp_stage`` (0-based)
    is planned, or, when None, every stage and the report is the one that holds the fewest
    requests; ``weights_total_bytes`` stays the whole model's.
    """

    model: ModelShape | str
    gpu: GPU | str = "h100-sxm"
    tp: int = 1
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"
    weight_group_size: int | None = 128
    max_model_len: int = 32_768
    block_size: int = 16
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    users: int | None = None
    rule: GroupingRule | str = GroupingRule.HYBRID
    attention_backend: str = DEFAULT_ATTENTION_BACKEND
    kernel_block_alignment: int | None = None
    speculative_tokens: int = 0
    mxfp4_backend: str = AUTO
    vllm_version: str = DEFAULT_VLLM_VERSION
    enforce_eager: bool = False
    activation: ActivationShape | None = None
    model_repo: str | None = None
    total_bytes_per_gpu: int | None = None
    weights_total_bytes: int | None = None  # the sizer's weight bytes (whole model); else params × weight dtype
    weights_bytes_per_gpu: int | None = None  # a measured figure ("Model loading took X GiB")
    kv_budget_bytes_per_gpu: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    last_pp_stage: bool = True  # False: a pipeline stage before the last (no sampler, no logits)
    cuda_graphs_profiled: bool = True  # False: vLLM before 0.21 (CUDA graphs not subtracted)
    pp_layer_partition: str | tuple[int, ...] | None = None  # VLLM_PP_LAYER_PARTITION: layers per stage
    pp_stage: int | None = None  # the stage of pp_layer_partition planned; None: the one that binds


@dataclass(frozen=True, kw_only=True)
class EngineReport:
    """Everything engine mode shows; bytes per GPU unless named otherwise."""

    request: EngineRequest
    model: ModelShape
    gpu: GPU
    kv_precision: Precision
    profile: MemoryProfile
    layout: KVCacheLayout
    num_blocks: int
    kv_cache_tokens: int  # "GPU KV cache size" as request.vllm_version prints it
    max_concurrency: float
    blocks_per_request: int
    mxfp4_backend: Mxfp4Backend | None  # the kernel whose padding the MXFP4 experts carry; None: not MXFP4
    request_bytes: int  # one request of max_model_len, over all layer slots (every stage's under a merged check)
    fits_one_request: bool
    max_model_len_fit: int  # vLLM's estimate of the largest max_model_len that fits
    required_gpu_memory_utilization: float | None
    smallest_tp: int | None
    replicas_for_users: int | None  # TP groups needed for ``users`` at this TP
    sglang_max_total_tokens: int
    sglang_mem_fraction_static: float
    launch_command: str
    launch_command_sglang: str
    notes: tuple[str, ...] = field(default=())

    @property
    def available_kv_bytes_per_gpu(self) -> int:
        return self.profile.available_bytes

    def to_dict(self) -> dict[str, Any]:
        layout = self.layout
        return {
            "engine": "vllm",
            "engine_grouping_rule": str(layout.rule),
            "engine_available_kv_bytes_per_gpu": self.available_kv_bytes_per_gpu,
            "engine_memory": self.profile.as_dict(),
            "kv_cache_groups": {
                "page_bytes": layout.page_bytes,
                "group_size": layout.group_size,
                "layer_slots": layout.layer_slots,
                "padding_layers": layout.padding_layers,
                "warnings": [w.message for w in layout.warnings],
                "groups": [{"kind": str(g.kind), "window": g.window, "layers": list(g.layer_indices),
                            "padding": g.padding, "block_size": g.block_size, "page_bytes": g.page_bytes}
                           for g in layout.groups],
            },
            "engine_num_blocks": self.num_blocks,
            "engine_kv_cache_tokens": self.kv_cache_tokens,
            "engine_vllm_version": self.request.vllm_version,
            "engine_pp_layer_partition": (None if self.request.pp_layer_partition is None else
                                          ",".join(map(str, partition_counts(self.request.pp_layer_partition)))),
            "engine_pp_stage": self.request.pp_stage,
            "engine_mxfp4_backend": None if self.mxfp4_backend is None else str(self.mxfp4_backend),
            "engine_max_concurrency": self.max_concurrency,
            "engine_blocks_per_request": self.blocks_per_request,
            "engine_request_bytes": self.request_bytes,
            "engine_fits_one_request": self.fits_one_request,
            "engine_max_model_len": self.max_model_len_fit,
            "required_gpu_memory_utilization": self.required_gpu_memory_utilization,
            "engine_smallest_tp": self.smallest_tp,
            "engine_replicas_for_users": self.replicas_for_users,
            "sglang_max_total_tokens": self.sglang_max_total_tokens,
            "sglang_mem_fraction_static": self.sglang_mem_fraction_static,
            "launch_command": self.launch_command,
            "launch_command_sglang": self.launch_command_sglang,
            "engine_notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class _Inputs:
    model: ModelShape
    repo: str
    gpu: GPU
    kv: Precision
    weights: Precision
    activation: ActivationShape
    release: tuple[int, int]
    mxfp4: Mxfp4Backend | None  # the MoE kernel holding MXFP4 experts; None: not MXFP4 (or not known)
    mxfp4_note: str = ""
    whole: ModelShape | None = None  # the model of which ``model`` is one pipeline stage
    partition: tuple[int, ...] | None = None  # layers per stage
    stage: int = 0
    last_stage: bool = True


def _resolve(request: EngineRequest) -> _Inputs:
    if isinstance(request.model, str):
        preset = get_preset(request.model)
        model, repo = preset.shape, preset.repo
        activation = request.activation or ActivationShape.from_config(preset.config)
    elif isinstance(request.model, ModelShape):
        model, repo = request.model, request.model.name
        activation = request.activation or ActivationShape.assumed_for(request.model)
    else:
        raise SizingError("model", f"expected a preset id or ModelShape, got {type(request.model).__name__}")
    gpu = request.gpu
    if isinstance(gpu, str):
        try:
            gpu = get_gpu(gpu)
        except InputError as exc:
            raise SizingError(exc.field, exc.message) from None
    if not isinstance(gpu, GPU):
        raise SizingError("gpu", f"expected a GPU id or GPU, got {type(gpu).__name__}")
    if request.kv_dtype not in ENGINE_KV_DTYPES:
        raise SizingError("kv_dtype", f"vLLM caches KV as {', '.join(ENGINE_KV_DTYPES)}; got {request.kv_dtype!r:.40}")
    kv = get_precision(request.kv_dtype, field="kv_dtype")
    weights = get_precision(request.weight_dtype, group_size=request.weight_group_size, field="weight_dtype")
    release = vllm_release(request.vllm_version)
    whole = partition = None
    stage, last_stage = 0, request.last_pp_stage
    if request.pp_layer_partition is not None:
        pp = len(partition_counts(request.pp_layer_partition))
        partition = parse_layer_partition(request.pp_layer_partition, model.layers, pp)
        stage = 0 if request.pp_stage is None else check_int("pp_stage", request.pp_stage, low=0, high=pp - 1)
        last_stage = request.last_pp_stage and stage == pp - 1
        if pp > 1:
            whole, model = model, pipeline_stage(model, pp, stage, partition)
    check_int("max_model_len", request.max_model_len, high=MAX_TOKENS)
    check_int("max_num_batched_tokens", request.max_num_batched_tokens, high=1 << 24)
    check_int("max_num_seqs", request.max_num_seqs, high=1 << 20)
    if request.users is not None:
        check_int("users", request.users, high=1 << 30)
    _check_tp(model, request.tp)
    for name in ("total_bytes_per_gpu", "weights_total_bytes", "weights_bytes_per_gpu", "kv_budget_bytes_per_gpu", "activation_bytes",
                 "non_torch_bytes", "cuda_graph_bytes"):
        value = getattr(request, name)
        if value is not None:
            check_int(name, value, low=0 if name != "total_bytes_per_gpu" else 1, high=1 << 50)
    backend, note = _mxfp4_backend(request, model, gpu, weights, activation)
    return _Inputs(model=model, repo=request.model_repo or repo, gpu=gpu, kv=kv, weights=weights,
                   activation=activation, release=release, mxfp4=backend, mxfp4_note=note, whole=whole,
                   partition=partition, stage=stage, last_stage=last_stage)


def _mxfp4_backend(request: EngineRequest, model: ModelShape, gpu: GPU, weights: Precision,
                   activation: ActivationShape) -> tuple[Mxfp4Backend | None, str]:
    """The MoE kernel that holds the model's MXFP4 experts, and a note where its padding is not
    counted; (None, "") for weights that are not MXFP4 experts or are measured."""
    name = check_backend_name(request.mxfp4_backend)
    if weights.name != "mxfp4" or not model.num_experts or request.weights_bytes_per_gpu is not None:
        return None, ""
    backend = resolve_backend(name, gpu.id)
    if activation.assumed:
        return None, ("MXFP4 expert padding not counted: the expert widths are not known (no config), so the "
                      "weights are the checkpoint's bytes")
    if backend is None:
        return None, (f"MXFP4 expert padding not counted: the compute capability of {gpu.name} is not known; "
                      "name the MoE backend (mxfp4_backend) to count it")
    return backend, ""


def _experts(inp: _Inputs) -> ExpertShape:
    """The model's MXFP4 experts: every layer an MoE layer (gpt-oss, the MXFP4 checkpoints vLLM
    loads), each expert ``hidden`` → ``moe_intermediate`` (the config's ``intermediate_size`` when
    it names no ``moe_intermediate_size``)."""
    shape = inp.activation
    return ExpertShape(layers=inp.model.layers, experts=inp.model.num_experts, hidden=shape.hidden,
                       intermediate=shape.moe_intermediate or shape.intermediate)


def _check_tp(model: ModelShape, tp: int) -> int:
    """vLLM's rule: query heads divide over TP; KV heads divide or are replicated."""
    model.check_tp(tp)
    if model.q_heads % tp:
        raise SizingError("tp", f"TP {tp} does not divide the {model.q_heads} attention heads")
    return tp


def _vocab_padding(inp: _Inputs, tp: int) -> int:
    """Bytes per GPU of the rows vLLM pads the 16-bit embedding and ``lm_head`` with
    (:func:`sizing.weights.vocab_padding_bytes`); 0 when the widths are assumed. The embedding is
    the first stage's and ``lm_head`` the last's (a tied one is the embedding itself on one stage,
    a copy on the last of several); a stage built by the caller that is not the last counts
    neither, since which one it is is not known."""
    if inp.activation.assumed:
        return 0
    first = inp.stage == 0 if inp.whole is not None else inp.last_stage
    tied = (inp.whole or inp.model).tied_embeddings is not False  # config.json's default: tied
    matrices = int(first) + int(inp.last_stage and not (tied and first))
    return cdiv(vocab_padding_bytes(inp.activation.vocab, inp.activation.hidden, matrices=matrices), tp)


def _profile(request: EngineRequest, inp: _Inputs, tp: int, utilization: float) -> MemoryProfile:
    total = request.total_bytes_per_gpu or inp.gpu.engine_total_bytes
    weights = request.weights_bytes_per_gpu
    basis = "checkpoint bytes ÷ TP"
    if weights is None:
        total_weights = request.weights_total_bytes
        if total_weights is None:
            total_weights = engine_weight_bytes(inp.model, inp.weights).bytes
        elif inp.whole is not None:  # the whole model's bytes: the stage holds its share of the layers
            total_weights = math.ceil(Fraction(total_weights * inp.model.layers, inp.whole.layers))
        weights = math.ceil(Fraction(total_weights, tp))
        vocab_rows = _vocab_padding(inp, tp)
        if vocab_rows:
            weights += vocab_rows
            basis += (f" + {vocab_rows / MiB:,.2f} MiB of vocabulary padding ({inp.activation.vocab:,} → "
                      f"{padded_vocab(inp.activation.vocab):,} rows)")
        if inp.mxfp4 is not None:
            experts = _experts(inp)
            padding = experts.padding_bytes_per_gpu(inp.mxfp4, tp)
            hidden, inter = padded_sizes(inp.mxfp4, experts.hidden, cdiv(experts.intermediate, tp))
            weights += padding
            layout = "; triton_kernels' Hopper layout pads values and scales" if inp.mxfp4 is Mxfp4Backend.TRITON else ""
            basis += (f" + {padding / GiB:,.2f} GiB of MXFP4 expert padding ({inp.mxfp4}: hidden {experts.hidden:,} → "
                      f"{hidden:,}, intermediate {cdiv(experts.intermediate, tp):,} → {inter:,} a rank{layout})")
    graphs_profiled = request.cuda_graphs_profiled and inp.release >= CUDA_GRAPHS_PROFILED_SINCE
    return memory_profile(
        total_bytes=total, total_measured=request.total_bytes_per_gpu is not None or inp.gpu.engine_total_measured,
        utilization=utilization, weights_bytes_per_gpu=weights, shape=inp.activation, tp=tp,
        max_num_batched_tokens=request.max_num_batched_tokens, max_num_seqs=request.max_num_seqs,
        enforce_eager=request.enforce_eager, weights_given=request.weights_bytes_per_gpu is not None,
        weights_basis=basis,
        activation_bytes=request.activation_bytes, non_torch=request.non_torch_bytes,
        cuda_graph=request.cuda_graph_bytes,
        available_bytes=request.kv_budget_bytes_per_gpu if tp == request.tp else None,
        last_pp_stage=inp.last_stage, cuda_graphs_profiled=graphs_profiled,
    )


def _required_utilization(profile: MemoryProfile, layout: KVCacheLayout, request: EngineRequest) -> float | None:
    """Smallest utilisation (to 0.001) whose KV pool holds ``users`` requests; None above 1."""
    if request.users is None:
        return None
    if layout.rule is GroupingRule.SINGLE:
        blocks = math.ceil(Fraction(request.users * request.max_model_len, layout.block_size)) * len(layout.groups)
    else:
        blocks = request.users * layout.blocks_per_request(request.max_model_len, request.max_num_batched_tokens)
    kv_needed = blocks * layout.bytes_per_block_all_layers
    non_kv = profile.requested_bytes - profile.available_bytes  # what the profile takes besides KV
    utilization = Fraction(math.ceil(Fraction(non_kv + kv_needed, profile.total.bytes) * 1000), 1000)
    return float(utilization) if utilization <= 1 else None


def _layout(request: EngineRequest, inp: _Inputs, tp: int, model: ModelShape | None = None) -> KVCacheLayout:
    return kv_cache_layout(model or inp.model, inp.kv, tp=tp, block_size=request.block_size, rule=request.rule,
                           attention_backend=request.attention_backend,
                           kernel_block_alignment=request.kernel_block_alignment,
                           speculative_tokens=request.speculative_tokens)


def _figures(request: EngineRequest, inp: _Inputs, tp: int, utilization: float):
    profile = _profile(request, inp, tp, utilization)
    layout = _layout(request, inp, tp)
    blocks = layout.num_blocks(profile.available_bytes)
    return profile, layout, blocks


def _smallest_tp(request: EngineRequest, inp: _Inputs) -> int | None:
    wanted = max(request.users or 1, 1)
    tp = 1
    while tp <= MAX_ENGINE_TP:
        try:
            _check_tp(inp.model, tp)
        except SizingError:
            tp *= 2
            continue
        _, layout, blocks = _figures(request, inp, tp, request.gpu_memory_utilization)
        if blocks and layout.max_concurrency(blocks, request.max_model_len, request.max_num_batched_tokens) >= wanted:
            return tp
        tp *= 2
    return None


def _no_room(request: EngineRequest, inp: _Inputs, profile: MemoryProfile, layout: KVCacheLayout) -> NoKVRoom:
    """The error for a profile that holds no KV block, naming the term that takes the memory
    and the input that drives it: a given budget; the weights (gpu_memory_utilization, or a
    larger TP); else the largest runtime term — a measured figure, or the activation peak's
    phase (max_num_batched_tokens for the forward pass, max_num_seqs for the sampler)."""
    block = f"one block in every layer slot takes {layout.bytes_per_block_all_layers / GiB * 1024:,.2f} MiB"
    left = f"leaves {profile.available_bytes / GiB:,.2f} GiB per GPU for the KV cache"
    if request.kv_budget_bytes_per_gpu is not None:
        return NoKVRoom("kv_budget_gib_per_gpu", f"{left}; {block}", measured=True)
    requested = profile.requested_bytes
    share = f"of the {requested / GiB:,.2f} GiB that gpu_memory_utilization {profile.utilization:g} asks for"
    if profile.weights.bytes >= requested:
        return NoKVRoom("gpu_memory_utilization", f"{left}: the weights take {profile.weights.bytes / GiB:,.2f} GiB "
                                                  f"{share} at TP {request.tp} (a larger TP splits them)")
    runtime = max((profile.activation, profile.non_torch, profile.cuda_graph), key=lambda t: t.bytes)
    given = {"activation peak": "activation_bytes", "non-torch": "non_torch_bytes", "CUDA graphs": "cuda_graph_bytes"}
    if not runtime.estimated:
        return NoKVRoom(given[runtime.name], f"{left}: the {runtime.name} given takes {runtime.bytes / GiB:,.2f} GiB "
                                             f"{share}", measured=True)
    if runtime is profile.activation and runtime.bytes > profile.weights.bytes:
        rows = min(request.max_num_seqs, request.max_num_batched_tokens)
        tokens = request.max_num_batched_tokens
        sampler = SAMPLER_VOCAB_COPIES * rows * inp.activation.vocab * LOGIT_BYTES if inp.last_stage else 0
        field_name, driver = (("max_num_seqs", f"the sampler over {rows:,} rows (max_num_seqs)")
                              if sampler >= runtime.bytes else
                              ("max_num_batched_tokens", f"the forward pass of {tokens:,} tokens (max_num_batched_tokens)"))
        return NoKVRoom(field_name, f"{left}: the activation peak of {driver} takes {runtime.bytes / GiB:,.2f} GiB {share}")
    return NoKVRoom("gpu_memory_utilization", f"{left} ({block}): the weights take {profile.weights.bytes / GiB:,.2f} "
                                              f"GiB and the {runtime.name} {runtime.bytes / GiB:,.2f} GiB {share}")


def plan_engine(request: EngineRequest) -> EngineReport:
    """Every engine-mode figure for one request (see :class:`EngineReport`).

    Raises :class:`~sizing.errors.NoKVRoom` when the KV budget cannot hold a single block,
    naming the input that drives the term taking the memory (see :func:`_no_room`).
    """
    if request.pp_layer_partition is not None and request.pp_stage is None:
        stages = len(partition_counts(request.pp_layer_partition))
        if stages > 1:  # vLLM gives every worker the smallest pool: the stage holding the fewest binds
            reports = [plan_engine(replace(request, pp_stage=s)) for s in range(stages)]
            return min(reports, key=lambda r: (r.fits_one_request, r.max_concurrency))
    inp = _resolve(request)
    profile, layout, blocks = _figures(request, inp, request.tp, request.gpu_memory_utilization)
    if blocks == 0:
        raise _no_room(request, inp, profile, layout)
    concurrency = layout.max_concurrency(blocks, request.max_model_len, request.max_num_batched_tokens)
    merged = inp.whole is not None and one_request_rule(inp.release) is OneRequestRule.MERGED
    checked = _layout(request, inp, request.tp, inp.whole) if merged else layout
    per_request = checked.request_bytes(request.max_model_len, request.max_num_batched_tokens)
    limit = inp.model.max_context or MAX_TOKENS
    notes = []
    if inp.whole is not None:
        start = sum(inp.partition[:inp.stage])
        notes.append(f"PP stage {inp.stage} of {len(inp.partition)} (VLLM_PP_LAYER_PARTITION="
                     f"{','.join(map(str, inp.partition))}): layers {start}–{start + inp.model.layers - 1} of "
                     f"{inp.whole.layers}, {'with' if inp.last_stage else 'without'} the sampler")
    if merged:
        notes.append(f"vLLM {request.vllm_version} checks one request against every stage's layers merged (all "
                     f"{inp.whole.layers}: get_kv_cache_configs of 0.14–0.16, which 0.17 replaced by each worker's "
                     "own), so the request and the largest max_model_len here count them all")
    if per_request > profile.available_bytes:
        notes.append(f"vLLM would refuse to start: one request of {request.max_model_len:,} tokens needs "
                     f"{per_request / GiB:.2f} GiB, more than the {profile.available_bytes / GiB:.2f} GiB available")
    if inp.mxfp4_note:
        notes.append(inp.mxfp4_note)
    if inp.activation.assumed:
        notes.append("activation widths assumed (hidden = heads × head dim, MLP 3.5 × hidden, 128 K vocabulary)")
    users = request.users
    replicas = None
    if users is not None and concurrency >= 1:
        replicas = math.ceil(users / math.floor(concurrency))
    weights_per_gpu = profile.weights.bytes
    kv_pool = blocks * layout.bytes_per_block_all_layers
    runtime = profile.activation.bytes + profile.non_torch.bytes + profile.cuda_graph.bytes
    fraction = sglang_mem_fraction(profile.total.bytes, weights_per_gpu, runtime, kv_pool)
    launch = LaunchPlan(model_repo=inp.repo, tp=request.tp, pp=1 if inp.whole is None else len(inp.partition),
                        kv_dtype=inp.kv.name, max_model_len=request.max_model_len,
                        gpu_memory_utilization=request.gpu_memory_utilization,
                        max_num_seqs=min(request.max_num_seqs, max(1, users or request.max_num_seqs)),
                        block_size=request.block_size, max_num_batched_tokens=request.max_num_batched_tokens)
    return EngineReport(
        request=request, model=inp.model, gpu=inp.gpu, kv_precision=inp.kv, profile=profile, layout=layout,
        num_blocks=blocks, max_concurrency=concurrency, mxfp4_backend=inp.mxfp4,
        kv_cache_tokens=reported_kv_tokens(layout, blocks, request.max_model_len, request.max_num_batched_tokens,
                                           tokens_rule(inp.release)),
        blocks_per_request=layout.blocks_per_request(request.max_model_len, request.max_num_batched_tokens),
        request_bytes=per_request, fits_one_request=per_request <= profile.available_bytes,
        max_model_len_fit=checked.max_model_len(profile.available_bytes, limit, request.max_num_batched_tokens),
        required_gpu_memory_utilization=_required_utilization(profile, layout, request),
        smallest_tp=_smallest_tp(request, inp), replicas_for_users=replicas,
        sglang_max_total_tokens=sglang_max_total_tokens(
            total_bytes=profile.total.bytes, weights_bytes=weights_per_gpu, mem_fraction_static=fraction,
            model=inp.model, tp=request.tp, kv_bytes_per_value=inp.kv.bytes_per_value),
        sglang_mem_fraction_static=fraction,
        launch_command=_partitioned(vllm_command(launch), inp), launch_command_sglang=sglang_command(launch, fraction),
        notes=tuple(notes),
    )


def _partitioned(command: str, inp: _Inputs) -> str:
    """``command`` with ``VLLM_PP_LAYER_PARTITION`` set before it when the plan is a pipeline's."""
    if inp.whole is None:
        return command
    return f"VLLM_PP_LAYER_PARTITION={','.join(map(str, inp.partition))} {command}"
