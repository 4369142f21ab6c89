"""Explain a vLLM start-up log: reproduce each figure it prints from the model's shape, and say
term by term where the usual formula, this app and vLLM part ways.

The usual formula divides the available memory by the bytes per token of every layer and the
result by the context. vLLM differs in three places, each reported when it matters:

* whole blocks: the budget is cut into blocks of ``block_size`` tokens in every layer slot;
* padding: hybrid models get equal-size KV-cache groups, and padding slots take memory;
* reservation: a sliding-window layer reserves ``window − 1 + max_num_batched_tokens`` tokens
  plus a block per request, not ``min(context, window)``, so "Maximum concurrency" is not
  tokens ÷ context.

Printed GiB figures are rounded (to 0.01 GiB); a reconstruction is "within" when the logged
figure lies in the range the rounded input allows. Ratios are compared to 0.5 %.

Under pipeline parallelism the one-request check ("KV cache needed", "estimated maximum model
length") follows the release (:func:`sizing.engine.pipeline.one_request_rule`): vLLM 0.14–0.16
counted every stage's layers against the smallest worker's memory, other releases each worker's
own layers.

A log of a refused start-up (V1's "… GiB KV cache is needed, which is larger than the available
KV cache memory …", V0's "max seq len … is larger than the maximum number of tokens that can be
stored in KV cache …") gets :func:`sizing.engine.startup_fix.startup_fix`: the
``gpu_memory_utilization``, the ``max_model_len`` and the TP that would start it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizing.engine.groups import (
    DEFAULT_ATTENTION_BACKEND,
    TOKENS_FROM_CONCURRENCY_SINCE,
    GroupingRule,
    KVCacheLayout,
    TokensRule,
    kv_cache_layout,
    reported_kv_tokens,
    tokens_rule,
    vllm_release,
)
from sizing.engine.memory import ActivationShape, activation_peak_bytes
from sizing.engine.pipeline import (
    OneRequestRule,
    one_request_rule,
    parse_layer_partition,
    partition_counts,
    pipeline_stage,
    stage_layers,
)
from sizing.engine.startup_fix import StartupFix, startup_fix
from sizing.engine.vllm_log import ParsedLog
from sizing.errors import SizingError
from sizing.kv import KVCacheSpec
from sizing.layers import MAX_SPECULATIVE_TOKENS, STATE_KINDS
from sizing.models import ModelShape, check_int
from sizing.precisions import get_precision
from units import GiB

RATIO_TOLERANCE = 0.005  # concurrency within 0.5 %
ACTIVATION_TOLERANCE = 0.25  # the activation estimate within 25 %
_HALF_STEP_GIB = Fraction(1, 200)  # vLLM prints GiB with two decimals
_LOG_KV_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
_MODEL_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One engine setting the reconstruction used, and where it came from (log, given, default)."""

    name: str
    value: Any
    source: str


@dataclass(frozen=True, kw_only=True)
class FigureCheck:
    """One logged figure against its reconstruction.

    ``low``/``high`` bound the reconstruction over the rounding of the logged inputs;
    ``formula`` is what the usual tokens-and-context formula gives; ``why`` explains the gap.
    """

    name: str
    logged: float
    reconstructed: float
    low: float
    high: float
    formula: float | None
    within: bool
    relative_error: float
    why: str

    def as_record(self) -> dict[str, Any]:
        return {"name": self.name, "logged": self.logged, "reconstructed": self.reconstructed, "low": self.low,
                "high": self.high, "formula": self.formula, "within": self.within,
                "relative_error": self.relative_error, "why": self.why}


@dataclass(frozen=True, kw_only=True)
class LogExplanation:
    """The parsed log, the settings assumed, each figure checked, and what could not be checked."""

    parsed: ParsedLog
    settings: tuple[Setting, ...]
    layout: KVCacheLayout
    checks: tuple[FigureCheck, ...]
    not_reconstructed: tuple[str, ...]
    fix: StartupFix | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "startup_fix": None if self.fix is None else self.fix.as_dict(),
            "parsed": self.parsed.as_dict(),
            "settings": [{"name": s.name, "value": s.value, "source": s.source} for s in self.settings],
            "kv_cache_groups": [g.label for g in self.layout.groups],
            "layer_slots": self.layout.layer_slots,
            "checks": [c.as_record() for c in self.checks],
            "all_within": all(c.within for c in self.checks),
            "not_reconstructed": list(self.not_reconstructed),
        }


def _relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else (0.0 if a == b else math.inf)


def _setting(name: str, logged: Any, given: Any, default: Any) -> Setting:
    if given is not None:
        return Setting(name=name, value=given, source="given")
    if logged is not None:
        return Setting(name=name, value=logged, source="log")
    return Setting(name=name, value=default, source="default")


def log_kv_dtype(parsed: ParsedLog) -> tuple[str, str] | None:
    """The KV-cache precision the log states — ``kv_cache_dtype``, or the model dtype under
    ``auto`` — and where it was read; None when it states neither."""
    logged = _LOG_KV_DTYPES.get(parsed.kv_cache_dtype or "", None)
    if logged is not None:
        return logged, "log"
    model_dtype = _MODEL_DTYPES.get(parsed.dtype or "")
    if model_dtype is not None:
        return model_dtype, "log (model dtype, kv_cache_dtype=auto)"
    return None


def _kv_dtype(parsed: ParsedLog, given: str | None) -> Setting:
    if given is not None:
        return Setting(name="kv_dtype", value=given, source="given")
    logged = log_kv_dtype(parsed)
    if logged is not None:
        return Setting(name="kv_dtype", value=logged[0], source=logged[1])
    return Setting(name="kv_dtype", value="bf16", source="default")


def explain_log(
    parsed: ParsedLog,
    model: ModelShape,
    *,
    activation: ActivationShape | None = None,
    tp: int | None = None,
    pp: int | None = None,
    pp_layer_partition: str | Sequence[int] | None = None,
    kv_dtype: str | None = None,
    max_model_len: int | None = None,
    block_size: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    rule: GroupingRule | str | None = None,
    vllm_version: str | None = None,
    attention_backend: str | None = None,
    kernel_block_alignment: int | None = None,
    speculative_tokens: int | None = None,
    prefix_caching: bool | None = None,
) -> LogExplanation:
    """Reproduce the figures of ``parsed`` for ``model``; arguments override what the log says.

    Under pipeline parallelism (``pp`` > 1) the figures are rebuilt for stage 0, the layers
    rank 0 holds (the parser keeps rank 0's lines): vLLM's even split, or ``pp_layer_partition``
    (``VLLM_PP_LAYER_PARTITION``, "16,32": the layers of each stage; it sets ``pp`` when neither
    the argument nor the log does). A refusal's "KV cache needed" and "estimated maximum model
    length" are checked by the release's rule: vLLM 0.14–0.16 count all the model's layers (the
    stages merged), other releases one stage's; with the release unknown both are tried, and
    the check says which the log matches. With more than one worker (TP × PP > 1) a
    token or block count below what the printed memory holds is another worker's smaller pool
    (vLLM keeps the smallest ``num_blocks`` of all workers); the check says so and names its GiB.

    ``vllm_version`` (else the log's) picks how "GPU KV cache size" is counted: up to 0.23
    ``num_blocks // groups × block``, from 0.24 ``int(max_concurrency × max_model_len)``; with
    neither known (or a development build) the token check accepts either and says which one the
    log matches. ``attention_backend`` / ``kernel_block_alignment`` step a hybrid model's
    attention block (see :func:`~sizing.engine.groups.kv_cache_layout`); ``speculative_tokens``
    widens its convolution state and adds a state page per request; ``prefix_caching`` (else the
    log's ``enable_prefix_caching``, else off) puts the state in vLLM's "align" mode, two pages a
    request instead of one.
    """
    if speculative_tokens is not None:
        check_int("speculative_tokens", speculative_tokens, low=0, high=MAX_SPECULATIVE_TOKENS)
    if prefix_caching is not None and not isinstance(prefix_caching, bool):
        raise SizingError("prefix_caching", f"expected True or False, got {type(prefix_caching).__name__}")
    release = None if vllm_version is None else vllm_release(vllm_version)
    counts = None if pp_layer_partition is None else partition_counts(pp_layer_partition)
    missing: list[str] = []
    settings = {
        "tp": _setting("tp", parsed.tp, tp, 1),
        "pp": (_setting("pp", parsed.pp, pp, 1) if counts is None or parsed.pp or pp
               else Setting(name="pp", value=len(counts), source="pp_layer_partition")),
        "pp_layer_partition": _setting("pp_layer_partition", None,
                                       None if counts is None else ",".join(map(str, counts)), None),
        "kv_dtype": _kv_dtype(parsed, kv_dtype),
        "max_model_len": _setting("max_model_len", parsed.max_model_len or parsed.concurrency_len, max_model_len,
                                  model.max_context or 8192),
        "block_size": _setting("block_size", parsed.block_size, block_size, 16),
        "max_num_batched_tokens": _setting("max_num_batched_tokens", parsed.max_num_batched_tokens,
                                           max_num_batched_tokens, 8192),
        "max_num_seqs": _setting("max_num_seqs", parsed.max_num_seqs, max_num_seqs, 256),
        "rule": _setting("rule", None, rule, str(GroupingRule.HYBRID)),
        "vllm_version": _setting("vllm_version", parsed.version, vllm_version, None),
        "attention_backend": _setting("attention_backend", None, attention_backend, DEFAULT_ATTENTION_BACKEND),
        "kernel_block_alignment": _setting("kernel_block_alignment", None, kernel_block_alignment, None),
        "speculative_tokens": _setting("speculative_tokens", parsed.speculative_tokens, speculative_tokens, 0),
        "prefix_caching": _setting("prefix_caching", parsed.prefix_caching, prefix_caching, False),
    }
    v = {name: s.value for name, s in settings.items()}
    if release is None and parsed.version is not None:
        try:
            release = vllm_release(parsed.version)
        except SizingError:
            missing.append(f"the log's vLLM version {parsed.version[:40]!r} is not a release: the token count is "
                           "checked against both versions' rules")
    has_state = any(g.kind in STATE_KINDS for g in model.layer_groups(v["tp"]))
    # MambaSpec: one state page per request ("none" mode), two with prefix caching ("align"),
    # plus one per speculative token either way.
    state_blocks = (2 if v["prefix_caching"] else 1) + v["speculative_tokens"]
    if counts is not None:
        counts = parse_layer_partition(counts, model.layers, v["pp"])
    whole = model
    if v["pp"] > 1:
        held = stage_layers(model.layers, v["pp"], 0, counts)
        split = "VLLM_PP_LAYER_PARTITION" if counts is not None else "vLLM's get_pp_indices"
        missing.append(f"PP {v['pp']}: each stage sizes its own cache; rebuilt for stage 0 (rank 0), which holds "
                       f"layers {held.start}–{held.stop - 1} of {model.layers} ({split})")
        model = pipeline_stage(model, v["pp"], 0, counts)
    if len({gib for _, gib in parsed.available_by_rank}) > 1:
        spread = sorted({gib for _, gib in parsed.available_by_rank})
        missing.append(f"ranks report {spread[0]:g}–{spread[-1]:g} GiB available: each worker sizes its cache from "
                       "its own memory and vLLM keeps the smallest block count; rank 0's figure is used here")
    precision = get_precision(v["kv_dtype"], field="kv_dtype")
    layout_options = dict(block_size=v["block_size"], rule=v["rule"], state_blocks=state_blocks if has_state else 1,
                          speculative_tokens=v["speculative_tokens"], attention_backend=v["attention_backend"],
                          kernel_block_alignment=v["kernel_block_alignment"])
    layout = kv_cache_layout(model, precision, tp=v["tp"], **layout_options)
    length, mnbt = v["max_model_len"], v["max_num_batched_tokens"]
    spec = KVCacheSpec(model=model, precision=precision, tp=v["tp"], block_size=v["block_size"])
    checks: list[FigureCheck] = []

    available = None if parsed.available_gib is None else Fraction(repr(parsed.available_gib)) * GiB
    if available is not None and available <= 0:
        missing.append(f"the log reports {parsed.available_gib:g} GiB available: no KV block fits (vLLM stops with "
                       "'No available memory for the cache blocks'); raise gpu_memory_utilization or the TP size")
    if available is not None:
        low_b, high_b = available - _HALF_STEP_GIB * GiB, available + _HALF_STEP_GIB * GiB
        blocks = layout.num_blocks(available)
        naive_tokens = float(available / spec.bytes_per_token_per_gpu)
        if parsed.kv_tokens is not None:
            checks.append(_tokens_check(parsed.kv_tokens, layout, (blocks, layout.num_blocks(low_b),
                                                                   layout.num_blocks(high_b)),
                                        parsed.concurrency_len or length, mnbt, release, naive_tokens,
                                        workers=v["tp"] * v["pp"], available_gib=parsed.available_gib))
        if parsed.gpu_blocks is not None:
            lo, hi = layout.num_blocks(low_b), layout.num_blocks(high_b)
            why = f"available // ({layout.page_bytes:,} B page × {layout.group_size} layer slots)"
            within = lo <= parsed.gpu_blocks <= hi
            if not within and v["tp"] * v["pp"] > 1 and parsed.gpu_blocks < lo:
                within, lo = True, parsed.gpu_blocks
                why += "; " + _smaller_worker_why(parsed.gpu_blocks, layout, v["tp"] * v["pp"], parsed.available_gib)
            checks.append(FigureCheck(
                name="GPU blocks", logged=parsed.gpu_blocks, reconstructed=blocks, low=lo, high=hi, formula=None,
                within=within, relative_error=_relative(blocks, parsed.gpu_blocks), why=why))
    else:
        missing.append("Available KV cache memory is not in the log: tokens and blocks cannot be rebuilt from memory")

    if parsed.concurrency is not None:
        blocks_known = _blocks_from_log(parsed, layout)
        if blocks_known is None and available is not None:
            blocks_known = layout.num_blocks(available)
        if blocks_known is None:
            missing.append("Maximum concurrency: neither the KV cache size nor the available memory is logged")
        else:
            conc_len = parsed.concurrency_len or length
            value = layout.max_concurrency(blocks_known, conc_len, mnbt)
            naive = layout.tokens(blocks_known) / conc_len
            err = _relative(value, parsed.concurrency)
            checks.append(FigureCheck(
                name=f"Maximum concurrency at {conc_len:,} tokens", logged=parsed.concurrency, reconstructed=value,
                low=value, high=value, formula=naive, within=err <= RATIO_TOLERANCE or round(value, 2) == parsed.concurrency,
                relative_error=err, why=_concurrency_why(layout, conc_len, mnbt, naive, value)))

    _memory_checks(parsed, model, activation, v, checks, missing)
    refused = parsed.needed_gib is not None or parsed.estimated_max_len is not None
    views = (_one_request_views(whole, v["pp"], counts, release,
                                lambda m: kv_cache_layout(m, precision, tp=v["tp"], **layout_options))
             if refused else [("", model, layout)])
    checked = _length_checks(parsed, views, mnbt, checks, release is not None)
    if parsed.padding_layers is not None:
        ours = sum(w.padding_layers for w in layout.warnings)
        checks.append(FigureCheck(
            name="padding layers", logged=parsed.padding_layers, reconstructed=ours, low=ours, high=ours, formula=0,
            within=ours == parsed.padding_layers, relative_error=_relative(ours, parsed.padding_layers),
            why="equal-size KV-cache groups: " + ", ".join(g.label for g in layout.groups)))
    # The hybrid settings only move a model with Mamba / linear-attention state.
    quiet = {"kernel_block_alignment", "pp_layer_partition"} | (
        set() if has_state else {"attention_backend", "speculative_tokens", "prefix_caching"})
    for name, s in settings.items():
        if s.source != "default" or name in quiet:
            continue
        if name == "vllm_version":
            if parsed.kv_tokens is not None:
                missing.append("vllm_version not in the log: 'GPU KV cache size' is checked against both the "
                               f"rule before {'.'.join(map(str, TOKENS_FROM_CONCURRENCY_SINCE))} and the one since")
            continue
        missing.append(f"{name} not in the log; assumed {s.value}")
    fix = startup_fix(parsed, layout_at=lambda t: kv_cache_layout(checked, precision, tp=t, **layout_options),
                      tp=v["tp"], max_model_len=length, max_num_batched_tokens=mnbt)
    return LogExplanation(parsed=parsed, settings=tuple(settings.values()), layout=layout, checks=tuple(checks),
                          not_reconstructed=tuple(missing), fix=fix)


def _tokens_check(logged: int, layout: KVCacheLayout, blocks: tuple[int, int, int], length: int, mnbt: int,
                  release: tuple[int, int] | None, naive: float, *, workers: int = 1,
                  available_gib: float | None = None) -> FigureCheck:
    """The "GPU KV cache size" check at ``blocks`` (mid, low, high) under the version's rule;
    under both rules when the version is unknown, reporting the one the log matches.

    With more than one worker (TP × PP > 1) a logged count below what the printed memory holds
    is read as another worker's smaller pool: vLLM's ``get_kv_cache_configs``
    (``vllm/v1/core/kv_cache_utils.py``; V0's executor likewise) gives every worker the smallest
    ``num_blocks`` of all workers, and counts the tokens from it, while each worker prints its own
    available memory. A count above what the printed memory holds stays a mismatch: no worker's
    pool is larger than the smallest one."""
    names = [tokens_rule(release)] if release is not None else [TokensRule.GROUPS, TokensRule.CONCURRENCY]

    def count(rule: TokensRule, n: int) -> int:
        return reported_kv_tokens(layout, n, length, mnbt, rule)

    figures = {name: tuple(count(name, n) for n in blocks) for name in names}
    matched = next((n for n in names if figures[n][1] <= logged <= figures[n][2]), None)
    smaller = None
    if matched is None and workers > 1:
        smaller = next(((n, found) for n in names if logged < figures[n][1]
                        and (found := _blocks_counted(lambda k, r=n: count(r, k), logged, blocks[1])) is not None),
                       None)
        if smaller is not None:
            matched = smaller[0]
    matched = matched or names[0]
    tokens, lo, hi = figures[matched]
    since = ".".join(map(str, TOKENS_FROM_CONCURRENCY_SINCE))
    if matched is TokensRule.CONCURRENCY:
        rule = (f"vLLM ≥ {since} prints int(max_concurrency × max_model_len) = "
                f"int({blocks[0]:,} / {layout.blocks_per_request(length, mnbt):,} × {length:,})")
    else:
        rule = f"vLLM < {since} prints num_blocks // {len(layout.groups)} groups × {layout.block_size} tokens"
    if release is None:
        rule += " (the vLLM version is not known: both rules were tried)"
    within = lo <= logged <= hi
    if smaller is not None:
        within, lo = True, logged
        rule += "; " + _smaller_worker_why(smaller[1], layout, workers, available_gib)
    return FigureCheck(name="GPU KV cache size (tokens)", logged=logged, reconstructed=tokens, low=lo, high=hi,
                       formula=naive, within=within, relative_error=_relative(tokens, logged),
                       why=_tokens_why(layout, naive, tokens) + "; " + rule)


def _blocks_counted(count: Callable[[int], int], logged: int, upper: int) -> int | None:
    """The smallest block count ≤ ``upper`` whose printed count is exactly ``logged`` (the count
    grows with the blocks); None when no pool prints it."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi) // 2
        if count(mid) >= logged:
            hi = mid
        else:
            lo = mid + 1
    return lo if count(lo) == logged else None


def _smaller_worker_why(num_blocks: int, layout: KVCacheLayout, workers: int, available_gib: float | None) -> str:
    """The smallest worker a logged block count implies, in words (GiB of that worker's pool)."""
    pool = num_blocks * layout.bytes_per_block_all_layers / GiB
    printed = "" if available_gib is None else f" against the {available_gib:.2f} GiB this worker printed"
    return (f"{workers} workers: vLLM gives every worker the smallest num_blocks of all workers "
            f"(get_kv_cache_configs), so the logged figure is another worker's pool of {num_blocks:,} blocks, "
            f"{pool:.2f} GiB{printed}")


def _blocks_from_log(parsed: ParsedLog, layout: KVCacheLayout) -> int | None:
    """The block count the log implies: ``# GPU blocks``, or the token count × groups ÷ block.

    The token count gives blocks only where it was counted in blocks (vLLM < 0.24, or one group
    whose tokens are whole blocks); a concurrency product does not, and gives None here.
    """
    if parsed.gpu_blocks is not None:
        return parsed.gpu_blocks
    if parsed.kv_tokens is not None and parsed.kv_tokens % layout.block_size == 0:
        return parsed.kv_tokens // layout.block_size * len(layout.groups)
    return None


def _tokens_why(layout: KVCacheLayout, naive: float, tokens: int) -> str:
    parts = [f"whole blocks of {layout.block_size} tokens in {layout.layer_slots} layer slots"]
    if layout.padding_layers:
        parts.append(f"{layout.padding_layers} of the slots are padding")
    if len(layout.groups) > 1:
        parts.append(f"the pool is shared by {len(layout.groups)} groups, tokens counted once per group")
    return f"formula {naive:,.0f} vs {tokens:,}: " + "; ".join(parts)


def _concurrency_why(layout: KVCacheLayout, length: int, mnbt: int, naive: float, value: float) -> str:
    if layout.rule is GroupingRule.SINGLE or len(layout.groups) == 1:
        return f"tokens ÷ {length:,} rounded to whole blocks per request ({naive:.2f} by the formula)"
    windows = [g for g in layout.groups if g.window is not None]
    detail = ""
    if windows:
        g = windows[0]
        detail = (f"; each {g.kind} group reserves {g.blocks_per_request(length, mnbt):,} blocks per request "
                  f"(window {g.window:,} − 1 + max_num_batched_tokens {mnbt:,}, plus one)")
    return (f"blocks ÷ {layout.blocks_per_request(length, mnbt):,} blocks per request over "
            f"{len(layout.groups)} groups{detail}; tokens ÷ context would say {naive:.2f}")


def _memory_checks(parsed: ParsedLog, model: ModelShape, activation: ActivationShape | None,
                   v: dict[str, Any], checks: list[FigureCheck], missing: list[str]) -> None:
    if parsed.activation_gib is not None:
        shape = activation or ActivationShape.assumed_for(model)
        estimate = activation_peak_bytes(shape, tp=v["tp"], max_num_batched_tokens=v["max_num_batched_tokens"],
                                         max_num_seqs=v["max_num_seqs"]) / GiB
        err = _relative(estimate, parsed.activation_gib)
        checks.append(FigureCheck(
            name="activation peak (GiB)", logged=parsed.activation_gib, reconstructed=estimate, low=estimate,
            high=estimate, formula=None, within=err <= ACTIVATION_TOLERANCE, relative_error=err,
            why="estimate: max(forward pass of max_num_batched_tokens, sampler over max_num_seqs rows)"
                + (" with assumed widths" if shape.assumed else "")))
    terms = (parsed.total_gib, parsed.gpu_memory_utilization, parsed.weights_gib, parsed.activation_gib,
             parsed.non_torch_gib)
    if parsed.available_gib is not None and all(t is not None for t in terms):
        total, util, weights, act, non_torch = terms
        rebuilt = total * util - weights - act - non_torch
        err = abs(rebuilt - parsed.available_gib)
        checks.append(FigureCheck(
            name="Available KV cache memory (GiB)", logged=parsed.available_gib, reconstructed=rebuilt,
            low=rebuilt - 0.03, high=rebuilt + 0.03, formula=None, within=err <= 0.03,
            relative_error=_relative(rebuilt, parsed.available_gib),
            why="total × utilisation − weights − activation peak − non-torch, each as logged (±0.03 GiB of rounding)"))
    elif parsed.available_gib is not None:
        missing.append("the memory breakdown (total, utilisation, weights, activation, non-torch) is not all "
                       "in the log: the available memory is taken as logged")


def _one_request_views(whole: ModelShape, pp: int, counts: tuple[int, ...] | None, release: tuple[int, int] | None,
                       layout_of: Callable[[ModelShape], KVCacheLayout]) -> list[tuple[str, ModelShape, KVCacheLayout]]:
    """The layers a release's one-request check counts, as (words, model, layout), the release's
    rule first: the whole model (the stages merged, vLLM 0.14–0.16) or each stage in turn (other
    releases); both rules when the release is not known. One view of the model without PP."""
    if pp == 1:
        return [("", whole, layout_of(whole))]
    rules = [one_request_rule(release)] if release is not None else list(OneRequestRule)
    views = []
    for rule in rules:
        if rule is OneRequestRule.MERGED:
            views.append((f"vLLM 0.14–0.16 check one request against every stage's layers merged "
                          f"(all {whole.layers}, get_kv_cache_configs) and the smallest worker's memory", whole,
                          layout_of(whole)))
            continue
        for stage in range(pp):
            part = pipeline_stage(whole, pp, stage, counts)
            views.append((f"vLLM ≤ 0.13 and ≥ 0.17 check each worker's own layers against its memory "
                          f"(_project_kv_cache_groups_to_worker): stage {stage}'s {part.layers}", part,
                          layout_of(part)))
    return views


def _length_checks(parsed: ParsedLog, views: list[tuple[str, ModelShape, KVCacheLayout]], mnbt: int,
                   checks: list[FigureCheck], release_known: bool) -> ModelShape:
    """The refusal's "KV cache needed" (GiB) and "estimated maximum model length" (tokens) by the
    first view that reproduces them (else the first); returns the model that view counts."""
    available = None if parsed.available_gib is None else Fraction(repr(parsed.available_gib))
    limit = parsed.max_model_len or 1 << 30

    def needed(layout: KVCacheLayout) -> float:
        return layout.request_bytes(parsed.max_model_len, mnbt) / GiB

    def estimates(layout: KVCacheLayout) -> tuple[int, int, int]:
        return tuple(layout.max_model_len((available + step) * GiB, limit, mnbt)
                     for step in (-_HALF_STEP_GIB, 0, _HALF_STEP_GIB))

    def reproduces(layout: KVCacheLayout) -> bool:
        if parsed.needed_gib is not None and parsed.max_model_len is not None:
            return round(needed(layout), 2) == parsed.needed_gib
        if parsed.estimated_max_len is not None and available is not None:
            lo, _, hi = estimates(layout)
            return lo <= parsed.estimated_max_len <= hi
        return False

    words, model, layout = next((view for view in views if reproduces(view[2])), views[0])
    rule = "" if not words else "; " + words + ("" if release_known or len(views) == 1 else
                                                " (the vLLM version is not known: both rules were tried)")
    if parsed.needed_gib is not None and parsed.max_model_len is not None:
        need = needed(layout)
        checks.append(FigureCheck(
            name=f"KV cache needed for {parsed.max_model_len:,} tokens (GiB)", logged=parsed.needed_gib,
            reconstructed=need, low=need, high=need, formula=None, within=round(need, 2) == parsed.needed_gib,
            relative_error=_relative(need, parsed.needed_gib), why="layer slots × page × blocks per request" + rule))
    if parsed.estimated_max_len is not None and available is not None:
        lo, mid, hi = estimates(layout)
        text = "" if parsed.needed_gib is None else f" (the full length needs {parsed.needed_gib} GiB)"
        checks.append(FigureCheck(
            name="estimated maximum model length", logged=parsed.estimated_max_len, reconstructed=mid, low=lo,
            high=hi, formula=None, within=lo <= parsed.estimated_max_len <= hi,
            relative_error=_relative(mid, parsed.estimated_max_len),
            why="vLLM's binary search over max_model_len for what fits in the available memory" + text + rule))
    return model


__all__ = ["FigureCheck", "LogExplanation", "Setting", "StartupFix", "explain_log", "log_kv_dtype", "startup_fix"]
