"""vLLM V1's memory profile of one GPU: what is left for the KV cache.

``gpu_worker.determine_available_memory`` takes the CUDA total (``cudaMemGetInfo``, below the
vendor's GB and below ``nvidia-smi``'s MiB), multiplies it by ``gpu_memory_utilization`` and
subtracts what a profiling forward pass of ``max_num_batched_tokens`` tokens left behind:
weights, the peak of PyTorch's activations, non-torch allocations (NCCL buffers, the CUDA
graph pool of custom all-reduce), and, since v0.21, an estimate of the CUDA-graph pool::

    available = total × utilisation − weights − activation peak − non-torch − CUDA graphs

Every term here is either given (a measured figure the user copies from a log) or estimated,
and says which. The estimates:

* **Activation peak** — the larger of two phases of ``profile_run``: the forward pass over
  ``T = max_num_batched_tokens`` tokens, whose widest moment is the MLP (gate/up output of
  ``2 × I / TP`` plus the activated ``I / TP`` per token, beside the ``2 × hidden`` residual and
  hidden state), and the dummy sampler run over ``R = min(max_num_seqs, T)`` rows of fp32 logits,
  where the sampler holds about ten vocab-wide fp32 tensors at once (logits, scaled logits,
  probabilities, log-probabilities, the top-k/top-p sort's values and int64 indices, masks)::

      forward = T × 2 B × (2 × hidden + 3 × intermediate / TP)        (MoE: top-k × moe_intermediate)
      sampler = 10 × R × vocab × 4 B
      peak    = max(forward, sampler)

  Source of the phases: ``gpu_model_runner.profile_run`` (``_dummy_run(max_num_tokens)`` then
  ``_dummy_sampler_run``). The factor 10 is calibrated on logged peaks: Meta-Llama-3-8B on an
  H100, 1.26 GiB at TP 1 and at TP 2 (vllm#10511; the sampler phase dominates, hence no change
  with TP), and gemma-3-4b on a B200, 9.96 GiB with 1,024 sequences (vllm#21489).
* **Multimodal models** — vLLM profiles them with dummy multimodal inputs. For Llama 3.2
  Vision (``mllama``) the peak is the largest phase of V0's encoder-decoder profile:
  ``max_num_seqs`` dummy images through the vision tower, the cross-attention states and the
  text forward beside them (:mod:`sizing.engine.multimodal_profile`). Other vision towers have
  no rule: the figure stays the text estimate and the profile says "activation of the vision
  part not estimated" (``ActivationShape.vision_note``, ``MemoryProfile.notes``).
* **Non-torch memory** — 0.12 GiB at TP 1 (Llama-3.1-8B on an H100) growing to 0.20 GiB at TP 4
  (a Qwen3-8B model, vLLM 0.8.5): 0.12 GiB + 0.027 GiB per extra rank.
* **CUDA graphs** — 0.4 GiB per GPU: vLLM's own estimates and captures in the cited logs span
  0.33–0.65 GiB for models of 1–4 B parameters; 0 with ``enforce_eager``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sizing.engine.multimodal_profile import IMAGES_PER_PROMPT, VisionPart
from sizing.errors import SizingError
from sizing.models import ModelShape, check_int
from units import GiB

ACTIVATION_BYTES = 2  # bf16 / fp16 activations
LOGIT_BYTES = 4  # the sampler works on fp32 logits
SAMPLER_VOCAB_COPIES = 10  # vocab-wide fp32 tensors alive at the sampler's peak (calibrated, see above)
NON_TORCH_TP1 = Fraction(12, 100) * GiB
NON_TORCH_PER_EXTRA_RANK = Fraction(27, 1000) * GiB
CUDA_GRAPH_ESTIMATE = Fraction(4, 10) * GiB
# The first release whose worker profiles CUDA-graph memory before sizing the KV cache ("CUDA
# graph memory profiling is enabled (default since v0.21.0)", logged by gpu_worker.py).
CUDA_GRAPHS_PROFILED_SINCE = (0, 21)
_ASSUMED_VOCAB = 128_256  # a Llama-3-sized vocabulary when the model's is not known
MAX_WIDTH = 1 << 22


@dataclass(frozen=True, kw_only=True)
class ActivationShape:
    """The widths that size a forward pass's activations (from config.json).

    ``assumed`` is True when the widths were guessed from the attention shape (no config).
    ``vision`` is the model's vision tower (None: text only), whose profile rule may be unknown.
    """

    hidden: int
    intermediate: int
    vocab: int
    moe_intermediate: int = 0
    experts_per_token: int = 0
    assumed: bool = False
    vision: VisionPart | None = None

    @property
    def vision_note(self) -> str:
        """"" unless the model has a vision tower whose activation is not estimated."""
        return self.vision.note if self.vision is not None else ""

    def __post_init__(self) -> None:
        for name in ("hidden", "intermediate", "vocab"):
            check_int(name, getattr(self, name), high=MAX_WIDTH if name != "vocab" else 1 << 24)
        check_int("moe_intermediate", self.moe_intermediate, low=0, high=MAX_WIDTH)
        check_int("experts_per_token", self.experts_per_token, low=0, high=1 << 16)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ActivationShape:
        """The widths of a Hugging Face config (``text_config`` of a multimodal one first)."""
        text = config.get("text_config")
        cfg = {**config, **text} if isinstance(text, Mapping) else dict(config)

        def width(*keys: str, default: int | None = None) -> int:
            for key in keys:
                value = cfg.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            if default is None:
                raise SizingError(keys[0], "missing from the config (needed for the activation estimate)")
            return default

        hidden = width("hidden_size", "n_embd", "d_model")
        experts = width("num_local_experts", "n_routed_experts", "num_experts", default=0) if any(
            k in cfg for k in ("num_local_experts", "n_routed_experts", "num_experts")) else 0
        return cls(hidden=hidden, intermediate=width("intermediate_size", "ffn_hidden_size", default=4 * hidden),
                   vocab=width("vocab_size", default=_ASSUMED_VOCAB),
                   moe_intermediate=width("moe_intermediate_size", default=0) if experts else 0,
                   experts_per_token=width("num_experts_per_tok", default=0) if experts else 0,
                   vision=VisionPart.from_config(config))

    @classmethod
    def assumed_for(cls, model: ModelShape) -> ActivationShape:
        """Widths guessed from the attention shape: hidden = heads × head dim, MLP 3.5 × hidden,
        a 128 K vocabulary. Labelled ``assumed``."""
        hidden = model.q_heads * model.head_dim
        return cls(hidden=hidden, intermediate=hidden * 7 // 2, vocab=_ASSUMED_VOCAB, assumed=True)


@dataclass(frozen=True, kw_only=True)
class MemoryTerm:
    """One line of the profile, per GPU: bytes, whether estimated, and how it was obtained."""

    name: str
    bytes: int
    estimated: bool
    basis: str

    def as_record(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "gib": round(self.bytes / GiB, 4),
                "estimated": self.estimated, "basis": self.basis}


@dataclass(frozen=True, kw_only=True)
class MemoryProfile:
    """The per-GPU profile: the CUDA total × utilisation less the four non-KV terms."""

    total: MemoryTerm
    utilization: float
    weights: MemoryTerm
    activation: MemoryTerm
    non_torch: MemoryTerm
    cuda_graph: MemoryTerm
    available_given: bool = False  # the user gave "Available KV cache memory" itself
    available_override: int | None = None
    notes: tuple[str, ...] = ()  # caveats of the estimates ("activation of the vision part not estimated …")

    @property
    def requested_bytes(self) -> int:
        """``total × gpu_memory_utilization`` (vLLM's ``requested_memory``)."""
        return math.floor(self.total.bytes * Fraction(repr(self.utilization)))

    @property
    def non_kv_bytes(self) -> int:
        return self.weights.bytes + self.activation.bytes + self.non_torch.bytes + self.cuda_graph.bytes

    @property
    def available_bytes(self) -> int:
        """"Available KV cache memory" on one GPU (negative when nothing is left)."""
        if self.available_override is not None:
            return self.available_override
        return self.requested_bytes - self.non_kv_bytes

    @property
    def terms(self) -> tuple[MemoryTerm, ...]:
        return (self.total, self.weights, self.activation, self.non_torch, self.cuda_graph)

    def as_dict(self) -> dict[str, Any]:
        return {
            "terms": [t.as_record() for t in self.terms],
            "gpu_memory_utilization": self.utilization,
            "requested_bytes": self.requested_bytes,
            "available_kv_bytes": self.available_bytes,
            "available_given": self.available_given,
            "notes": list(self.notes),
        }


def activation_phases(shape: ActivationShape, *, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                      sampler: bool = True) -> dict[str, int]:
    """The phases of vLLM's profiling run on one GPU and the bytes alive at each one's widest
    moment (see the module notes): ``forward`` and ``sampler`` for a text model; a Llama 3.2
    Vision model adds the vision tower's phases, with the text ones counted beside the pixels
    and cross-attention states they run with.

    ``sampler`` False: a pipeline stage before the last, which computes no logits — vLLM runs
    ``_dummy_sampler_run`` on the last PP rank only — so the sampler phase is left out."""
    check_int("tp", tp, high=4096)
    tokens = check_int("max_num_batched_tokens", max_num_batched_tokens, high=1 << 24)
    rows = min(check_int("max_num_seqs", max_num_seqs, high=1 << 20), tokens)
    mlp = 3 * shape.intermediate
    if shape.experts_per_token and shape.moe_intermediate:
        mlp = max(mlp if shape.intermediate else 0, 3 * shape.experts_per_token * shape.moe_intermediate)
    forward = math.ceil(tokens * ACTIVATION_BYTES * (2 * shape.hidden + Fraction(mlp, tp)))
    logits = SAMPLER_VOCAB_COPIES * rows * shape.vocab * LOGIT_BYTES if sampler else 0
    vision = shape.vision.mllama if shape.vision is not None else None
    if vision is None:
        return {"forward": forward, "sampler": logits} if sampler else {"forward": forward}
    # V0's encoder-decoder profile: one sequence group (with its dummy images) per max_num_seqs.
    phases = vision.phases(images=rows * IMAGES_PER_PROMPT, tokens=tokens, tp=tp, text_forward=forward,
                           sampler=logits)
    if not sampler:
        del phases["sampler"]
    return phases


def activation_peak_bytes(shape: ActivationShape, *, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                          sampler: bool = True) -> int:
    """The estimated activation peak of vLLM's profiling run on one GPU: the largest of
    :func:`activation_phases` (see the module notes)."""
    return max(activation_phases(shape, tp=tp, max_num_batched_tokens=max_num_batched_tokens,
                                 max_num_seqs=max_num_seqs, sampler=sampler).values())


def non_torch_bytes(tp: int) -> int:
    """Estimated non-torch memory per GPU at tensor parallelism ``tp`` (NCCL grows it)."""
    check_int("tp", tp, high=4096)
    return math.ceil(NON_TORCH_TP1 + (tp - 1) * NON_TORCH_PER_EXTRA_RANK)


def _term(name: str, given: int | None, estimate: int, basis: str) -> MemoryTerm:
    if given is not None:
        return MemoryTerm(name=name, bytes=given, estimated=False, basis="given")
    return MemoryTerm(name=name, bytes=estimate, estimated=True, basis=basis)


def memory_profile(
    *,
    total_bytes: int,
    total_measured: bool,
    utilization: float,
    weights_bytes_per_gpu: int,
    shape: ActivationShape,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enforce_eager: bool = False,
    weights_given: bool = False,
    weights_basis: str = "parameters × bytes ÷ TP",
    activation_bytes: int | None = None,
    non_torch: int | None = None,
    cuda_graph: int | None = None,
    available_bytes: int | None = None,
    last_pp_stage: bool = True,
    cuda_graphs_profiled: bool = True,
) -> MemoryProfile:
    """The per-GPU profile; a given term (bytes) replaces its estimate, and ``available_bytes``
    (the log's "Available KV cache memory") replaces the whole subtraction.

    ``cuda_graphs_profiled`` False: a vLLM before 0.21, which sized the cache before capturing
    CUDA graphs, so their memory is not subtracted (the graphs then take it from the headroom
    ``1 − gpu_memory_utilization`` leaves). ``weights_basis`` says how an estimated weight
    figure was made."""
    if not (isinstance(utilization, float | int) and not isinstance(utilization, bool) and 0 < utilization <= 1):
        raise SizingError("gpu_memory_utilization", f"must be above 0 and at most 1, got {utilization!r:.40}")
    total = MemoryTerm(name="total (CUDA)", bytes=total_bytes, estimated=not total_measured,
                       basis="driver-reported" if total_measured else "vendor GB (no driver figure known)")
    weights = MemoryTerm(name="weights", bytes=weights_bytes_per_gpu, estimated=not weights_given,
                         basis="given" if weights_given else weights_basis)
    phases = activation_phases(shape, tp=tp, max_num_batched_tokens=max_num_batched_tokens,
                               max_num_seqs=max_num_seqs, sampler=last_pp_stage)
    if shape.vision is not None and shape.vision.estimated:
        widest = max(phases, key=phases.__getitem__)
        activation_basis = (f"V0 encoder-decoder profile of {min(max_num_seqs, max_num_batched_tokens):,} dummy images "
                            f"(one a sequence): {widest} widest")
    else:
        activation_basis = ("max(forward of max_num_batched_tokens, sampler of max_num_seqs)" if last_pp_stage else
                            "forward of max_num_batched_tokens (the sampler runs on the last pipeline stage)")
    activation_basis += " with assumed widths" if shape.assumed else ""
    notes = (shape.vision_note,) if shape.vision_note and activation_bytes is None else ()
    activation_basis += f"; {shape.vision_note}" if notes else ""
    return MemoryProfile(
        total=total, utilization=float(utilization), weights=weights,
        activation=_term("activation peak", activation_bytes, max(phases.values()), activation_basis),
        non_torch=_term("non-torch", non_torch, non_torch_bytes(tp), "0.12 GiB + 0.027 GiB per extra TP rank"),
        cuda_graph=_term("CUDA graphs", cuda_graph,
                         0 if enforce_eager or not cuda_graphs_profiled else math.ceil(CUDA_GRAPH_ESTIMATE),
                         "enforce_eager: none" if enforce_eager else
                         "not subtracted before vLLM 0.21" if not cuda_graphs_profiled else
                         "typical 0.4 GiB (0.33–0.65 in cited logs)"),
        available_given=available_bytes is not None, available_override=available_bytes, notes=notes,
    )


__all__ = ["ActivationShape", "MemoryProfile", "MemoryTerm", "activation_peak_bytes", "activation_phases",
           "memory_profile", "non_torch_bytes"]
