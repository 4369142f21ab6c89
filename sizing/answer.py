"""The one answer to "how many GPUs, and what do I launch?": :func:`answer_for` turns the
sizer's report and the engine's settings into a frozen :class:`Answer` — GPU model and count,
TP × PP × replicas, requests per replica at the context, whether the users fit, the rule
followed and the commands that launch exactly that deployment.

Every surface (the sizer and planner pages, both CLIs and their JSON) shows this object, so
they cannot disagree. The other counts the sizer computes answer other questions and are
labelled as such: the pooled count (all memory as one pool, a lower bound), the reference
formula's TP plan (vendor GB × usable fraction) and the capacity of the GPUs deployed.

The rule, for a KV dtype vLLM can cache (bf16, fp16, fp32, fp8):

1. The weights are what the engine loads: a quantised format converts the linear layers only
   (embeddings, ``lm_head`` and norms stay 16-bit), where the sizer's worked formula counts
   every parameter in the format, as the reference page does.
2. For every TP size up to one node (8 GPUs) that vLLM accepts — a power of two dividing the
   query heads, KV heads split or replicated — vLLM's memory profile of one GPU
   (:mod:`sizing.engine.memory`, at ``gpu_memory_utilization`` capped at
   :data:`MAX_PLANNED_UTILIZATION`) and its KV-cache groups give the requests of
   ``max_model_len`` tokens one replica holds: ``floor(Maximum concurrency)``, at most
   ``max_num_seqs``. The users need ``ceil(users / that)`` replicas.
3. When no TP on one node holds a single request beside the weights, pipeline stages are added
   (the fewest that hold one: vLLM's layer split, each stage a TP group on its own node); the
   first stage holds the most layers and binds.
4. The answer is the option with the fewest GPUs (ties: fewer stages, then the smaller TP, which
   communicates less); its engine figures are recomputed for the load one replica carries,
   ``ceil(users / replicas)``, which gives the utilisation that load needs and the commands'
   ``--max-num-seqs``.

A KV dtype no engine caches (int8, int4, int2) has no engine answer: the reference formula's
plan answers instead, labelled, with no command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sizing.checkpoints import Launchable, checkpoint_for
from sizing.engine.capacity import (DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, DEFAULT_UTILIZATION,
                                    ENGINE_KV_DTYPES, EngineReport, EngineRequest, plan_engine)
from sizing.engine.groups import DEFAULT_VLLM_VERSION, GroupingRule
from sizing.engine.launch import LaunchPlan, sglang_command, vllm_command
from sizing.engine.memory import ActivationShape
from sizing.engine.mxfp4 import AUTO
from sizing.engine.pipeline import pipeline_stage
from sizing.errors import NoKVRoom, SizingError
from sizing.models import check_int
from sizing.presets import get_preset
from sizing.plan import tp_sizes
from sizing.report import SizingReport
from sizing.weights import engine_weight_bytes

MAX_PLANNED_UTILIZATION = 0.95  # above this the answer adds GPUs rather than squeeze the runtime's headroom
MAX_ANSWER_TP = 8  # one node's NVLink domain; wider groups are pipeline stages
MAX_ANSWER_PP = 16


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """vLLM's settings that shape the answer (defaults: vLLM's own).

    Measured figures, bytes per GPU: ``kv_budget_bytes_per_gpu`` ("Available KV cache memory")
    and the activation peak, non-torch and CUDA-graph memory belong to the run they were read
    from, at ``measured_tp``, and replace the estimates at that TP only; ``total_bytes_per_gpu``
    (CUDA's total) holds at every TP.
    """

    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    rule: GroupingRule | str = GroupingRule.HYBRID
    enforce_eager: bool = False
    kv_budget_bytes_per_gpu: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    total_bytes_per_gpu: int | None = None
    measured_tp: int | None = None
    cuda_graphs_profiled: bool = True  # False: vLLM before 0.21, which did not subtract them
    vllm_version: str = DEFAULT_VLLM_VERSION  # the release modelled (see EngineRequest)
    mxfp4_backend: str = AUTO  # the MoE kernel holding MXFP4 experts (see EngineRequest)

    def check(self) -> None:
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, float | int) or not 0 < u <= 1:
            raise SizingError("gpu_memory_utilization", f"must be above 0 and at most 1, got {u!r:.40}")
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, high=1 << 24)
        check_int("max_num_seqs", self.max_num_seqs, high=1 << 20)
        try:
            GroupingRule(self.rule)
        except ValueError:
            raise SizingError("engine_rule", f"must be one of {', '.join(GroupingRule)}, got {self.rule!r:.40}") from None


@dataclass(frozen=True, kw_only=True)
class AnswerOption:
    """One layout considered: TP × PP per replica, the requests one replica holds, replicas."""

    tp: int
    pp: int
    requests_per_replica: int
    replicas: int | None  # None: one replica cannot hold a single request
    reason: str = ""
    kv_bytes_per_gpu: int | None = None  # vLLM's "Available KV cache memory" (first stage); None: refused


    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.tp * self.pp * self.replicas

    def as_record(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "requests_per_replica": self.requests_per_replica,
                "replicas": self.replicas, "gpus": self.gpus, "kv_bytes_per_gpu": self.kv_bytes_per_gpu,
                "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class AnswerTiming:
    """The time per output token at the answer's batch: ``batch`` sequences of ``context`` tokens
    on one replica. The sizer holds no step model, so the layers above it compute this
    (``planner.plan.answer_timing``) and attach it; ``tpot_s`` is None, with ``reason``, when
    the step model does not cover the layout."""

    batch: int
    context: int
    tpot_s: float | None  # seconds
    label: str  # what produced the figure, e.g. "step model: vllm, CUDA graphs, …"
    reason: str = ""

    @property
    def line(self) -> str:
        """``TPOT at the answer's batch: 12.34 ms (step model: …; 25 requests of 32,768 tokens per replica)``."""
        where = f"{self.batch:,} request{'s' if self.batch != 1 else ''} of {self.context:,} tokens per replica"
        if self.tpot_s is None:
            return f"TPOT at the answer's batch: not timed ({self.reason}; {where})"
        return f"TPOT at the answer's batch: {self.tpot_s * 1e3:.2f} ms ({self.label}; {where})"

    def as_record(self) -> dict[str, Any]:
        return {"tpot_s": self.tpot_s, "batch": self.batch, "context": self.context, "label": self.label,
                "reason": self.reason, "line": self.line}


@dataclass(frozen=True, kw_only=True)
class Answer:
    """The deployment that serves the users, and how to launch it. ``gpus`` is None (and
    ``fits`` False) when nothing up to TP 8 × PP 16 holds one request."""

    basis: str  # "vllm": vLLM's own memory profile; "formula": the reference formula
    rule: str
    gpu_id: str
    gpu_name: str
    users: int
    context: int
    tp: int | None
    pp: int | None
    replicas: int | None
    requests_per_replica: int  # what one replica holds at the context
    load_per_replica: int  # ceil(users / replicas): what each replica carries
    gpus_per_node: int
    planned_utilization: float | None  # the --gpu-memory-utilization of the commands
    required_utilization: float | None  # what the load per replica needs
    weight_format: str
    launch: Launchable | None
    vllm_command: str | None
    sglang_command: str | None
    options: tuple[AnswerOption, ...]
    notes: tuple[str, ...] = ()
    engine: EngineReport | None = None  # the engine's figures for one replica (its first stage)
    # The TPOT at the load per replica, attached by the planner's surfaces (the sizer has no step
    # model); kept out of ``as_dict``, which every surface prints alike, and shown on its own line.
    timing: AnswerTiming | None = None

    @property
    def fits(self) -> bool:
        return self.replicas is not None

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.tp * self.pp * self.replicas

    @property
    def nodes(self) -> int | None:
        return None if self.gpus is None else math.ceil(self.gpus / self.gpus_per_node)

    @property
    def layout(self) -> str:
        """``TP 4 × 3 replicas`` (``TP 8 × PP 2 × 1 replica``)."""
        if not self.fits:
            return "none"
        pp = f" × PP {self.pp}" if self.pp > 1 else ""
        return f"TP {self.tp}{pp} × {self.replicas} replica{'s' if self.replicas != 1 else ''}"

    @property
    def summary(self) -> str:
        if not self.fits:
            return (f"No deployment on {self.gpu_name} up to TP {MAX_ANSWER_TP} × PP {MAX_ANSWER_PP} holds one "
                    f"request of {self.context:,} tokens")
        nodes = self.nodes
        return (f"{self.gpus:,} × {self.gpu_name} ({self.layout}, {nodes} node{'s' if nodes != 1 else ''}): "
                f"{self.users:,} user{'s' if self.users != 1 else ''} of {self.context:,} tokens, "
                f"{self.load_per_replica:,} per replica "
                f"(each holds up to {self.requests_per_replica:,})")

    def as_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary, "basis": self.basis, "rule": self.rule, "gpu": self.gpu_id,
            "gpus": self.gpus, "nodes": self.nodes, "tp": self.tp, "pp": self.pp, "replicas": self.replicas,
            "users": self.users, "context": self.context, "fits": self.fits,
            "requests_per_replica": self.requests_per_replica, "load_per_replica": self.load_per_replica,
            "planned_gpu_memory_utilization": self.planned_utilization,
            "required_gpu_memory_utilization": self.required_utilization,
            "weight_format": self.weight_format,
            "model_repo": None if self.launch is None else self.launch.repo,
            "launch_note": "" if self.launch is None else self.launch.note,
            "vllm_command": self.vllm_command, "sglang_command": self.sglang_command,
            "options": [o.as_record() for o in self.options], "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class _Base:
    report: SizingReport
    settings: EngineSettings
    request: EngineRequest  # at TP 1, no PP; options replace tp, model and weights


def engine_weights_total(report: SizingReport) -> int:
    """The weights as the engine holds them: the stated safetensors total, else the checkpoint's
    linear layers in the format and the rest 16-bit (:func:`sizing.weights.engine_weight_bytes`)."""
    if report.weights_source == "safetensors":
        return report.weights_bytes
    return engine_weight_bytes(report.model, report.weight_precision).bytes


def _model_source(report: SizingReport) -> tuple[str, ActivationShape | None]:
    """The repository the commands launch and the activation widths of the catalogue's config
    (None for a shape the catalogue does not hold)."""
    preset = get_preset(report.handoff.preset_id) if report.handoff.preset_id else None
    return (preset.repo if preset else report.model.name,
            ActivationShape.from_config(preset.config) if preset else None)


def engine_request_as_asked(report: SizingReport, settings: EngineSettings) -> EngineRequest:
    """The engine request of one GPU at the report's own TP and the settings as given (the
    utilisation uncapped, a measured budget kept): what the sizer's engine view shows vLLM
    printing, built as the answer builds its own."""
    repo, activation = _model_source(report)
    settings = replace(settings, measured_tp=report.tp)  # a measured budget is the asked TP's
    base = _base(report, settings, repo, activation, planned=float(settings.gpu_memory_utilization))
    return _at(base, report.tp, 1, users=report.users)


def _base(report: SizingReport, settings: EngineSettings, repo: str, activation: ActivationShape | None, *,
          planned: float | None = None) -> _Base:
    """The answer's engine request at TP 1 (``planned``: the utilisation, by default the settings'
    capped at :data:`MAX_PLANNED_UTILIZATION`, above which the answer adds GPUs instead)."""
    if planned is None:
        planned = min(float(settings.gpu_memory_utilization), MAX_PLANNED_UTILIZATION)
    request = EngineRequest(
        model=report.model, gpu=report.gpu, tp=1, kv_dtype=report.kv_precision.name,
        weights_total_bytes=engine_weights_total(report), max_model_len=report.context, block_size=report.block_size,
        gpu_memory_utilization=planned, max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs, rule=settings.rule, enforce_eager=settings.enforce_eager,
        activation=activation or ActivationShape.assumed_for(report.model), model_repo=repo,
        total_bytes_per_gpu=settings.total_bytes_per_gpu, cuda_graphs_profiled=settings.cuda_graphs_profiled,
        weight_dtype=report.weight_precision.name, vllm_version=settings.vllm_version,
        mxfp4_backend=settings.mxfp4_backend)
    return _Base(report=report, settings=settings, request=request)


def _at(base: _Base, tp: int, pp: int, users: int | None = None, stage: int = 0) -> EngineRequest:
    """The engine request of stage ``stage`` of one replica at ``tp`` × ``pp``."""
    request, settings = base.request, base.settings
    if pp == 1 and tp == settings.measured_tp:
        request = replace(request, kv_budget_bytes_per_gpu=settings.kv_budget_bytes_per_gpu,
                          activation_bytes=settings.activation_bytes, non_torch_bytes=settings.non_torch_bytes,
                          cuda_graph_bytes=settings.cuda_graph_bytes)
    if pp == 1:
        return replace(request, tp=tp, users=users)
    part = pipeline_stage(base.report.model, pp, stage)
    share = Fraction(part.layers, base.report.model.layers)
    return replace(request, model=part, tp=tp, users=users, last_pp_stage=stage == pp - 1,
                   weights_total_bytes=math.ceil(request.weights_total_bytes * share))


def _stages(pp: int) -> tuple[int, ...]:
    """The stages that can bind: the first holds the most layers, the last runs the sampler."""
    return (0,) if pp == 1 else (0, pp - 1)


def _binding(base: _Base, tp: int, pp: int, users: int | None = None) -> EngineReport:
    """The stage of one replica that holds the fewest requests (its figures are the replica's)."""
    reports = [plan_engine(_at(base, tp, pp, users, stage)) for stage in _stages(pp)]
    return min(reports, key=lambda r: (r.fits_one_request, r.max_concurrency))


def _option(base: _Base, tp: int, pp: int) -> AnswerOption:
    try:
        engine = _binding(base, tp, pp)
    except NoKVRoom as exc:
        return AnswerOption(tp=tp, pp=pp, requests_per_replica=0, replicas=None,
                            reason="the weights leave no room for a KV block" if exc.field == "gpu_memory_utilization"
                            else f"no room for a KV block ({exc.field}: {exc.message})")
    except SizingError as exc:
        return AnswerOption(tp=tp, pp=pp, requests_per_replica=0, replicas=None, reason=exc.message)
    if not engine.fits_one_request:
        return AnswerOption(tp=tp, pp=pp, requests_per_replica=0, replicas=None,
                            kv_bytes_per_gpu=engine.available_kv_bytes_per_gpu,
                            reason=f"one request of {base.report.context:,} tokens needs more than the "
                                   f"{engine.available_kv_bytes_per_gpu / 2**30:,.2f} GiB of KV memory per GPU")
    per_replica = min(math.floor(engine.max_concurrency), base.settings.max_num_seqs)
    return AnswerOption(tp=tp, pp=pp, requests_per_replica=per_replica,
                        replicas=math.ceil(base.report.users / per_replica),
                        kv_bytes_per_gpu=engine.available_kv_bytes_per_gpu)


def _tp_sizes(base: _Base, limit: int) -> tuple[int, ...]:
    """The TP sizes vLLM accepts: the KV heads' (:func:`sizing.plan.tp_sizes`) that also divide
    the query heads."""
    model = base.report.model
    return tuple(tp for tp in tp_sizes(model, limit) if model.q_heads % tp == 0)


def _options(base: _Base) -> list[AnswerOption]:
    sizes = _tp_sizes(base, MAX_ANSWER_TP)
    options = [_option(base, tp, 1) for tp in sizes]
    if any(o.replicas is not None for o in options) or not sizes:
        return options
    for pp in range(2, min(MAX_ANSWER_PP, base.report.model.layers) + 1):
        staged = [_option(base, tp, pp) for tp in sizes]
        options += staged
        if any(o.replicas is not None for o in staged):
            break
    return options


def _asked_tp_note(base: _Base, options: list[AnswerOption], best: AnswerOption) -> str:
    asked = base.report.tp
    if asked == best.tp and best.pp == 1:
        return ""
    option = next((o for o in options if o.tp == asked and o.pp == 1), None)
    if option is None:  # an asked TP wider than one node; _option reports a refusal as its reason
        option = _option(base, asked, 1)
    if option.replicas is None:
        return f"TP {asked}, as asked, cannot serve one request ({option.reason}); the answer uses TP {best.tp}"
    return (f"TP {asked}, as asked: {option.requests_per_replica:,} requests per replica, "
            f"{option.replicas:,} replicas = {option.gpus:,} GPUs")


def _nothing_fits_note(options: list[AnswerOption]) -> str:
    """Why nothing fits, from the widest layout tried."""
    if not options:
        return f"vLLM accepts no TP up to {MAX_ANSWER_TP} for these attention heads"
    widest = max(options, key=lambda o: (o.tp * o.pp, o.tp))
    return (f"No TP up to {MAX_ANSWER_TP} with up to {MAX_ANSWER_PP} pipeline stages holds one request: "
            f"at TP {widest.tp} × PP {widest.pp}, {widest.reason}")


def _commands(base: _Base, best: AnswerOption, engine: EngineReport, launch: Launchable, load: int) -> tuple[str, str]:
    plan = LaunchPlan(model_repo=launch.repo, tp=best.tp, pp=best.pp, kv_dtype=base.report.kv_precision.name,
                      max_model_len=base.report.context,
                      gpu_memory_utilization=base.request.gpu_memory_utilization,
                      max_num_seqs=min(base.settings.max_num_seqs, load),
                      # A Mamba / linear hybrid's attention block is vLLM's to derive from the state page.
                      block_size=None if base.report.model.n_state_layers else base.report.block_size,
                      max_num_batched_tokens=base.settings.max_num_batched_tokens,
                      quantization=launch.quantization, dtype=launch.dtype)
    return vllm_command(plan), sglang_command(plan, engine.sglang_mem_fraction_static)


def _formula_answer(report: SizingReport, why: str) -> Answer:
    plan = report.plan
    best = plan.best
    options = tuple(AnswerOption(tp=o.tp, pp=1, requests_per_replica=o.users_per_replica, replicas=o.replicas,
                                 reason="" if o.fits else "the weights and one user exceed the usable memory")
                    for o in plan.options)
    return Answer(
        basis="formula",
        rule=(f"the reference formula: {report.usable_fraction:.0%} of the vendor's memory per GPU, weights "
              f"split over TP, whole replicas ({why})"),
        gpu_id=report.gpu.id, gpu_name=report.gpu.name, users=report.users, context=report.context,
        tp=None if best is None else best.tp, pp=None if best is None else 1,
        replicas=None if best is None else best.replicas,
        requests_per_replica=0 if best is None else best.users_per_replica,
        load_per_replica=0 if best is None else math.ceil(report.users / best.replicas),
        gpus_per_node=plan.gpus_per_node, planned_utilization=None, required_utilization=None,
        weight_format=report.weight_precision.name, launch=None, vllm_command=None, sglang_command=None,
        options=options, notes=(f"No launch command: {why}.",))


def answer_for(report: SizingReport, settings: EngineSettings | None = None) -> Answer:
    """The deployment that serves ``report.users`` requests of ``report.context`` tokens on
    ``report.gpu`` (module notes give the rule), with its launch commands."""
    settings = settings or EngineSettings()
    settings.check()
    kv = report.kv_precision.name
    if kv not in ENGINE_KV_DTYPES:
        return _formula_answer(report, f"vLLM and SGLang cache KV as {', '.join(ENGINE_KV_DTYPES)}, "
                                                 f"not {kv}")
    preset_id = report.handoff.preset_id
    repo, activation = _model_source(report)
    base = _base(report, settings, repo, activation)
    named = "" if preset_id or report.model_source == "hub" else (
        f"the model is a shape given by {'a config.json' if report.model_source == 'config' else 'hand'}: "
        f"replace {repo!r} in the commands with its checkpoint")
    options = _options(base)
    fitting = [o for o in options if o.replicas is not None]
    rule = (f"vLLM V1's memory profile on {report.gpu.name} at gpu_memory_utilization "
            f"{base.request.gpu_memory_utilization:g}, KV-cache groups ({GroupingRule(settings.rule)} rule), "
            f"at most {settings.max_num_seqs:,} requests per replica (max_num_seqs), whole replicas")
    launch = checkpoint_for(repo=repo, own_format=report.model.weight_format,
                            weight_format=report.weight_precision.name, preset_id=preset_id)
    common = dict(basis="vllm", rule=rule, gpu_id=report.gpu.id, gpu_name=report.gpu.name, users=report.users,
                  context=report.context, gpus_per_node=report.plan.gpus_per_node,
                  planned_utilization=base.request.gpu_memory_utilization,
                  weight_format=report.weight_precision.name, launch=launch, options=tuple(options))
    if not fitting:
        return Answer(tp=None, pp=None, replicas=None, requests_per_replica=0, load_per_replica=0,
                      required_utilization=None, vllm_command=None, sglang_command=None,
                      notes=(_nothing_fits_note(options),),
                      **common)
    best = min(fitting, key=lambda o: (o.gpus, o.pp, o.tp))
    load = math.ceil(report.users / best.replicas)
    engine = _binding(base, best.tp, best.pp, users=load)
    vllm, sglang = (_commands(base, best, engine, launch, load) if launch.launchable else (None, None))
    notes = [n for n in (_asked_tp_note(base, options, best), launch.note, named) if n]
    if settings.gpu_memory_utilization > MAX_PLANNED_UTILIZATION:
        notes.append(f"gpu_memory_utilization {settings.gpu_memory_utilization:g} is above "
                     f"{MAX_PLANNED_UTILIZATION:g}; the answer plans at {MAX_PLANNED_UTILIZATION:g} and adds GPUs "
                     f"instead of leaving the runtime less room")
    if best.pp > 1:
        notes.append(f"{best.pp} pipeline stages: no TP up to {MAX_ANSWER_TP} on one node holds the weights "
                     f"and one request")
    return Answer(tp=best.tp, pp=best.pp, replicas=best.replicas, requests_per_replica=best.requests_per_replica,
                  load_per_replica=load, required_utilization=engine.required_gpu_memory_utilization,
                  vllm_command=vllm, sglang_command=sglang, notes=tuple(notes), engine=engine, **common)


__all__ = ["MAX_PLANNED_UTILIZATION", "Answer", "AnswerOption", "AnswerTiming", "EngineSettings", "answer_for"]
