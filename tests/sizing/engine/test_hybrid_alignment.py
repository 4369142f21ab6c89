"""The hybrid attention block: the backend's kernel block alignment, --block-size and the
speculative tokens of the convolution state, each checked against a hand calculation."""

from __future__ import annotations

import pytest

from sizing.engine.capacity import EngineRequest, plan_engine
from sizing.engine.groups import KERNEL_BLOCK_ALIGNMENT, backend_block_alignment, kv_cache_layout
from sizing.errors import SizingError
from sizing.layers import LayerKind, RecurrentState
from sizing.models import ModelShape
from sizing.precisions import get_precision

# 4 gated-delta-net layers and 4 full-attention layers, 2 KV heads of 128: one attention layer
# caches 2 × 2 × 128 × 2 B = 1,024 B per token in bf16. State per layer: conv 2,048 channels × 3
# inputs × 2 B = 12,288 B plus 8 heads × 64 × 64 × 4 B (fp32 recurrent) = 131,072 B: 143,360 B.
STATE = RecurrentState(kind=LayerKind.LINEAR, conv_kernel=4, conv_channels=2048, heads=8, state_per_head=64 * 64,
                       dtype_bytes=2, recurrent_dtype_bytes=4)
HYBRID = ModelShape(name="hybrid", layers=8, q_heads=8, kv_heads=2, head_dim=128, params=10**9,
                    layer_kinds=(LayerKind.LINEAR, LayerKind.FULL) * 4, state=STATE)
BF16 = get_precision("bf16")


def _attention_block(**kwargs) -> int:
    layout = kv_cache_layout(HYBRID, BF16, **kwargs)
    return next(g.block_size for g in layout.groups if g.kind is LayerKind.FULL)


def test_state_page_is_the_sum_of_its_tensors():
    assert STATE.bytes_per_gpu(1) == 12_288 + 131_072 == 143_360
    assert kv_cache_layout(HYBRID, BF16).page_bytes == 144 * 1024  # 143,360 / 1,024 = 140 → 144 tokens


@pytest.mark.parametrize(("kwargs", "block"), [
    ({}, 144),                                          # FlashAttention: 16 × cdiv(143,360, 16 × 1,024) = 16 × 9
    ({"attention_backend": "flashinfer"}, 144),         # FlashInfer's smallest kernel block is 16 too
    ({"attention_backend": "flashmla"}, 192),           # 64 × cdiv(143,360, 65,536) = 64 × 3
    ({"attention_backend": "cutlass_mla"}, 256),        # 128 × cdiv(143,360, 131,072) = 128 × 2
    ({"kernel_block_alignment": 32}, 160),              # 32 × cdiv(143,360, 32,768) = 32 × 5
    ({"block_size": 48}, 144),                          # --block-size above the alignment is the step: 48 × 3
    ({"block_size": 100}, 200),                         # 100 × cdiv(143,360, 102,400) = 100 × 2
    ({"speculative_tokens": 3}, 160),                   # conv 2,048 × 6 × 2 = 24,576: 155,648 B → 16 × 10
])
def test_attention_block_follows_alignment_block_size_and_speculation(kwargs, block):
    assert _attention_block(**kwargs) == block


def test_backend_alignments_and_their_bounds():
    assert backend_block_alignment() == 16 and KERNEL_BLOCK_ALIGNMENT["cutlass_mla"] == 128
    assert backend_block_alignment("triton_attn", override=64) == 64
    for kwargs, field in (({"attention_backend": "xformers"}, "attention_backend"),
                          ({"kernel_block_alignment": 0}, "kernel_block_alignment"),
                          ({"kernel_block_alignment": 1 << 20}, "kernel_block_alignment"),
                          ({"speculative_tokens": -1}, "speculative_tokens")):
        with pytest.raises(SizingError) as info:
            kv_cache_layout(HYBRID, BF16, **kwargs)
        assert info.value.field == field


def test_engine_request_carries_the_backend_and_speculation():
    base = dict(model=HYBRID, gpu="h100-sxm", max_model_len=4096, kv_budget_bytes_per_gpu=1 << 30)
    plain = plan_engine(EngineRequest(**base))
    mla = plan_engine(EngineRequest(**base, attention_backend="cutlass_mla", speculative_tokens=3))
    assert plain.layout.page_bytes == 144 * 1024
    # 128 × cdiv(155,648, 131,072) = 256 tokens.
    assert mla.layout.page_bytes == 256 * 1024
