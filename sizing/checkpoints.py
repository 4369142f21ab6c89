"""What a serving engine must load to hold the weights in the precision the sizer assumes.

The sizer counts weight bytes in any format; vLLM and SGLang can only hold what a checkpoint
gives them, plus one conversion at load time: ``--quantization fp8`` quantises a 16-bit
checkpoint to FP8 (per-tensor scales) as it loads. Every other quantised format (AWQ, GPTQ,
MXFP4, NVFP4, the integer formats) needs a checkpoint that was quantised beforehand, with its
scales. :func:`checkpoint_for` says which checkpoint and which extra flags give the precision,
or why none is known.

:data:`KNOWN_CHECKPOINTS` lists published quantised checkpoints of catalogue models on the
Hugging Face Hub (instruction-tuned variants of the same architecture, so the KV cache is the
same); each id is the repository's own name.
"""

from __future__ import annotations

from dataclasses import dataclass

from glossary import dtype_label

SIXTEEN_BIT = ("bf16", "fp16")
FP8_FORMATS = ("fp8", "fp8_block")
_DTYPE_FLAG = {"fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A published checkpoint of a catalogue model in one weight format."""

    preset_id: str
    weight_format: str  # a name of sizing.precisions.WEIGHT_FORMAT_NAMES
    repo: str

    @property
    def source(self) -> str:
        return f"https://huggingface.co/{self.repo}"


def _row(preset_id: str, weight_format: str, repo: str) -> Checkpoint:
    return Checkpoint(preset_id=preset_id, weight_format=weight_format, repo=repo)


KNOWN_CHECKPOINTS: tuple[Checkpoint, ...] = (
    _row("llama-3.1-8b", "fp8", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"),
    _row("llama-3.1-70b", "fp8", "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"),
    _row("llama-3.1-405b", "fp8", "RedHatAI/Meta-Llama-3.1-405B-Instruct-FP8"),
    _row("llama-3.1-8b", "awq_int4", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"),
    _row("llama-3.1-70b", "awq_int4", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4"),
    _row("llama-3.1-405b", "awq_int4", "hugging-quants/Meta-Llama-3.1-405B-Instruct-AWQ-INT4"),
    _row("llama-3.1-8b", "gptq_int4", "hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4"),
    _row("llama-3.1-70b", "gptq_int4", "hugging-quants/Meta-Llama-3.1-70B-Instruct-GPTQ-INT4"),
    _row("qwen3-8b", "fp8_block", "Qwen/Qwen3-8B-FP8"),
    _row("qwen3-32b", "fp8_block", "Qwen/Qwen3-32B-FP8"),
    _row("qwen3-30b-a3b", "fp8_block", "Qwen/Qwen3-30B-A3B-FP8"),
    _row("qwen3-235b-a22b", "fp8_block", "Qwen/Qwen3-235B-A22B-FP8"),
    _row("qwen3-32b", "awq_int4", "Qwen/Qwen3-32B-AWQ"),
    _row("qwen2.5-7b", "awq_int4", "Qwen/Qwen2.5-7B-Instruct-AWQ"),
    _row("qwen2.5-72b", "awq_int4", "Qwen/Qwen2.5-72B-Instruct-AWQ"),
    _row("deepseek-r1", "nvfp4", "nvidia/DeepSeek-R1-FP4"),
)


@dataclass(frozen=True, kw_only=True)
class Launchable:
    """The repository to serve and the flags that make the engine hold ``weight_format``.

    ``repo`` is None when no checkpoint is known that holds the format; ``note`` then says
    what is needed. ``flags`` are engine-neutral names: ``quantization`` and ``dtype``.
    """

    weight_format: str
    repo: str | None
    quantization: str | None = None
    dtype: str | None = None
    note: str = ""

    @property
    def launchable(self) -> bool:
        return self.repo is not None


def _known(preset_id: str | None, weight_format: str) -> Checkpoint | None:
    return next((c for c in KNOWN_CHECKPOINTS if c.preset_id == preset_id and c.weight_format == weight_format), None)


def checkpoint_for(*, repo: str, own_format: str | None, weight_format: str, preset_id: str | None) -> Launchable:
    """How to serve weights in ``weight_format`` from the model whose checkpoint is ``repo``
    (stored as ``own_format``; None: 16-bit).

    The checkpoint as it is when the formats agree (16-bit counts as one format, with
    ``dtype`` set for fp16/fp32); a known checkpoint in the format; for FP8 on a 16-bit model,
    ``--quantization fp8`` at load; otherwise not launchable, with the reason.
    """
    own = own_format or "bf16"
    if weight_format == own or (weight_format in SIXTEEN_BIT and own in SIXTEEN_BIT) or weight_format == "fp32":
        return Launchable(weight_format=weight_format, repo=repo, dtype=_DTYPE_FLAG.get(weight_format),
                          note="" if weight_format != "fp32" or own == "fp32" else
                          "fp32 weights: the 16-bit checkpoint upcast at load (--dtype float32)")
    known = _known(preset_id, weight_format)
    if known is not None:
        return Launchable(weight_format=weight_format, repo=known.repo,
                          note=f"{dtype_label(weight_format)} weights: the published checkpoint {known.repo} "
                               f"({known.source}), the instruction-tuned variant of the same architecture")
    if weight_format in FP8_FORMATS and own in SIXTEEN_BIT:
        return Launchable(weight_format=weight_format, repo=repo, quantization="fp8",
                          note="FP8 weights: the 16-bit checkpoint quantised at load (--quantization fp8, "
                               "per-tensor scales)")
    if weight_format in FP8_FORMATS and own in FP8_FORMATS:
        return Launchable(weight_format=weight_format, repo=repo,
                          note=f"the checkpoint is already {dtype_label(own)}; the engine loads it as it is")
    name = dtype_label(weight_format)
    need = "a 16-bit checkpoint" if weight_format in SIXTEEN_BIT else f"a checkpoint quantised as {name}"
    return Launchable(weight_format=weight_format, repo=None,
                      note=f"{name} weights need {need}: {repo} is stored as {dtype_label(own)}, neither engine "
                           f"converts it to {name} at load, and the catalogue knows no such checkpoint "
                           f"of this model. Choose the model's own precision or a format with a checkpoint.")


__all__ = ["KNOWN_CHECKPOINTS", "Checkpoint", "Launchable", "checkpoint_for"]
