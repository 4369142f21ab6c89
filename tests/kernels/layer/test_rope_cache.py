"""RoPE with the KV-cache write against the rotate-half definition and a slot-by-slot read of the
pools, with and without Qwen3's per-head norms, on shuffled tables and partial pages."""

from __future__ import annotations

import pytest
import torch

from kernels.layer.rope_cache import rope_and_cache

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATOL = 0.04  # bf16 outputs of unit-scale values, as in test_norm_activation.py


def _rope(x, pos, inv_freq):  # rotate-half RoPE of x [heads, d] at one position, float32
    ang = pos * inv_freq
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()), -1)


def _norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("q_heads, kv_heads, head_dim, page, per_head_norm",
                         [(4, 1, 16, 1, False), (8, 2, 64, 16, True), (2, 2, 32, 5, False)])
def test_rope_and_cache_writes_the_rotated_key_and_the_value_where_the_table_says(q_heads, kv_heads, head_dim,
                                                                                  page, per_head_norm):
    gen = torch.Generator().manual_seed(head_dim + page)
    tokens, pages = 3, 6
    positions = torch.tensor([0, 17, page * pages - 1], dtype=torch.int64)
    positions = torch.minimum(positions, torch.tensor(page * pages - 1))
    blocks = tokens * pages
    table = torch.randperm(blocks, generator=gen).to(torch.int32).view(tokens, pages)
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, generator=gen).to(torch.bfloat16)
    inv_freq = 1.0 / (10_000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    norms = (1 + 0.2 * torch.randn(2, head_dim, generator=gen)).to(torch.bfloat16) if per_head_norm else None
    k_pool = torch.zeros(blocks, kv_heads, page, head_dim, dtype=torch.bfloat16)
    v_pool = torch.zeros_like(k_pool)
    dev = lambda t: None if t is None else t.to(DEVICE)  # noqa: E731
    k_dev, v_dev = dev(k_pool), dev(v_pool)
    q = rope_and_cache(dev(qkv), dev(positions), dev(inv_freq), k_dev, v_dev, dev(table), q_heads=q_heads,
                       kv_heads=kv_heads, qk_norm=dev(norms), eps=1e-6).cpu()
    k_pool, v_pool = k_dev.cpu(), v_dev.cpu()
    d = head_dim
    written = torch.zeros(blocks, page, dtype=torch.bool)
    for t in range(tokens):
        row, pos = qkv[t].float(), int(positions[t])
        qt = row[: q_heads * d].view(q_heads, d)
        kt = row[q_heads * d:(q_heads + kv_heads) * d].view(kv_heads, d)
        vt = row[(q_heads + kv_heads) * d:].view(kv_heads, d)
        if norms is not None:
            qt, kt = _norm(qt, norms[0].float(), 1e-6), _norm(kt, norms[1].float(), 1e-6)
        assert (q[t].float() - _rope(qt, pos, inv_freq)).abs().max().item() < ATOL
        block, slot = int(table[t, pos // page]), pos % page
        assert (k_pool[block, :, slot].float() - _rope(kt, pos, inv_freq)).abs().max().item() < ATOL
        assert torch.equal(v_pool[block, :, slot].float(), vt)  # V is copied, not rounded again
        written[block, slot] = True
    # Nothing else in the pools was touched.
    assert not k_pool.permute(0, 2, 1, 3)[~written].any() and not v_pool.permute(0, 2, 1, 3)[~written].any()


def test_rope_and_cache_refuses_bad_shapes_naming_the_argument():
    pool = torch.zeros(4, 1, 4, 16, dtype=torch.bfloat16)
    good = dict(positions=torch.zeros(2, dtype=torch.int64), inv_freq=torch.ones(8), k_pool=pool,
                v_pool=pool.clone(), block_table=torch.zeros(2, 1, dtype=torch.int32), q_heads=2, kv_heads=1)
    qkv = torch.zeros(2, 4 * 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="qkv"):
        rope_and_cache(qkv[:, :48], **good)
    with pytest.raises(ValueError, match="positions"):
        rope_and_cache(qkv, **{**good, "positions": torch.zeros(2, dtype=torch.int32)})
    with pytest.raises(ValueError, match="inv_freq"):
        rope_and_cache(qkv, **{**good, "inv_freq": torch.ones(6)})
    with pytest.raises(ValueError, match="block_table"):
        rope_and_cache(qkv, **{**good, "block_table": torch.zeros(2, 1, dtype=torch.int64)})
    with pytest.raises(ValueError, match="qk_norm"):
        rope_and_cache(qkv, **good, qk_norm=torch.ones(16, dtype=torch.bfloat16))
