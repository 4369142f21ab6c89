"""One request's KV blocks sent from one rank to another (prefill → decode), with ``send``/``recv``.

What travels is what the planner's disaggregation model says a connector moves
(``planner.cluster.transfer``; the tests check the byte count against it):

* **full** attention: every block of the prompt, the partly filled last one included, for the
  K and the V pool of every layer (two regions per layer);
* **sliding** window ``W``: only the blocks holding the last ``min(prompt, W)`` tokens, the
  keys the next decode query still sees (:func:`kernels.attention_span.first_visible` at the
  prompt's last position), K and V of every layer;
* **MLA**: the latent (``kv_lora_rank + qk_rope_head_dim`` values a token, one region per layer,
  no K/V pair), every block of the prompt.

Pools are the project's layout, ``[num_blocks, n_kv_heads, block_size, head_dim]`` (an MLA pool
has one "head", the latent), in bf16 or in FP8 e4m3 made by
:func:`kernels.cache.paged.quantize_pool_fp8`. The request's blocks lie scattered over the
sender's pool, and the receiver puts them at other, also scattered, block ids of its own pool,
as two engines' allocators would. FP8 scales belong to the layer, not to a request (vLLM keeps
``k_scale`` / ``v_scale`` on the attention layer), so they do not travel.

Two ways to cut them (``mode``):

* ``"whole"``: every sent block of every layer packed into one buffer, one message;
* ``"per_layer"``: one message per layer holding that layer's regions, as layer-wise connectors
  ship each layer when its prefill finishes.

Two ways to move each piece (``method``): ``"nccl"``, a ``send``/``recv`` between two ranks
(:func:`send_request`, :func:`recv_request`), or ``"peer_copy"``, one process copying the packed
piece from its GPU into the other GPU's pool (:func:`copy_request`: ``Tensor.to`` between devices,
a peer-to-peer copy where the GPUs allow peer access).

FP8 blocks travel as their bytes (``uint8`` views): the collectives need no FP8 type, and the
copy is bit for bit by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernels.attention_span import first_visible, span_of
from kernels.cache.paged import FP8_DTYPE, quantize_pool_fp8
from units import cdiv

__all__ = ["LAYOUTS", "MODES", "METHODS", "TransferCase", "RequestKV", "build_request", "empty_request",
           "send_request", "recv_request", "copy_request", "request_bytes", "MAX_PROMPT_TOKENS"]

LAYOUTS = ("full", "sliding", "mla")
MODES = ("whole", "per_layer")
METHODS = ("nccl", "peer_copy")  # send/recv between ranks, or one process's copy between devices
KV_DTYPES = {"bf16": torch.bfloat16, "fp8": FP8_DTYPE}
MAX_PROMPT_TOKENS = 1 << 20  # 1M tokens: past any prompt one request ships
_LIMITS = {"layers": 1024, "n_kv_heads": 256, "head_dim": 4096, "block_size": 256,
           "prompt_tokens": MAX_PROMPT_TOKENS}


@dataclass(frozen=True, kw_only=True)
class TransferCase:
    """One request's KV to move: its layout, geometry and prompt.

    Attributes
    ----------
    layout : one of :data:`LAYOUTS`.
    layers : attention layers of the request (all of the layout's kind).
    n_kv_heads : KV heads one rank holds (1 for MLA: the latent is one vector a token).
    head_dim : values per head (MLA: ``kv_lora_rank + qk_rope_head_dim``).
    prompt_tokens, block_size : tokens of the prompt, tokens per block.
    kv_dtype : ``"bf16"`` or ``"fp8"``.
    window : the sliding window in tokens (sliding layouts only).
    """

    layout: str
    layers: int
    n_kv_heads: int
    head_dim: int
    prompt_tokens: int
    block_size: int
    kv_dtype: str = "bf16"
    window: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r:.40}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r:.40}")
        for name, high in _LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"{name} must be a whole number from 1 to {high}, got {value!r:.40}")
        if self.layout == "mla" and self.n_kv_heads != 1:
            raise ValueError(f"n_kv_heads must be 1 for an MLA latent, got {self.n_kv_heads}")
        if (self.layout == "sliding") != (self.window is not None):
            raise ValueError("window is given for a sliding layout, and only for it")
        if self.window is not None:
            span_of(sliding_window=self.window)  # the kernels' one check of a window

    @property
    def regions_per_layer(self) -> int:
        """Pools a layer registers: K and V, or the one latent."""
        return 1 if self.layout == "mla" else 2

    @property
    def prompt_blocks(self) -> int:
        return cdiv(self.prompt_tokens, self.block_size)

    @property
    def first_block(self) -> int:
        """The first block of the prompt that travels: 0, or the one holding the window's first key."""
        if self.window is None:
            return 0
        return first_visible(span_of(sliding_window=self.window), self.prompt_tokens - 1) // self.block_size

    @property
    def blocks(self) -> int:
        """Blocks per region that travel."""
        return self.prompt_blocks - self.first_block

    @property
    def bytes_per_value(self) -> int:
        return torch.empty((), dtype=KV_DTYPES[self.kv_dtype]).element_size()

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of one region."""
        return self.n_kv_heads * self.block_size * self.head_dim * self.bytes_per_value

    @property
    def wire_bytes(self) -> int:
        """Bytes the request moves: whole blocks of every region of every layer."""
        return self.layers * self.regions_per_layer * self.blocks * self.block_bytes

    def messages(self, mode: str) -> int:
        """Messages one transfer sends: one, or one per layer."""
        _check_mode(mode)
        return 1 if mode == "whole" else self.layers

    @property
    def label(self) -> str:
        window = f" W={self.window}" if self.window is not None else ""
        return (f"{self.layout}{window} {self.kv_dtype} L={self.prompt_tokens} block {self.block_size} "
                f"{self.layers}x{self.regions_per_layer}x{self.n_kv_heads}x{self.head_dim}")


def _check_mode(mode: object) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r:.40}")


@dataclass(frozen=True, kw_only=True)
class RequestKV:
    """One rank's pools for a request and where its travelling blocks sit in them.

    Attributes
    ----------
    case : TransferCase
    regions : tuple of Tensor [num_blocks, n_kv_heads, block_size, head_dim], layer by layer
        (``L0.K, L0.V, L1.K, ...``, or ``L0.latent, L1.latent, ...``), in the case's KV dtype.
    block_ids : Tensor [case.blocks] int64, the pool index of each travelling block, in order.
    """

    case: TransferCase
    regions: tuple[torch.Tensor, ...]
    block_ids: torch.Tensor


def build_request(case: TransferCase, *, generator: torch.Generator, device: str | torch.device = "cpu",
                  spare_blocks: int = 2) -> RequestKV:
    """The sender's pools: random values (N(0, 1), then e4m3 with per-head scales for FP8) and
    NaN in the last block's slots past the prompt, which travel with the block."""
    num_blocks = case.prompt_blocks + spare_blocks
    shape = (num_blocks, case.n_kv_heads, case.block_size, case.head_dim)
    table = torch.randperm(num_blocks, generator=generator, device=generator.device)[:case.prompt_blocks]
    last, tail = int(table[-1]), case.prompt_tokens - (case.prompt_blocks - 1) * case.block_size
    regions = []
    for _ in range(case.layers * case.regions_per_layer):
        pool = torch.randn(shape, generator=generator, device=generator.device).to(device)
        pool[last, :, tail:] = float("nan")  # unwritten slots: whatever the engine left there
        if case.kv_dtype == "fp8":
            pool = quantize_pool_fp8(pool, per_head=True)[0]
        else:
            pool = pool.to(KV_DTYPES[case.kv_dtype])
        regions.append(pool)
    ids = table[case.first_block:].to(device=device, dtype=torch.int64)
    return RequestKV(case=case, regions=tuple(regions), block_ids=ids)


def empty_request(case: TransferCase, *, generator: torch.Generator, device: str | torch.device = "cpu",
                  spare_blocks: int = 2) -> RequestKV:
    """The receiver's pools: zeros (so a block that did not arrive shows), and its own scattered
    block ids for the request."""
    num_blocks = case.blocks + spare_blocks
    shape = (num_blocks, case.n_kv_heads, case.block_size, case.head_dim)
    regions = tuple(torch.zeros(shape, dtype=KV_DTYPES[case.kv_dtype], device=device)
                    for _ in range(case.layers * case.regions_per_layer))
    order = torch.randperm(num_blocks, generator=generator, device=generator.device)
    return RequestKV(case=case, regions=regions, block_ids=order[:case.blocks].to(device=device, dtype=torch.int64))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor as the collectives and the comparisons see it: FP8 as its bytes."""
    return t.view(torch.uint8) if t.dtype == FP8_DTYPE else t


def _pack(req: RequestKV, regions: range) -> torch.Tensor:
    """The travelling blocks of ``regions`` in one buffer ``[len(regions), blocks, H, block, d]``."""
    first = _bytes(req.regions[0])
    out = torch.empty((len(regions), req.block_ids.numel(), *first.shape[1:]), dtype=first.dtype, device=first.device)
    for slot, index in enumerate(regions):
        torch.index_select(_bytes(req.regions[index]), 0, req.block_ids, out=out[slot])
    return out


def _unpack(req: RequestKV, regions: range, buffer: torch.Tensor) -> None:
    for slot, index in enumerate(regions):
        _bytes(req.regions[index]).index_copy_(0, req.block_ids, buffer[slot])


def _pieces(case: TransferCase, mode: str) -> list[range]:
    """Which regions each message carries: all of them, or one layer's."""
    _check_mode(mode)
    per, total = case.regions_per_layer, case.layers * case.regions_per_layer
    return [range(total)] if mode == "whole" else [range(i, i + per) for i in range(0, total, per)]


def send_request(req: RequestKV, *, mode: str, dst: int, group: dist.ProcessGroup | None = None) -> int:
    """Send the request's blocks to rank ``dst`` (``mode`` as in the module docstring); returns the
    bytes sent. The receiver calls :func:`recv_request` with the same case and mode."""
    sent = 0
    for regions in _pieces(req.case, mode):
        buffer = _pack(req, regions)
        dist.send(buffer, dst, group=group)
        sent += buffer.numel() * buffer.element_size()
    return sent


def recv_request(req: RequestKV, *, mode: str, src: int, group: dist.ProcessGroup | None = None) -> int:
    """Receive the request's blocks from rank ``src`` into ``req``'s pools at its own block ids;
    returns the bytes received."""
    got = 0
    first = _bytes(req.regions[0])
    for regions in _pieces(req.case, mode):
        buffer = torch.empty((len(regions), req.block_ids.numel(), *first.shape[1:]), dtype=first.dtype,
                             device=first.device)
        dist.recv(buffer, src, group=group)
        _unpack(req, regions, buffer)
        got += buffer.numel() * buffer.element_size()
    return got


def copy_request(src: RequestKV, dst: RequestKV, *, mode: str) -> int:
    """Copy the request's blocks from ``src``'s pools into ``dst``'s at ``dst``'s block ids, in
    this process, piece by piece as ``mode`` cuts them; returns the bytes copied.

    The pools may lie on two devices (a peer copy between GPUs, or through the host where the
    GPUs have no peer access). Work queued on ``src``'s device after this call (a CUDA event)
    runs after the last block has landed on ``dst``'s device, as after a ``recv``.
    """
    if src.case != dst.case:
        raise ValueError(f"copy_request needs one case on both sides, got {src.case.label!r} and {dst.case.label!r}")
    target = dst.regions[0].device
    copied = 0
    for regions in _pieces(src.case, mode):
        buffer = _pack(src, regions).to(target)
        _unpack(dst, regions, buffer)
        copied += buffer.numel() * buffer.element_size()
    source = src.regions[0].device
    if source.type == target.type == "cuda" and source != target:
        torch.cuda.current_stream(source).wait_stream(torch.cuda.current_stream(target))
    return copied


def request_bytes(req: RequestKV) -> torch.Tensor:
    """The travelling blocks of every region as bytes, ``[regions, blocks, H, block, d × value
    bytes]`` uint8: equal on both ranks after a transfer, bit for bit (NaN included)."""
    packed = _pack(req, range(len(req.regions)))
    return packed.contiguous().view(torch.uint8)
