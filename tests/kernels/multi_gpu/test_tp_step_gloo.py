"""The TP decode step on two gloo processes (CPU): the all-reduced output of the sharded layer
against the whole layer computed in one process.

One launch (forked ranks, so each does not import torch again) runs every case; the parent
builds the same full-size layers from the same seeds and computes the references itself. One
case goes through the project's Triton kernel under TRITON_INTERPRET=1; the others use the
float32 reference attention with float32 partial sums, where sharding is the only difference
from the whole layer, so the bound is float32 summation order (1e-5 at outputs of size ~1).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch

from kernels.multi_gpu.env import MULTICAST_OFF, launch
from kernels.multi_gpu.tp_step import (
    allreduce_bytes, build_layer, kv_heads_of_rank, local_partial, q_heads_of_rank, reference_output, shard_layer,
    tp_decode_step,
)
from kernels.tolerances import tolerance

# name: (layer geometry, attention path, partial-sum dtype)
CASES = {
    # GQA 2: each rank holds one of the two KV heads; tails of 1 and 17 tokens past a block.
    "kernel bf16, KV heads split": (dict(seq_lens=[17, 33], n_q_heads=4, n_kv_heads=2, head_dim=16, hidden=24,
                                         block_size=16), "kernel", None),
    # One KV head, TP 2: the head is replicated on both ranks, each computes two of its query heads.
    "reference, KV head replicated": (dict(seq_lens=[5, 70, 9], n_q_heads=4, n_kv_heads=1, head_dim=16, hidden=40,
                                           block_size=16), "reference", torch.float32),
    # FP8 pool with per-head scales, block 64: the scales must follow their heads to the shard.
    "reference, fp8 per-head scales": (dict(seq_lens=[65, 3], n_q_heads=8, n_kv_heads=2, head_dim=16, hidden=32,
                                            block_size=64, kv_dtype="fp8"), "reference", torch.float32),
}
SEEDS = {name: 10 + i for i, name in enumerate(CASES)}
FP32_SUM_TOL = 1e-5
# A collective that waits 20 s is a hang at these sizes (the launch takes ~1 s): fail, don't stall.
LIMITS = dict(timeout=timedelta(seconds=20), deadline_s=45.0)
pytestmark = pytest.mark.timeout(60)


def _layer(name: str):
    geometry, _, _ = CASES[name]
    return build_layer(**geometry, generator=torch.Generator().manual_seed(SEEDS[name]))


def _rank(rank: int, world: int) -> dict:
    """Every case on this rank: its reduced output, and the multicast variables it saw."""
    out = {"env": {name: os.environ.get(name) for name in MULTICAST_OFF}}
    for name, (_, attention, partial_dtype) in CASES.items():
        shard = shard_layer(_layer(name), tp=world, rank=rank)
        out[name] = tp_decode_step(shard, attention=attention, partial_dtype=partial_dtype)
    return out


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    return launch(_rank, 2, start_method="fork", **LIMITS)


def test_every_rank_runs_with_multicast_off(ranks):
    for r in ranks:
        assert r["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                            "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][1] == "reference"])
def test_reduced_output_equals_the_whole_layer(ranks, name):
    full = _layer(name)
    ref = reference_output(full)
    for r in ranks:
        assert r[name].shape == (full.batch, full.hidden)
        assert (r[name] - ref).abs().max().item() <= FP32_SUM_TOL
    # Both ranks hold the same sum, bit for bit (an all-reduce, not a reduce to one rank).
    assert torch.equal(ranks[0][name], ranks[1][name])


def test_the_triton_kernel_under_the_interpreter_reduces_to_the_whole_layer(ranks):
    name = "kernel bf16, KV heads split"
    full = _layer(name)
    ref = reference_output(full)
    # Bound, by the triangle inequality: each attention value is within the table's bf16 atol of
    # the float32 one, and w_o spreads that over a row (its L1 norm); then three bf16 roundings of
    # values of the output's size (each rank's partial, and the sum), 2^-8 relative each.
    attention_atol = tolerance("paged_decode", "bf16").atol
    bound = attention_atol * full.w_o.float().abs().sum(dim=1).max().item() + 3 * 2**-8 * ref.abs().max().item()
    out = ranks[0][name]
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    err = (out.float() - ref).abs().max().item()
    assert err <= bound, f"max abs error {err:.3e} > {bound:.3e}"
    # The bound is tight enough to catch a wrong shard: one rank's partial alone misses by far more.
    alone = local_partial(shard_layer(full, tp=2, rank=0), attention="reference", partial_dtype=torch.float32)
    assert (alone - ref).abs().max().item() > 2 * bound
    assert torch.equal(ranks[0][name], ranks[1][name])


def test_shards_partials_sum_to_the_whole_layer_in_one_process():
    full = _layer("reference, KV head replicated")
    parts = [local_partial(shard_layer(full, tp=tp_rank[0], rank=tp_rank[1]), attention="reference",
                           partial_dtype=torch.float32) for tp_rank in ((4, 0), (4, 1), (4, 2), (4, 3))]
    assert (sum(parts) - reference_output(full)).abs().max().item() <= FP32_SUM_TOL
    # TP 1 needs no collective: the step is the local product.
    whole = tp_decode_step(full, attention="reference", partial_dtype=torch.float32)
    assert (whole - reference_output(full)).abs().max().item() <= FP32_SUM_TOL


def test_which_heads_each_rank_holds():
    # Llama-3-70B (64 query, 8 KV heads) at TP 8: one KV head and its 8 query heads a rank.
    assert kv_heads_of_rank(64, 8, tp=8, rank=3) == range(3, 4)
    assert q_heads_of_rank(64, 8, tp=8, rank=3) == range(24, 32)
    # At TP 16 each KV head is held by 2 ranks: rank 5 computes query heads 20-23, all of group 2.
    assert kv_heads_of_rank(64, 8, tp=16, rank=5) == range(2, 3)
    assert q_heads_of_rank(64, 8, tp=16, rank=5) == range(20, 24) and 20 // 8 == 23 // 8 == 2
    assert kv_heads_of_rank(64, 8, tp=2, rank=1) == range(4, 8)


@pytest.mark.parametrize("kwargs,field", [
    (dict(tp=3, rank=0), "tp=3 must divide"),
    (dict(tp=2, rank=2), "rank must be in 0..1"),
    (dict(tp=0, rank=0), "tp must be"),
])
def test_bad_tp_or_rank_is_refused_with_the_field_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        q_heads_of_rank(64, 8, **kwargs)


def test_kv_heads_that_neither_divide_nor_replicate_are_refused():
    with pytest.raises(ValueError, match="multiple of them"):
        kv_heads_of_rank(24, 8, tp=12, rank=0)


def test_allreduce_message_is_batch_by_hidden_in_bf16():
    # Llama-3-70B's hidden size 8,192 at batch 128: 128 x 8,192 x 2 bytes = 2 MiB.
    assert allreduce_bytes(128, 8192) == 2_097_152 == 2 * 2**20
