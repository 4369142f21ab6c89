"""The routing kernels and the routed experts against torch.topk and a loop over every expert."""

from __future__ import annotations

import pytest
import torch

from kernels.layer.moe import GEMMS, ExpertGemmConfig, gemm_config_for, route_top_k, routed_experts

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


# (40, 4, 2): ~20 pairs an expert, two 16-row blocks each with padding; hidden 192 runs the
# reduction past one 128-wide step with a masked tail; (3, 64, 2) leaves most experts unpicked.
@pytest.mark.parametrize("gemm", GEMMS)
@pytest.mark.parametrize("tokens, experts, top_k, hidden, width",
                         [(1, 4, 2, 32, 16), (9, 8, 2, 64, 48), (40, 4, 2, 192, 40), (3, 64, 2, 64, 32)])
def test_routed_experts_equal_the_loop_over_every_expert(gemm, tokens, experts, top_k, hidden, width):
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    router = torch.randn(tokens, experts, generator=gen)
    w13 = (torch.randn(experts, 2 * width, hidden, generator=gen) * hidden ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, width, generator=gen) * width ** -0.5).to(torch.bfloat16)
    got = routed_experts(x.to(DEVICE), router.to(DEVICE), w13.to(DEVICE), w2.to(DEVICE), top_k,
                         gemm=gemm).cpu().float()
    top, ids = torch.topk(router, top_k, dim=-1)
    weights = torch.softmax(top, -1)
    want = torch.zeros(tokens, hidden)
    for t in range(tokens):
        for w, e in zip(weights[t], ids[t].tolist()):
            gate, up = (x[t].float() @ w13[e].float().T).chunk(2)
            want[t] += w * ((torch.nn.functional.silu(gate) * up) @ w2[e].float().T)
    # Three bf16 roundings (the first GEMM's output, the activation, the second GEMM's) of values
    # near unit scale, each at most 2⁻⁸ of the value (2⁻⁷ where the interpreter truncates), and
    # the sum over k: within 3 % of the largest output, where a row sent to the wrong expert or
    # a lost pair is off by the whole term.
    assert (got - want).abs().max().item() <= 0.03 * want.abs().max().item()


def test_routed_experts_refuse_an_unknown_gemm():
    x = torch.zeros(2, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gemm"):
        routed_experts(x, torch.zeros(2, 4), torch.zeros(4, 32, 32, dtype=torch.bfloat16),
                       torch.zeros(4, 32, 16, dtype=torch.bfloat16), 2, gemm="cublas")


def test_the_tiles_grow_with_the_pairs_an_expert_averages():
    # Qwen3-30B-A3B (128 experts, top-8): batch 128 is 1,024 pairs, 8 an expert → 16-row blocks,
    # batch 256 16 an expert → 32; gpt-oss-20b (32 experts, top-4): batch 256 is 1,024 pairs,
    # 32 an expert → 64-row blocks; batch 1 → 16.
    assert gemm_config_for(128 * 8, 128).block_m == 16
    assert gemm_config_for(256 * 8, 128).block_m == 32
    assert gemm_config_for(256 * 4, 32).block_m == 64
    assert gemm_config_for(1 * 4, 32).block_m == 16


def test_routed_experts_in_64_row_blocks_equal_16_row_blocks():
    gen = torch.Generator().manual_seed(2)
    tokens, experts, top_k, hidden, width = 50, 2, 2, 64, 32  # 50 pairs an expert: 64-row blocks
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16).to(DEVICE)
    router = torch.randn(tokens, experts, generator=gen).to(DEVICE)
    w13 = (torch.randn(experts, 2 * width, hidden, generator=gen) * hidden ** -0.5).to(torch.bfloat16).to(DEVICE)
    w2 = (torch.randn(experts, hidden, width, generator=gen) * width ** -0.5).to(torch.bfloat16).to(DEVICE)
    assert gemm_config_for(tokens * top_k, experts).block_m == 64
    tall = routed_experts(x, router, w13, w2, top_k).float()
    short = routed_experts(x, router, w13, w2, top_k, config=ExpertGemmConfig(block_m=16)).float()
    # The same products a row, in fp32; the K tile (64 against 128) changes only the order of the
    # sums, far below one bf16 step of these unit-scale outputs (2⁻⁸ ≈ 0.004 of the value).
    assert torch.allclose(tall, short, atol=1e-2, rtol=0)
