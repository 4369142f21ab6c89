"""KV-cache groups as vLLM's V1 allocator forms them, and what a memory budget holds in them.

vLLM keeps one page size for every layer and hands out blocks of that size from one pool
(``vllm/v1/core/kv_cache_utils.py``, ``vllm/v1/kv_cache_interface.py``):

1. Each layer has a spec: full attention and MLA cache every token; a sliding-window layer keeps
   ``cdiv(min(window − 1 + max_num_batched_tokens, max_model_len), block) + 1`` blocks per
   request; a chunked-local layer ``cdiv(min(chunk + max_num_batched_tokens, max_model_len),
   block)``; a Mamba / linear-attention layer one page holding its whole state.
2. A model whose layers all share one spec is one group. Otherwise layers of the same spec are
   split into groups of ``group_size`` layers — the smallest layer count of any spec, or the
   largest when it is under 1.5 × the smallest (``_get_kv_cache_groups_uniform_page_size``) —
   and the last group of each spec is padded ("Add 2 padding layers, may waste at most
   9.09% KV cache memory"). Gemma-3-1B: 22 sliding + 4 full → 7 groups of 4 = 28 layer slots.
3. ``group_size`` pools of ``num_blocks`` pages share the budget:
   ``num_blocks = available // page // group_size``.
4. "Maximum concurrency" = ``num_blocks / Σ_groups blocks one request needs``
   (``get_max_concurrency_for_kv_cache_config``). "GPU KV cache size" is, up to vLLM 0.23,
   ``num_blocks // len(groups) × block_size`` (the smallest spec block; a Mamba spec carries the
   attention block), and from 0.24 ``int(max_concurrency × max_model_len)`` (``_report_kv_cache_config``):
   the two agree for one full-attention group whose max_model_len is a whole number of blocks.
5. The largest max_model_len that fits: a binary search over ``group_size × page × Σ blocks``
   (``_estimate_max_model_len_from_groups``).

Attention pages of a model with Mamba / linear layers are made at least as large as the state
page by raising the attention block size to a multiple of the attention backend's kernel block
alignment; the state page is then padded to equal it (vLLM's ``_align_hybrid_block_size`` in
``vllm/platforms/interface.py``, formerly ``HybridAttentionMambaModelConfig``):
``block = a × cdiv(state page, a × attention bytes per token)`` with
``a = max(smallest kernel block of the backend, --block-size)``. The state page is Σ tensor
bytes, each tensor in its own dtype, the convolution state holding the speculative tokens too.

:class:`GroupingRule` selects the version: ``hybrid`` (vLLM ≥ 0.12, the 1.5× rule of
vllm#29303), ``hybrid-min`` (vLLM 0.10–0.11: group size = the smallest layer count) and
``single`` (one group, every attention layer cached as full attention, concurrency = tokens ÷
max_model_len: V0 and early V1 logs, or ``--disable-hybrid-kv-cache-manager``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from sizing.errors import SizingError
from sizing.kv import KVCacheSpec, largest_fitting
from sizing.layers import MAX_SPECULATIVE_TOKENS, STATE_KINDS, LayerKind
from sizing.models import ModelShape, check_int
from sizing.precisions import Precision
from units import cdiv

# The smallest kernel block each attention backend takes (tokens): its
# get_supported_kernel_block_sizes() in vllm/v1/attention/backends/ — FlashAttention and Triton
# MultipleOf(16), FlashInfer [16, 32, 64]; the MLA kernels FlashMLA 64 and CUTLASS MLA 128 (the
# alignments vLLM's hybrid config used before it asked the backend). FlashInfer with head size
# 256 on Blackwell (SM 10.0) takes 32: pass kernel_block_alignment=32 there.
KERNEL_BLOCK_ALIGNMENT = {"flash_attn": 16, "flashinfer": 16, "triton_attn": 16, "flashmla": 64, "cutlass_mla": 128}
DEFAULT_ATTENTION_BACKEND = "flash_attn"
MAX_KERNEL_BLOCK_ALIGNMENT = 4096  # tokens; far above any backend's kernel block
_HYBRID_MAX_RATIO = Fraction(3, 2)  # vllm#29303: use the largest count when under 1.5 × the smallest
# The first vLLM release whose "GPU KV cache size" is int(max_concurrency × max_model_len): 0.19
# logs print num_blocks // groups × block (vllm#40691), 0.24.0 logs the concurrency product.
TOKENS_FROM_CONCURRENCY_SINCE = (0, 24)
# The release engine mode models unless told otherwise: the newest whose start-up logs the rules
# here were checked against (the MiniMax-M2.7 log of 0.29.1rc1.dev17, a build after 0.29.0).
DEFAULT_VLLM_VERSION = "0.29.0"
_VERSION = re.compile(r"v?(\d{1,4})\.(\d{1,4})")
MAX_VERSION_CHARS = 64


def vllm_release(version: str, *, field: str = "vllm_version") -> tuple[int, int]:
    """``(major, minor)`` of a vLLM version string ("0.24.0", "v0.19.1rc2", "0.11.2+cu128").

    Development builds ("0.1.dev7548+g…") carry no release number and are refused: give the
    release they were cut from.
    """
    if not isinstance(version, str) or len(version) > MAX_VERSION_CHARS:
        raise SizingError(field, f"expected a vLLM version such as 0.24.0 (at most {MAX_VERSION_CHARS} characters)")
    match = _VERSION.match(version.strip())
    if match is None or ".dev" in version:
        raise SizingError(field, f"{version!r:.40} is not a vLLM release such as 0.24.0")
    return int(match.group(1)), int(match.group(2))


def tokens_from_concurrency(version: str, *, field: str = "vllm_version") -> bool:
    """Whether vLLM ``version`` prints "GPU KV cache size" as int(max_concurrency × max_model_len)."""
    return tokens_rule(vllm_release(version, field=field)) is TokensRule.CONCURRENCY


class TokensRule(StrEnum):
    """How a vLLM release counts the "GPU KV cache size" it prints (``_report_kv_cache_config``)."""

    GROUPS = "groups"  # before 0.24: num_blocks // len(groups) × block_size
    CONCURRENCY = "concurrency"  # from 0.24: int(max_concurrency × max_model_len)


def tokens_rule(release: tuple[int, int]) -> TokensRule:
    """The rule of ``release`` (``(major, minor)`` as :func:`vllm_release` reads it)."""
    return TokensRule.CONCURRENCY if release >= TOKENS_FROM_CONCURRENCY_SINCE else TokensRule.GROUPS


def reported_kv_tokens(layout: KVCacheLayout, num_blocks: int, max_model_len: int, max_num_batched_tokens: int,
                       rule: TokensRule) -> int:
    """vLLM's "GPU KV cache size" for a pool of ``num_blocks`` blocks, counted by ``rule``: the one
    place the count is made, for :func:`~sizing.engine.capacity.plan_engine` and the log explainer."""
    if TokensRule(rule) is TokensRule.CONCURRENCY:
        return layout.concurrency_tokens(num_blocks, max_model_len, max_num_batched_tokens)
    return layout.tokens(num_blocks)


class GroupingRule(StrEnum):
    """Which vLLM version's grouping the layout follows."""

    HYBRID = "hybrid"  # vLLM ≥ 0.12
    HYBRID_MIN = "hybrid-min"  # vLLM 0.10–0.11
    SINGLE = "single"  # one group, windows ignored (V0, early V1, hybrid manager disabled)


@dataclass(frozen=True, kw_only=True)
class KVCacheGroup:
    """One KV-cache group: layers of one spec sharing a block table.

    ``padding`` counts the empty layer slots of this group (only the last group of a spec has
    any); ``page_bytes`` is one block of one layer on one GPU; ``block_size`` in tokens.
    """

    kind: LayerKind
    window: int | None
    layer_indices: tuple[int, ...]
    padding: int
    block_size: int
    page_bytes: int

    @property
    def label(self) -> str:
        window = f"({self.window:,})" if self.window is not None else ""
        pad = f" + {self.padding} padding" if self.padding else ""
        return f"{len(self.layer_indices)} × {self.kind}{window}{pad}"

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int, *, state_blocks: int = 1) -> int:
        """Blocks one request of ``max_model_len`` tokens needs in this group (its spec's
        ``max_memory_usage_bytes`` ÷ page)."""
        if self.kind in STATE_KINDS:
            return state_blocks
        if self.kind is LayerKind.SLIDING:
            return cdiv(min(self.window - 1 + max_num_batched_tokens, max_model_len), self.block_size) + 1
        if self.kind is LayerKind.CHUNKED:
            return cdiv(min(self.window + max_num_batched_tokens, max_model_len), self.block_size)
        return cdiv(max_model_len, self.block_size)


@dataclass(frozen=True, kw_only=True)
class PaddingWarning:
    """vLLM's "Add N padding layers, may waste at most P% KV cache memory"."""

    kind: LayerKind
    layers: int
    padding_layers: int

    @property
    def waste_percent(self) -> float:
        return self.padding_layers / self.layers * 100

    @property
    def message(self) -> str:
        return f"Add {self.padding_layers} padding layers, may waste at most {self.waste_percent:.2f}% KV cache memory"


@dataclass(frozen=True, kw_only=True)
class KVCacheLayout:
    """The groups of one model on one GPU, and the arithmetic vLLM does with them.

    ``group_size`` is the number of layer slots per group, which is also the number of pools
    the budget is split into; ``page_bytes`` is the one page size all layers share.
    """

    rule: GroupingRule
    groups: tuple[KVCacheGroup, ...]
    group_size: int
    page_bytes: int
    warnings: tuple[PaddingWarning, ...]
    state_blocks: int = 1  # pages a Mamba layer keeps per request (2 with prefix caching "align")

    @property
    def layer_slots(self) -> int:
        """Layer slots the budget is divided over (layers + padding)."""
        return self.group_size * len(self.groups)

    @property
    def padding_layers(self) -> int:
        return sum(g.padding for g in self.groups)

    @property
    def block_size(self) -> int:
        """The smallest block size of any group (vLLM reports tokens in it; a Mamba / linear
        group's is the attention block)."""
        return min(g.block_size for g in self.groups)

    @property
    def bytes_per_block_all_layers(self) -> int:
        """One block in every layer slot: what each unit of ``num_blocks`` costs."""
        return self.page_bytes * self.group_size

    def num_blocks(self, available_bytes: int | Fraction) -> int:
        """Blocks per pool: ``available // page // group_size`` (0 for a negative budget)."""
        return max(0, math.floor(Fraction(available_bytes) / self.page_bytes) // self.group_size)

    def tokens(self, num_blocks: int) -> int:
        """vLLM's "GPU KV cache size" up to 0.23: ``num_blocks // len(groups) × block_size``."""
        return num_blocks // len(self.groups) * self.block_size

    def concurrency_tokens(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int) -> int:
        """vLLM's "GPU KV cache size" from 0.24: ``int(max_concurrency × max_model_len)``, in the
        same float arithmetic vLLM does (a product just under a whole number truncates below it)."""
        return int(self.max_concurrency(num_blocks, max_model_len, max_num_batched_tokens) * max_model_len)

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks, summed over groups, one request of ``max_model_len`` tokens may hold."""
        return sum(g.blocks_per_request(max_model_len, max_num_batched_tokens, state_blocks=self.state_blocks)
                   for g in self.groups)

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """vLLM's "Maximum concurrency for L tokens per request" (the ``single`` rule: tokens ÷ L)."""
        if self.rule is GroupingRule.SINGLE:
            return self.tokens(num_blocks) / max_model_len
        return num_blocks / self.blocks_per_request(max_model_len, max_num_batched_tokens)

    def request_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Memory one request of ``max_model_len`` needs: ``group_size × page × Σ blocks``."""
        return self.bytes_per_block_all_layers * self.blocks_per_request(max_model_len, max_num_batched_tokens)

    def max_model_len(self, available_bytes: int | Fraction, limit: int, max_num_batched_tokens: int) -> int:
        """The largest ``max_model_len`` ≤ ``limit`` one request of which fits (0: not even 1 token)."""
        budget = Fraction(available_bytes)
        return largest_fitting(lambda length: self.request_bytes(length, max_num_batched_tokens) <= budget, limit)


@dataclass(frozen=True, kw_only=True)
class _Spec:
    kind: LayerKind
    window: int | None
    layers: tuple[int, ...]
    block_size: int
    page_bytes: int


def backend_block_alignment(attention_backend: str = DEFAULT_ATTENTION_BACKEND, override: int | None = None) -> int:
    """Tokens the hybrid attention block is a multiple of: ``override`` when given, else the
    smallest kernel block of ``attention_backend`` (:data:`KERNEL_BLOCK_ALIGNMENT`)."""
    if override is not None:
        return check_int("kernel_block_alignment", override, high=MAX_KERNEL_BLOCK_ALIGNMENT)
    if not isinstance(attention_backend, str) or attention_backend not in KERNEL_BLOCK_ALIGNMENT:
        raise SizingError("attention_backend", f"unknown attention backend {attention_backend!r:.40}; use one of "
                                               f"{', '.join(KERNEL_BLOCK_ALIGNMENT)} or give kernel_block_alignment")
    return KERNEL_BLOCK_ALIGNMENT[attention_backend]


def _specs(model: ModelShape, precision: Precision, tp: int, block_size: int, rule: GroupingRule, *,
           alignment: int, speculative_tokens: int) -> list[_Spec]:
    """One spec per (kind, window), in order of first layer, with pages unified across kinds."""
    spec = KVCacheSpec(model=model, precision=precision, tp=tp, block_size=block_size)
    attention_layers = model.n_kv_layers
    # Bytes one attention layer caches per token on one GPU, from sizing.kv's own arithmetic.
    token_bytes = spec.bytes_per_token_per_gpu / attention_layers if attention_layers else Fraction(0)
    if token_bytes.denominator != 1:
        raise SizingError("kv_dtype", f"{precision.label} KV gives {float(token_bytes):g} bytes per token and "
                                      "layer; vLLM pages need whole bytes (use bf16, fp16, fp32 or fp8)")
    token_bytes = int(token_bytes)
    groups = model.layer_groups(tp)
    if rule is GroupingRule.SINGLE:
        if any(g.kind in STATE_KINDS for g in groups):
            raise SizingError("engine_rule", "the single-group rule cannot hold Mamba / linear-attention state; "
                                             "use the hybrid rule")
        layers = tuple(sorted(i for g in groups for i in g.layer_indices))
        kind = LayerKind.MLA if model.kv_lora_rank else LayerKind.FULL
        return [_Spec(kind=kind, window=None, layers=layers, block_size=block_size, page_bytes=block_size * token_bytes)]
    has_state = any(g.kind in STATE_KINDS for g in groups)
    state_page = model.state.bytes_per_gpu(tp, speculative_tokens=speculative_tokens) if has_state else 0
    attention_block = block_size
    if state_page and token_bytes and block_size * token_bytes < state_page:
        # vLLM raises the attention block size until an attention page holds a whole state page,
        # in steps of the kernel alignment or of --block-size, whichever is larger.
        step = max(alignment, block_size)
        attention_block = step * cdiv(state_page, step * token_bytes)
    page = max(attention_block * token_bytes, state_page)
    # A state group's spec carries the attention block size (vLLM's MambaSpec.block_size), so the
    # smallest block — the unit of "GPU KV cache size" — is the attention block.
    return [_Spec(kind=g.kind, window=g.window, layers=g.layer_indices, block_size=attention_block, page_bytes=page)
            for g in groups]


def _group_size(counts: list[int], rule: GroupingRule) -> int:
    smallest, largest = min(counts), max(counts)
    if rule is GroupingRule.HYBRID and largest < smallest * _HYBRID_MAX_RATIO:
        return largest
    return smallest


def kv_cache_layout(
    model: ModelShape,
    precision: Precision,
    *,
    tp: int = 1,
    block_size: int = 16,
    rule: GroupingRule | str = GroupingRule.HYBRID,
    state_blocks: int = 1,
    speculative_tokens: int = 0,
    attention_backend: str = DEFAULT_ATTENTION_BACKEND,
    kernel_block_alignment: int | None = None,
) -> KVCacheLayout:
    """The KV-cache groups of ``model`` on one GPU at tensor parallelism ``tp``.

    Parameters
    ----------
    model, precision
        The model's shape and its KV-cache precision (whole bytes per value).
    tp : int
        Tensor parallelism; KV heads split (or replicate) as :meth:`ModelShape.kv_heads_per_gpu`.
    block_size : int
        Tokens per block (vLLM's ``--block-size``).
    rule : GroupingRule
        Which vLLM version's grouping to follow.
    state_blocks : int
        Pages a Mamba / linear layer keeps per request (1; 2 with prefix caching in "align").
    speculative_tokens : int
        vLLM's ``num_speculative_tokens`` (MTP / EAGLE); each adds one input to the convolution
        state of a Mamba2 or gated-delta-net layer.
    attention_backend : str
        The attention backend, for its kernel block alignment (:data:`KERNEL_BLOCK_ALIGNMENT`).
    kernel_block_alignment : int or None
        Tokens the hybrid attention block is a multiple of, overriding the backend's.
    """
    check_int("block_size", block_size, high=1 << 20)
    check_int("state_blocks", state_blocks, high=64)
    check_int("speculative_tokens", speculative_tokens, low=0, high=MAX_SPECULATIVE_TOKENS)
    alignment = backend_block_alignment(attention_backend, kernel_block_alignment)
    try:
        rule = GroupingRule(rule)
    except ValueError:
        raise SizingError("engine_rule", f"unknown grouping rule {rule!r:.40}; use one of "
                                         f"{', '.join(GroupingRule)}") from None
    specs = _specs(model, precision, tp, block_size, rule, alignment=alignment,
                   speculative_tokens=speculative_tokens)
    page = specs[0].page_bytes
    if len(specs) == 1:
        only = specs[0]
        group = KVCacheGroup(kind=only.kind, window=only.window, layer_indices=only.layers, padding=0,
                             block_size=only.block_size, page_bytes=page)
        return KVCacheLayout(rule=rule, groups=(group,), group_size=len(only.layers), page_bytes=page,
                             warnings=(), state_blocks=state_blocks)
    size = _group_size([len(s.layers) for s in specs], rule)
    groups: list[KVCacheGroup] = []
    warnings: list[PaddingWarning] = []
    for s in specs:
        n_groups = cdiv(len(s.layers), size)
        padding = n_groups * size - len(s.layers)
        if padding:
            warnings.append(PaddingWarning(kind=s.kind, layers=len(s.layers), padding_layers=padding))
        # vLLM deals layers round-robin (layers[i::n_groups]), so only the last groups fall short.
        for i in range(n_groups):
            members = s.layers[i::n_groups]
            groups.append(KVCacheGroup(kind=s.kind, window=s.window, layer_indices=members,
                                       padding=size - len(members), block_size=s.block_size, page_bytes=page))
    return KVCacheLayout(rule=rule, groups=tuple(groups), group_size=size, page_bytes=page,
                         warnings=tuple(warnings), state_blocks=state_blocks)
