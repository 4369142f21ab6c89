"""The routing kernels and the routed experts against torch.topk and a loop over every expert."""

from __future__ import annotations

import pytest
import torch

from kernels.layer.moe import route_top_k, routed_experts

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("tokens, experts, top_k", [(1, 4, 1), (7, 8, 2), (5, 128, 8), (3, 32, 4)])
def test_route_top_k_equals_torch_topk_and_counts_every_pair(tokens, experts, top_k):
    logits = torch.randn(tokens, experts, generator=torch.Generator().manual_seed(experts)).to(DEVICE)
    ids, weights, counts = route_top_k(logits, top_k)
    top, want = torch.topk(logits.float().cpu(), top_k, dim=-1)
    assert torch.equal(ids.cpu().long(), want)
    assert torch.allclose(weights.cpu(), torch.softmax(top, -1), atol=1e-6)
    assert torch.equal(counts.cpu().long(), torch.bincount(want.reshape(-1), minlength=experts))


def test_route_top_k_refuses_a_k_beyond_the_experts():
    with pytest.raises(ValueError, match="top_k"):
        route_top_k(torch.zeros(2, 4), 5)


@pytest.mark.parametrize("tokens, experts, top_k, hidden, width", [(1, 4, 2, 32, 16), (9, 8, 2, 64, 48)])
def test_routed_experts_equal_the_loop_over_every_expert(tokens, experts, top_k, hidden, width):
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    router = torch.randn(tokens, experts, generator=gen)
    w13 = (torch.randn(experts, 2 * width, hidden, generator=gen) * hidden ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, width, generator=gen) * width ** -0.5).to(torch.bfloat16)
    got = routed_experts(x.to(DEVICE), router.to(DEVICE), w13.to(DEVICE), w2.to(DEVICE), top_k).cpu().float()
    top, ids = torch.topk(router, top_k, dim=-1)
    weights = torch.softmax(top, -1)
    want = torch.zeros(tokens, hidden)
    for t in range(tokens):
        for w, e in zip(weights[t], ids[t].tolist()):
            gate, up = (x[t].float() @ w13[e].float().T).chunk(2)
            want[t] += w * ((torch.nn.functional.silu(gate) * up) @ w2[e].float().T)
    # bf16 intermediates (the grouped GEMMs' outputs and the activation) against float32: a few
    # roundings of unit-scale values.
    assert (got - want).abs().max().item() < 0.05
