"""Hand-checked tests of the float32 attention references in kernels/reference/dense.py.

Every kernel is tested against these functions, so they are checked here against values worked
out by hand and against PyTorch's own scaled_dot_product_attention in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.reference.dense import (
    causal_mask,
    naive_attention,
    naive_attention_lse,
    naive_attention_native,
)
from kernels.tolerances import tolerance


def _t(rows) -> torch.Tensor:
    """[[...]] token rows -> a [1, 1, N, D] float32 tensor (one batch, one head)."""
    return torch.tensor(rows, dtype=torch.float32)[None, None]


def test_two_token_example_by_hand():
    # q = (1, 0); keys (1, 0) and (0, 1); scale 1 -> scores (1, 0).
    # softmax = (e, 1) / (e + 1); out = (e·(1, 2) + 1·(3, 4)) / (e + 1); lse = ln(e + 1).
    q = _t([[1.0, 0.0]])
    k = _t([[1.0, 0.0], [0.0, 1.0]])
    v = _t([[1.0, 2.0], [3.0, 4.0]])
    out, lse = naive_attention_lse(q, k, v, sm_scale=1.0)
    e = math.e
    want = torch.tensor([(e * 1 + 3) / (e + 1), (e * 2 + 4) / (e + 1)])
    torch.testing.assert_close(out[0, 0, 0], want)
    assert lse[0, 0, 0].item() == pytest.approx(math.log(e + 1), rel=1e-6)


def test_default_scale_is_inverse_sqrt_head_dim():
    # D = 4 -> scale 1/2. Scores (2·1/2, 0) = (1, 0): same numbers as the two-token example.
    q = _t([[2.0, 0.0, 0.0, 0.0]])
    k = _t([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    v = _t([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out, lse = naive_attention_lse(q, k, v)
    assert out[0, 0, 0, 0].item() == pytest.approx(math.e / (math.e + 1), rel=1e-6)
    assert lse[0, 0, 0].item() == pytest.approx(math.log(math.e + 1), rel=1e-6)


def test_equal_scores_give_uniform_attention():
    # q = 0 -> every score is 0 -> weights 1/N -> out = mean of v, lse = ln N.
    n = 5
    q = torch.zeros(1, 1, 3, 8)
    k = torch.randn(1, 1, n, 8)
    v = torch.randn(1, 1, n, 8)
    out, lse = naive_attention_lse(q, k, v)
    torch.testing.assert_close(out[0, 0], v[0, 0].mean(0).expand(3, 8))
    torch.testing.assert_close(lse, torch.full((1, 1, 3), math.log(n)))


def test_causal_prefill_first_row_copies_first_value():
    # Row 0 sees only key 0, so its output is v[0] whatever the scores.
    q, k, v = (torch.randn(1, 2, 6, 16) for _ in range(3))
    out = naive_attention(q, k, v, causal=True)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])


def test_causal_is_end_aligned_for_decode():
    # One query against Nk keys: the query is the last token, so it sees every key.
    q = torch.randn(2, 4, 1, 16)
    k, v = torch.randn(2, 4, 9, 16), torch.randn(2, 4, 9, 16)
    torch.testing.assert_close(
        naive_attention(q, k, v, causal=True), naive_attention(q, k, v, causal=False)
    )
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_query_that_sees_no_key_is_zero_with_minus_inf_lse():
    # Nq > Nk with end alignment: query 0 of 3 against 2 keys sees keys j <= -1, none.
    q, k, v = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8)
    out, lse = naive_attention_lse(q, k, v, causal=True)
    assert torch.all(out[0, 0, 0] == 0)
    assert lse[0, 0, 0].item() == float("-inf")
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_float64(group, causal):
    torch.manual_seed(group)
    hkv, n, d = 2, 13, 32
    q = torch.randn(2, hkv * group, n, d, dtype=torch.float64)
    k = torch.randn(2, hkv, n, d, dtype=torch.float64)
    v = torch.randn(2, hkv, n, d, dtype=torch.float64)
    want = F.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal
    )
    torch.testing.assert_close(naive_attention(q, k, v, causal=causal), want.float())


def test_gqa_equals_repeated_kv_heads():
    q = torch.randn(1, 8, 7, 16)
    k, v = torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    # Query heads 0-3 use KV head 0, heads 4-7 KV head 1.
    got = naive_attention(q, k, v)
    for h in range(8):
        one = naive_attention(q[:, h : h + 1], k[:, h // 4 : h // 4 + 1], v[:, h // 4 : h // 4 + 1])
        torch.testing.assert_close(got[:, h : h + 1], one)


def test_lse_normalises_the_softmax():
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    _, lse = naive_attention_lse(q, k, k, causal=True, sm_scale=0.3)
    s = (q @ k.transpose(-1, -2)) * 0.3
    s = s.masked_fill(~causal_mask(5, 5), float("-inf"))
    torch.testing.assert_close(torch.exp(s - lse[..., None]).sum(-1), torch.ones(1, 2, 5))


@pytest.mark.parametrize("causal", [False, True])
def test_native_matches_float32_reference(causal):
    q = torch.randn(1, 8, 11, 16, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 11, 16, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 11, 16, dtype=torch.bfloat16)
    got = naive_attention_native(q, k, v, causal=causal)
    assert got.dtype == torch.bfloat16
    tol = tolerance("naive_native", "bf16")  # bf16 S, P and output: a few 2^-8 roundings
    torch.testing.assert_close(got.float(), naive_attention(q, k, v, causal=causal), atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize(
    "q_shape, k_shape, match",
    [
        ((1, 2, 4), (1, 2, 4, 8), "q must be 4-D"),
        ((1, 6, 4, 8), (1, 4, 4, 8), r"query heads \(6\) must be a multiple of KV heads \(4\)"),
        ((2, 2, 4, 8), (1, 2, 4, 8), "same batch size"),
        ((1, 2, 4, 8), (1, 2, 4, 16), "same head_dim"),
    ],
)
def test_bad_shapes_raise(q_shape, k_shape, match):
    with pytest.raises(ValueError, match=match):
        naive_attention(torch.randn(q_shape), torch.randn(k_shape), torch.randn(k_shape))


def test_k_v_shape_mismatch_raises():
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        naive_attention(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8))
