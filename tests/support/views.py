"""Tensor views for tests of how kernels take a caller's memory."""

from __future__ import annotations

import torch


def off_grid(t: torch.Tensor, offset_bytes: int = 4) -> torch.Tensor:
    """A copy of ``t`` (its shape, contiguous strides, its values) whose storage starts
    ``offset_bytes`` past a 16-byte boundary: a slice of a larger buffer, as a caller's view into
    a pool of its own may be. The allocator hands out buffers on the 16-byte grid, so the slice's
    address mod 16 is ``offset_bytes``."""
    nbytes = t.numel() * t.element_size()
    buf = torch.zeros(nbytes + 16, dtype=torch.uint8, device=t.device)
    view = buf[offset_bytes:offset_bytes + nbytes]
    view.copy_(t.contiguous().view(-1).view(torch.uint8))
    return view.view(t.dtype).view(t.shape)
