"""What would let a refused vLLM start-up start: the ``gpu_memory_utilization``, the
``max_model_len`` and the tensor-parallel size, each with the figures it rests on.

A refusal is V1's "… GiB KV cache is needed, which is larger than the available KV cache memory
…" (GiB per GPU) or V0's "max seq len … is larger than the maximum number of tokens that can be
stored in KV cache …" (tokens); :func:`startup_fix` reads either from a parsed log.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizing.engine.groups import KVCacheLayout
from sizing.engine.vllm_log import ParsedLog
from units import GiB

__all__ = ["StartupFix", "startup_fix", "DEFAULT_GPU_MEMORY_UTILIZATION", "MAX_FIX_TP"]


@dataclass(frozen=True, kw_only=True)
class StartupFix:
    """What would let a refused start-up start, each with the figures it rests on.

    GiB figures are per GPU as the log prints them. ``gpu_memory_utilization`` is the setting
    (rounded up to 0.01) at which the missing memory is added to the budget; ``max_model_len``
    the longest context the available memory holds; ``tp`` the smallest power-of-two
    tensor-parallel size at which one request's KV fits. None where the log (and the model, when
    one is given) does not say enough; ``*_basis`` then says what is missing.
    """

    needed_gib: float | None
    available_gib: float | None
    gpu_memory_utilization: float | None
    utilization_basis: str
    max_model_len: int | None
    max_model_len_basis: str
    tp: int | None
    tp_basis: str

    def lines(self) -> tuple[str, ...]:
        """The fixes in words, one a line."""
        head = ("vLLM refused to start: one request of the configured length needs "
                + (f"{self.needed_gib:.2f} GiB of KV cache per GPU against {self.available_gib:.2f} GiB available"
                   if self.needed_gib is not None and self.available_gib is not None
                   else "more KV cache than the GPU has left"))
        out = [head + "."]
        if self.gpu_memory_utilization is not None:
            out.append(f"--gpu-memory-utilization {self.gpu_memory_utilization:.2f} would start it: "
                       + self.utilization_basis)
        else:
            out.append("gpu_memory_utilization: " + self.utilization_basis)
        if self.max_model_len is not None:
            out.append(f"--max-model-len {self.max_model_len} would start it: " + self.max_model_len_basis)
        else:
            out.append("max_model_len: " + self.max_model_len_basis)
        if self.tp is not None:
            out.append(f"--tensor-parallel-size {self.tp} would start it: " + self.tp_basis)
        else:
            out.append("tensor parallelism: " + self.tp_basis)
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        return {"needed_gib": self.needed_gib, "available_gib": self.available_gib,
                "gpu_memory_utilization": self.gpu_memory_utilization, "utilization_basis": self.utilization_basis,
                "max_model_len": self.max_model_len, "max_model_len_basis": self.max_model_len_basis,
                "tp": self.tp, "tp_basis": self.tp_basis, "advice": list(self.lines())}



DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization
MAX_FIX_TP = 64  # the largest tensor-parallel size a fix proposes (eight 8-GPU nodes)


def startup_fix(
    parsed: ParsedLog,
    *,
    layout_at: Callable[[int], KVCacheLayout] | None = None,
    tp: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = 8192,
) -> StartupFix | None:
    """The settings that would start a refused start-up; None when the log shows no refusal.

    Parameters
    ----------
    parsed
        The log; a refusal is V1's needed-vs-available message (GiB per GPU) or V0's
        max-seq-len-vs-tokens message.
    layout_at
        The model's KV layout at a TP size, when the model is known: the per-GPU need at each
        TP is then rebuilt from it (KV heads split up to their count, MLA replicated). Without
        it the need is taken to halve with each doubling of TP, which holds while the model has
        at least that many KV heads.
    tp, max_model_len, max_num_batched_tokens
        The refused settings where the log does not state them (TP defaults to 1).

    The utilisation that would start it is ``u + (needed − available) / total``: the missing
    GiB added to the budget ``u × total`` (``total`` from the profile, or requested ÷ u). At a
    larger TP ``t`` the weights per GPU fall by ``weights × (1 − tp / t)`` (when logged) and that
    memory joins the KV budget; activation and non-torch memory are taken as unchanged.
    """
    tokens_form = parsed.refused and parsed.needed_gib is None and parsed.kv_tokens is not None
    if not parsed.refused or not (parsed.needed_gib is not None or tokens_form):
        return None
    tp = tp or parsed.tp or 1
    length = max_model_len or parsed.max_model_len
    needed, available = parsed.needed_gib, parsed.available_gib
    layout = layout_at(tp) if layout_at is not None else None
    if tokens_form:
        # V0 states tokens, not GiB: the cache holds kv_tokens and one request wants max_model_len.
        if layout is not None and length is not None:
            available = parsed.kv_tokens // layout.block_size * layout.bytes_per_block_all_layers / GiB
            needed = layout.request_bytes(length, max_num_batched_tokens) / GiB
        elif available is not None and length is not None and parsed.kv_tokens > 0:
            needed = available * length / parsed.kv_tokens
    util, util_basis = _utilization_fix(parsed, needed, available)
    max_len, len_basis = _length_fix(parsed, layout, available, length, max_num_batched_tokens, tokens_form)
    fix_tp, tp_basis = _tp_fix(parsed, layout_at, tp, needed, available, length, max_num_batched_tokens)
    if parsed.tp is None and fix_tp is not None:
        tp_basis += f" (the log states no TP: TP {tp} assumed for the refused start)"
    return StartupFix(needed_gib=needed, available_gib=available, gpu_memory_utilization=util,
                      utilization_basis=util_basis, max_model_len=max_len, max_model_len_basis=len_basis,
                      tp=fix_tp, tp_basis=tp_basis)


def _utilization_fix(parsed: ParsedLog, needed: float | None, available: float | None) -> tuple[float | None, str]:
    if needed is None or available is None:
        return None, "needs the KV cache needed and available in GiB (not in the log)"
    util = parsed.gpu_memory_utilization
    assumed = ("" if util is not None
               else f" (utilisation not in the log: vLLM's default {DEFAULT_GPU_MEMORY_UTILIZATION} assumed)")
    util = util if util is not None else DEFAULT_GPU_MEMORY_UTILIZATION
    total = parsed.total_gib
    if total is None and parsed.requested_gib is not None:
        total = parsed.requested_gib / util
    if total is None or total <= 0:
        return None, "needs the GPU's total memory (the profile line 'total_gpu_memory' or 'Free memory on device')"
    exact = util + (needed - available) / total
    rounded = math.ceil(round(exact * 100, 6)) / 100  # up to the next 0.01, so the budget is not short
    basis = (f"{util:g} + ({needed:.2f} − {available:.2f} GiB) ÷ {total:.2f} GiB total = {exact:.4f}{assumed}")
    if rounded > 1:
        return None, basis + ": above 1.0, so no utilisation starts it on this GPU"
    return rounded, basis


def _length_fix(parsed: ParsedLog, layout: KVCacheLayout | None, available: float | None, length: int | None,
                mnbt: int, tokens_form: bool) -> tuple[int | None, str]:
    if parsed.estimated_max_len is not None:
        return parsed.estimated_max_len, "vLLM's own estimate of the longest context the available memory holds"
    if tokens_form:
        return parsed.kv_tokens, "the tokens the KV cache holds (V0 refuses a max_model_len above them)"
    if layout is not None and available is not None and available > 0 and length is not None:
        fits = layout.max_model_len(Fraction(repr(available)) * GiB, length, mnbt)
        if fits > 0:
            return fits, "the longest context whose blocks fit the available memory, rebuilt for the model"
    return None, "the log has no estimated maximum model length and no model was given to rebuild it"


def _tp_fix(parsed: ParsedLog, layout_at: Callable[[int], KVCacheLayout] | None, tp: int, needed: float | None,
            available: float | None, length: int | None, mnbt: int) -> tuple[int | None, str]:
    if (needed is None or available is None) and parsed.kv_tokens and length and layout_at is None:
        # V0's tokens form: one request wants ``length`` tokens where the cache holds kv_tokens.
        t = tp * 2
        while t <= MAX_FIX_TP and length * tp / t > parsed.kv_tokens:
            t *= 2
        if t <= MAX_FIX_TP:
            return t, (f"{length:,} tokens wanted against {parsed.kv_tokens:,} held at TP {tp}: the cache holds about "
                       f"{t // tp}× more tokens at TP {t} if the KV heads split that far (memory freed from the "
                       "weights not counted)")
    if needed is None or available is None:
        return None, "needs the KV cache needed and available in GiB (not in the log)"
    weights = parsed.weights_gib or 0.0
    t = tp * 2
    while t <= MAX_FIX_TP:
        if layout_at is not None and length is not None:
            need_t = layout_at(t).request_bytes(length, mnbt) / GiB
            how = "KV per GPU rebuilt for the model at that TP"
        else:
            need_t = needed * tp / t
            how = f"KV per GPU taken as split {t // tp} ways (the model needs at least {t} KV heads for that)"
        avail_t = available + weights * (1 - tp / t)
        if need_t <= avail_t:
            gain = f", {weights * (1 - tp / t):.2f} GiB freed from the weights" if weights else ""
            return t, (f"{need_t:.2f} GiB needed per GPU against about {avail_t:.2f} GiB available ({how}{gain}; "
                       "activation and non-torch memory taken as unchanged)")
        t *= 2
    return None, f"no TP up to {MAX_FIX_TP} holds one request (the KV heads stop splitting, or the need does not halve)"
