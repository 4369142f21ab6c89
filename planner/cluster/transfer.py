"""Disaggregated prefill/decode: the KV one request ships from the prefill GPUs to the decode GPUs,
the transfer descriptors vLLM's NIXL connector posts for it, and how long it takes over a link.

What each layer kind ships (bytes from :func:`sizing.kv.layer_kind_rows`, so the KV dtype's scale
bytes are counted exactly as the sizer counts them):

* **full attention / MLA** — every prompt token (MLA: the latent, replicated on every rank).
* **sliding window / chunked** — only the tokens the decode side still attends to: the last
  ``min(prompt, window)`` (the sizer's worst case for chunks), in the blocks that hold them.
* **Mamba / linear attention** — the fixed recurrent state of the sequence, whatever its length.

``payload`` counts the tokens decode needs; ``wire`` counts what the connector moves: whole
blocks, the prompt's last, partly filled block included (a descriptor covers a whole block).

**Which rank ships what** (vLLM's NIXL connector: the decode side pulls with RDMA READs;
``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``, ``add_remote_agent`` and
``_read_blocks_for_req``, and ``nixl/transfer_plan.py``, ``_compute_tp_mapping``):

* Equal TP: decode rank *i* reads its own shard, whole, from prefill rank *i*: one read per rank.
* Decode TP > prefill TP: decode rank *i* reads the heads it owns out of prefill rank
  ``i × P / D``; a prefill rank serves ``D / P`` decode ranks.
* Decode TP < prefill TP: decode rank *i* reads one piece from each of the ``P / D`` prefill
  ranks that hold distinct KV heads for it (ranks holding replicated heads are skipped); recurrent
  state is read from all of them.
* MLA: the latent is the same on every rank, so each decode rank reads it once, whole (when
  P > D only the first prefill rank of the group is read).

Every decode rank therefore receives exactly its own shard at the decode TP; the wire carries
``decode TP ×`` that.

**Descriptors.** The connector registers each KV tensor of each layer as a region (K and V
apart: two per attention layer; one per MLA layer; four per Mamba layer: convolution x, B, C and
the SSM state, ``generate_mamba_plan``) and addresses it block by block, so a read posts
``regions × blocks`` descriptors (``_get_block_descs_ids``: ``region_id × num_blocks +
block_id``). Newer versions merge consecutive blocks into one descriptor, so a read then costs
``regions × contiguous runs`` of its block list: a freshly allocated prompt is one run, while a
context assembled from scattered prefix-cache hits can be as many runs as blocks.

**Staging.** With the default ``kv_buffer_device="cuda"`` the decode side reads straight into its
own KV blocks: no staging buffer. With ``kv_buffer_device="cpu"`` (platforms NIXL cannot register
device memory on, or by choice) each rank allocates a host buffer of the same shape as its whole
device KV cache (``initialize_host_xfer_buffer``) and copies blocks to and from it: host memory,
never GPU memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from hardware.links import Link, check_nics
from inputs.errors import InputError
from sizing.kv import DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, layer_kind_rows
from sizing.layers import STATE_KINDS, WINDOWED_KINDS, LayerKind
from sizing.models import MAX_TOKENS, MAX_TP_RANKS, ModelShape, check_int
from sizing.precisions import Precision
from units import cdiv

MAX_REGIONS = 1 << 20
# Regions the connector registers per layer of each kind (K and V apart; one latent; Mamba's
# convolution x, B, C and SSM state).
REGIONS_PER_LAYER: dict[LayerKind, int] = {
    LayerKind.FULL: 2, LayerKind.SLIDING: 2, LayerKind.CHUNKED: 2, LayerKind.MLA: 1,
    LayerKind.MAMBA: 4, LayerKind.LINEAR: 4,
}


class DescriptorRule(StrEnum):
    """How the connector turns a block list into descriptors."""

    PER_BLOCK = "per_block"  # one per region and block
    PER_RUN = "per_run"  # one per region and run of consecutive blocks


def nixl_descriptors(*, regions: int, blocks: int, rule: DescriptorRule | str = DescriptorRule.PER_BLOCK,
                     runs: int | None = None) -> int:
    """Descriptors one read posts: ``regions × blocks``, or ``regions × runs`` when consecutive
    blocks coalesce (``runs`` defaults to 1, a contiguous block list; at most ``blocks``)."""
    check_int("regions", regions, low=0, high=MAX_REGIONS)
    check_int("blocks", blocks, low=0, high=MAX_TOKENS)
    rule = _rule(rule)
    if rule is DescriptorRule.PER_BLOCK:
        return regions * blocks
    runs = min(1, blocks) if runs is None else check_int("block_runs", runs, low=min(1, blocks), high=blocks)
    return regions * runs


def _rule(rule: object) -> DescriptorRule:
    try:
        return DescriptorRule(rule)
    except ValueError:
        raise InputError("descriptor_rule", f"must be one of {', '.join(DescriptorRule)}, got {rule!r:.40}") from None


def window_blocks(prompt_tokens: int, window: int | None, block_size: int) -> int:
    """Blocks holding the last ``min(prompt, window)`` tokens of a ``prompt_tokens``-token prompt
    (all of its blocks without a window): one more than ``window ÷ block`` when the window does not
    start on a block boundary."""
    blocks = cdiv(prompt_tokens, block_size)
    if window is None or window >= prompt_tokens:
        return blocks
    first = (prompt_tokens - window) // block_size
    return blocks - first


@dataclass(frozen=True, kw_only=True)
class KindTransfer:
    """One layer group (one kind, one window) of one request, as one decode rank receives it.

    Attributes
    ----------
    kind : str
    count : int
        Layers in the group.
    window : int or None
        Sliding window or chunk, tokens.
    tokens : int
        Tokens per layer the decode side needs (0 for recurrent layers).
    blocks : int
        Blocks per layer the connector reads (1 state block for recurrent layers).
    payload_bytes : Fraction
        Bytes of those tokens (or the state), all layers of the group, one decode rank.
    wire_bytes : Fraction
        Bytes actually moved: whole blocks (or the state), all layers of the group, one decode rank.
    regions : int
        Regions the group registers per rank (all its layers).
    reads : int
        Prefill ranks one decode rank reads this group from.
    descriptors : int
        Descriptors one decode rank posts for this group, over all its reads.
    """

    kind: str
    count: int
    window: int | None
    tokens: int
    blocks: int
    payload_bytes: Fraction
    wire_bytes: Fraction
    regions: int
    reads: int
    descriptors: int


@dataclass(frozen=True, kw_only=True)
class KVTransfer:
    """The KV of one request moved from a prefill instance at TP ``prefill_tp`` to a decode
    instance at TP ``decode_tp``. Bytes are per decode rank unless named otherwise."""

    prompt_tokens: int
    block_size: int
    prefill_tp: int
    decode_tp: int
    rule: DescriptorRule
    kinds: tuple[KindTransfer, ...]
    max_sent_per_prefill_rank: Fraction  # the busiest prefill rank's outgoing bytes

    @property
    def payload_bytes_per_decode_rank(self) -> int:
        return math.ceil(sum((k.payload_bytes for k in self.kinds), Fraction(0)))

    @property
    def wire_bytes_per_decode_rank(self) -> int:
        return math.ceil(sum((k.wire_bytes for k in self.kinds), Fraction(0)))

    @property
    def wire_bytes_all_ranks(self) -> int:
        """Bytes over the wire for the whole request (replicated heads or latent counted per copy)."""
        return math.ceil(self.decode_tp * sum((k.wire_bytes for k in self.kinds), Fraction(0)))

    @property
    def descriptors_per_decode_rank(self) -> int:
        return sum(k.descriptors for k in self.kinds)

    @property
    def reads_per_decode_rank(self) -> int:
        return max((k.reads for k in self.kinds), default=0)

    @property
    def bytes_sent_per_prefill_rank(self) -> int:
        return math.ceil(self.max_sent_per_prefill_rank)


def _reads(model: ModelShape, kind: LayerKind, prefill_tp: int, decode_tp: int) -> int:
    """Prefill ranks one decode rank reads a group of this kind from."""
    if prefill_tp <= decode_tp or kind is LayerKind.MLA:
        return 1
    pieces = prefill_tp // decode_tp
    if kind in STATE_KINDS:
        return pieces
    # Distinct KV heads among the prefill ranks a decode rank covers: replicated ones are read once.
    return min(pieces, model.kv_heads_per_gpu(decode_tp))


def kv_transfer(model: ModelShape, kv_precision: Precision, *, prompt_tokens: int,
                block_size: int = DEFAULT_BLOCK_SIZE, prefill_tp: int = 1, decode_tp: int = 1,
                rule: DescriptorRule | str = DescriptorRule.PER_BLOCK, block_runs: int | None = None) -> KVTransfer:
    """The KV transfer of one ``prompt_tokens``-token request (see the module docstring for the rules).

    ``block_runs`` (with ``rule="per_run"``) is the number of runs of consecutive blocks in the
    request's block list; None: one run, a freshly allocated prompt.
    """
    check_int("prompt_tokens", prompt_tokens, high=MAX_TOKENS)
    check_int("block_size", block_size, high=MAX_BLOCK_SIZE)
    model.check_tp(check_int("prefill_tp", prefill_tp, high=MAX_TP_RANKS))
    model.check_tp(check_int("decode_tp", decode_tp, high=MAX_TP_RANKS))
    if max(prefill_tp, decode_tp) % min(prefill_tp, decode_tp):
        raise InputError("decode_tp", f"prefill TP {prefill_tp} and decode TP {decode_tp}: one must divide the other")
    rule = _rule(rule)
    if block_runs is not None:
        if rule is not DescriptorRule.PER_RUN:
            raise InputError("block_runs", "runs of blocks only count with the per_run descriptor rule")
        check_int("block_runs", block_runs, high=cdiv(prompt_tokens, block_size))
    rows = layer_kind_rows(model, kv_precision, tp=decode_tp, context=prompt_tokens)
    kinds, sent = [], Fraction(0)
    for row in rows:
        kind = LayerKind(row.kind)
        reads = _reads(model, kind, prefill_tp, decode_tp)
        if kind in STATE_KINDS:
            tokens, blocks = 0, 1
            payload = wire = Fraction(row.state_bytes_per_sequence_per_gpu)
        else:
            tokens = min(prompt_tokens, row.window) if kind in WINDOWED_KINDS else prompt_tokens
            blocks = window_blocks(prompt_tokens, row.window, block_size)
            payload = row.bytes_at_context_per_gpu
            wire = row.bytes_per_token_per_gpu * block_size * blocks
        regions = REGIONS_PER_LAYER[kind] * row.count
        runs = None if block_runs is None else min(block_runs, blocks)
        descriptors = reads * nixl_descriptors(regions=regions, blocks=blocks, rule=rule, runs=runs)
        kinds.append(KindTransfer(kind=row.kind, count=row.count, window=row.window, tokens=tokens, blocks=blocks,
                                  payload_bytes=payload, wire_bytes=wire, regions=regions, reads=reads,
                                  descriptors=descriptors))
        # A prefill rank serves D/P decode ranks their whole shard, or one piece of one decode rank's.
        sent += wire * (decode_tp // prefill_tp) if decode_tp >= prefill_tp else wire / reads
    return KVTransfer(prompt_tokens=prompt_tokens, block_size=block_size, prefill_tp=prefill_tp,
                      decode_tp=decode_tp, rule=rule, kinds=tuple(kinds), max_sent_per_prefill_rank=sent)


@dataclass(frozen=True, kw_only=True)
class TransferTime:
    """How long ``bytes`` take over a link: latency + bytes ÷ (bytes/s per direction × NICs).

    ``latency_published`` is False when the link has no published latency and none was given;
    the latency then counts as zero and the time is a lower bound.
    """

    bytes: int
    bandwidth_bytes_per_s: int
    latency_s: Fraction
    latency_published: bool
    seconds: Fraction

    @property
    def ms(self) -> float:
        return float(self.seconds * 1000)


def transfer_time(n_bytes: int, link: Link, *, nics: int = 1, latency_ns: int | None = None) -> TransferTime:
    """Time to move ``n_bytes`` over ``link`` striped across ``nics`` NICs; ``latency_ns``
    overrides the link's own figure (needed where the vendor publishes none)."""
    check_int("bytes", n_bytes, low=0, high=1 << 60)
    bandwidth = link.bytes_per_s_for(check_nics(nics))
    if latency_ns is None:
        latency_ns = link.latency_ns
        published = latency_ns is not None
    else:
        check_int("latency_ns", latency_ns, low=0, high=10**12)
        published = True
    latency = Fraction(latency_ns or 0, 10**9)
    return TransferTime(bytes=n_bytes, bandwidth_bytes_per_s=bandwidth, latency_s=latency,
                        latency_published=published, seconds=latency + Fraction(n_bytes, bandwidth))


@dataclass(frozen=True, kw_only=True)
class StagingNeed:
    """Buffers the decode side allocates to receive transfers, per rank, bytes."""

    gpu_bytes: int
    host_bytes: int


def decode_staging(kv_buffer_device: str, kv_cache_bytes_per_rank: int) -> StagingNeed:
    """The decode side's staging: none on the GPU either way; with ``kv_buffer_device="cpu"`` a host
    copy of the whole device KV cache per rank (``kv_cache_bytes_per_rank``)."""
    check_int("kv_cache_bytes_per_rank", kv_cache_bytes_per_rank, low=0, high=1 << 60)
    if kv_buffer_device == "cuda":
        return StagingNeed(gpu_bytes=0, host_bytes=0)
    if kv_buffer_device == "cpu":
        return StagingNeed(gpu_bytes=0, host_bytes=kv_cache_bytes_per_rank)
    raise InputError("kv_buffer_device", f"must be 'cuda' or 'cpu', got {kv_buffer_device!r:.40}")
