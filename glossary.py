"""One set of display names for the things every page and CLI names, and a short glossary.

Option values (``"fp8"``, ``"contiguous-max"``, ``"max"``) stay what the code, the URLs and the
JSON documents use; these tables only turn them into words for people. A page or a CLI table that
names a dtype or an allocator takes the name from here, so the sizer, the planner, the cluster and
the kernel pages and the CLIs all say the same thing.

Conventions
-----------
- **Number formats** (KV cache and weights) are written upper-case, as datasheets and model
  cards write them: ``BF16``, ``FP16``, ``FP32``, ``INT8``, ``INT4``, ``INT2``. FP8 names its
  encoding, ``FP8 (e4m3)``: the one vLLM's ``fp8`` KV cache, the FP8 checkpoints and the kernels
  here use (e5m2 is never meant). A weight-only format names its scale layout in parentheses
  (``FP8 (e4m3, 128 × 128 blocks)``, ``INT4 (GPTQ, g128)``). An integer format with group scales
  gets ``gN`` appended by :func:`dtype_label` (``INT4 (g128)``: one fp16 scale per 128 values).
- **Allocators**: one name each, the mechanism first and the PagedAttention paper's baseline name
  in parentheses, ``Contiguous, reserve the maximum (Orca-Max)``. The contiguous reservation
  policies ``max``/``pow2``/``oracle`` are the same allocators and get the same names.
  :data:`ALLOCATOR_SHORT` (the parenthesised part) is for chart legends where the long name does
  not fit.
- **Layer kinds**: sentence case, ``Full attention``, ``Sliding window``.
- **Glossary terms**: the abbreviation as people say it (``TP``, ``TPOT``), one sentence each.

This module imports nothing of the project, so every library (and every page) may import it.
"""

from __future__ import annotations

# Option value → display name, KV-cache and weight formats alike.
DTYPE_LABELS: dict[str, str] = {
    "fp32": "FP32",
    "bf16": "BF16",
    "fp16": "FP16",
    "fp8": "FP8 (e4m3)",
    "int8": "INT8",
    "int4": "INT4",
    "int2": "INT2",
    # Weight-only formats, each with its published scale layout.
    "fp8_block": "FP8 (e4m3, 128 × 128 blocks)",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
    "gptq_int4": "INT4 (GPTQ, g128)",
    "awq_int4": "INT4 (AWQ, g128)",
}
# Formats whose values share group scales, so a group size belongs in their name.
_GROUPED = frozenset({"int8", "int4", "int2"})
# Other spellings of the same formats seen in configs, logs and engine flags.
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8"}

ALLOCATOR_LABELS: dict[str, str] = {
    "contiguous-max": "Contiguous, reserve the maximum (Orca-Max)",
    "contiguous-pow2": "Contiguous, reserve a power of two (Orca-Pow2)",
    "contiguous-oracle": "Contiguous, reserve the exact length (Orca-Oracle)",
    "paged": "Paged (vLLM blocks)",
}
ALLOCATOR_SHORT: dict[str, str] = {
    "contiguous-max": "Orca-Max", "contiguous-pow2": "Orca-Pow2", "contiguous-oracle": "Orca-Oracle",
    "paged": "Paged",
}
# The contiguous reservation policies (``--policy``) name the same allocators.
POLICY_LABELS: dict[str, str] = {p: ALLOCATOR_LABELS[f"contiguous-{p}"] for p in ("max", "pow2", "oracle")}

# Layer kinds by the sizer's LayerKind values.
LAYER_KIND_LABELS: dict[str, str] = {
    "full": "Full attention",
    "sliding_window": "Sliding window",
    "chunked_local": "Chunked local",
    "mla": "MLA latent",
    "mamba": "Mamba (SSM state)",
    "linear_attention": "Linear attention (state)",
}

# (term, one-sentence definition), in reading order: the cache, its layout, parallelism, timings, attention variants.
TERMS: tuple[tuple[str, str], ...] = (
    ("KV cache", "The keys and values of every earlier token, kept per layer so a decode step attends to them "
                 "instead of recomputing them."),
    ("Block / page", "A fixed number of tokens' KV (vLLM's block_size, e.g. 16) allocated as one unit; a block "
                     "table maps a sequence's logical blocks to physical ones."),
    ("Paged allocator", "Hands out KV in blocks as a sequence grows, so only the last block of a sequence is "
                        "partly empty."),
    ("Contiguous allocator", "Reserves one unbroken slot range per request at admission (the Orca baselines), "
                             "wasting what the request never reaches."),
    ("TP", "Tensor parallelism: each layer's heads and matrices split across GPUs, which exchange partial results "
           "every layer."),
    ("PP", "Pipeline parallelism: consecutive layers on different GPUs, activations handed from stage to stage."),
    ("DP", "Data parallelism: whole replicas of the model, each serving its own requests."),
    ("EP", "Expert parallelism: a mixture-of-experts layer's experts spread across GPUs, tokens sent to the GPU "
           "holding their expert."),
    ("TTFT", "Time to first token: from a request's arrival to its first output token (queueing plus prefill)."),
    ("TPOT", "Time per output token: the mean time between output tokens after the first, one decode step."),
    ("ITL", "Inter-token latency: the time between two consecutive output tokens of one request; its mean is "
            "the TPOT."),
    ("Prefill", "The pass over a request's prompt that writes its KV cache and yields the first token."),
    ("Decode", "One step per output token, reading the whole KV cache of every sequence in the batch."),
    ("GQA", "Grouped-query attention: several query heads share one KV head, dividing the KV cache by the group "
            "size."),
    ("MLA", "Multi-head latent attention (DeepSeek): one low-rank latent per token and layer replaces the "
            "per-head keys and values."),
    ("Sliding window", "A layer attends to the last W tokens only, so its KV stops growing at W."),
    ("Sinks", "A few first tokens every query keeps attending to beside its window, which keeps sliding-window "
              "attention stable."),
    ("Roofline", "A kernel's ceiling: the lower of peak compute and bandwidth × arithmetic intensity (FLOP per "
                 "byte moved)."),
)


def _known(table: dict[str, str], name: object, field: str) -> str:
    if not isinstance(name, str) or name.lower() not in table:
        raise ValueError(f"{field}: unknown value {name!r:.40}; use one of {', '.join(table)}")
    return name.lower()


def dtype_label(name: str, group_size: int | None = None, *, field: str = "dtype") -> str:
    """Display name of a KV or weight format: ``"fp8"`` → ``"FP8 (e4m3)"``; ``("int4", 128)`` → ``"INT4 (g128)"``.

    ``group_size`` (values per fp16 scale) is named only for the integer formats that take one;
    aliases such as ``"bfloat16"`` are accepted. Unknown names raise ``ValueError`` naming ``field``.
    """
    if isinstance(name, str):
        name = _DTYPE_ALIASES.get(name.lower(), name)
    key = _known(DTYPE_LABELS, name, field)
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 0):
        raise ValueError(f"{field}_group_size: must be a non-negative integer, got {group_size!r:.40}")
    label = DTYPE_LABELS[key]
    return f"{label} (g{group_size})" if group_size and key in _GROUPED else label


def allocator_label(name: str, *, short: bool = False, field: str = "allocator") -> str:
    """Display name of an allocator (``"contiguous-max"``, …, ``"paged"``) or of a contiguous policy
    (``"max"``, ``"pow2"``, ``"oracle"``); ``short`` gives the chart-legend name (``"Orca-Max"``)."""
    if isinstance(name, str) and name.lower() in POLICY_LABELS:
        name = f"contiguous-{name.lower()}"
    key = _known(ALLOCATOR_LABELS, name, field)
    return (ALLOCATOR_SHORT if short else ALLOCATOR_LABELS)[key]


def layer_kind_label(kind: str, *, field: str = "layer kind") -> str:
    """Display name of a layer kind by its value (``"sliding_window"`` → ``"Sliding window"``)."""
    return LAYER_KIND_LABELS[_known(LAYER_KIND_LABELS, str(kind) if kind is not None else kind, field)]
