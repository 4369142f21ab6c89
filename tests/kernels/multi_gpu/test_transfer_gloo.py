"""One request's KV blocks from rank 0 to rank 1 over gloo (CPU): every layout, KV dtype, block
size and mode, received bit for bit; the bytes moved against the planner's transfer model and
hand counts."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
import torch

from kernels.multi_gpu.bench import TRANSFER_MODELS
from kernels.multi_gpu.env import launch
from kernels.multi_gpu.transfer import (
    MODES, TransferCase, build_request, copy_request, empty_request, recv_request, request_bytes, send_request,
)
from planner.cluster.transfer import kv_transfer
from sizing.catalogue import get_entry
from sizing.models import ModelShape
from sizing.precisions import get_precision

PROMPT = 100  # 6 full blocks of 16 and 4 tokens (2 blocks of 64, the last holding 36): last blocks part-filled
WINDOW = 40  # the last 40 tokens (60..99) lie in blocks 3..6 of 16 and block 0..1 of 64
# Toy geometries of each layout: 2 layers, 2 KV heads of 16 (an MLA latent of 16 + 8 values).
GEOMETRY = {"full": dict(n_kv_heads=2, head_dim=16), "sliding": dict(n_kv_heads=2, head_dim=16, window=WINDOW),
            "mla": dict(n_kv_heads=1, head_dim=24)}
CASES = [TransferCase(layout=layout, layers=2, prompt_tokens=PROMPT, block_size=block, kv_dtype=dtype,
                      **GEOMETRY[layout])
         for layout, dtype, block in itertools.product(GEOMETRY, ("bf16", "fp8"), (16, 64))]
SENDER_SEED, RECEIVER_SEED = 7, 9  # seeds whose pools scatter every request differently
# A collective that waits 20 s is a hang at these sizes (the launch takes ~1 s): fail, don't stall.
LIMITS = dict(timeout=timedelta(seconds=20), deadline_s=45.0)
pytestmark = pytest.mark.timeout(60)


def _rank(rank: int, world: int) -> list[dict]:
    """Each case and mode: what this rank sent or received, as bytes, and its counts."""
    out = []
    for case, mode in itertools.product(CASES, MODES):
        if rank == 0:
            req = build_request(case, generator=torch.Generator().manual_seed(SENDER_SEED))
            moved = send_request(req, mode=mode, dst=1)
            untouched = True
        else:
            req = empty_request(case, generator=torch.Generator().manual_seed(RECEIVER_SEED))
            moved = recv_request(req, mode=mode, src=0)
            others = torch.ones(req.regions[0].shape[0], dtype=torch.bool)
            others[req.block_ids] = False
            untouched = all(not r.view(torch.uint8)[others].any() for r in req.regions)
        out.append(dict(moved=moved, blocks=request_bytes(req), untouched=untouched, ids=req.block_ids))
    return out


@pytest.fixture(scope="module")
def ranks() -> list[list[dict]]:
    return launch(_rank, 2, start_method="fork", **LIMITS)


@pytest.mark.parametrize("i", range(len(CASES) * len(MODES)),
                         ids=[f"{c.label} {m}" for c, m in itertools.product(CASES, MODES)])
def test_blocks_arrive_bit_for_bit(ranks, i):
    case = CASES[i // len(MODES)]
    sent, got = ranks[0][i], ranks[1][i]
    assert sent["moved"] == got["moved"] == case.wire_bytes
    assert torch.equal(sent["blocks"], got["blocks"])  # bytes: NaN slots and FP8 codes included
    # The receiver wrote nothing outside the request's blocks.
    assert got["untouched"]
    # The sender's blocks are the ones its seed makes (the parent rebuilds them independently).
    rebuilt = build_request(case, generator=torch.Generator().manual_seed(SENDER_SEED))
    assert torch.equal(request_bytes(rebuilt), got["blocks"])


def test_the_receiver_puts_the_blocks_at_its_own_ids(ranks):
    # The two pools are scattered by different seeds, so every request lands at other block ids
    # than it left (a copy that kept the sender's ids would still compare equal above).
    assert all(not torch.equal(s["ids"], g["ids"]) for s, g in zip(ranks[0], ranks[1]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_a_peer_copy_lands_the_same_blocks_as_send_and_recv(ranks, case, mode):
    # One process copies into the receiver's pools (same seed, same block ids): the blocks equal
    # what rank 1 received over gloo, and nothing else of the pools is written.
    src = build_request(case, generator=torch.Generator().manual_seed(SENDER_SEED))
    dst = empty_request(case, generator=torch.Generator().manual_seed(RECEIVER_SEED))
    assert copy_request(src, dst, mode=mode) == case.wire_bytes
    received = ranks[1][CASES.index(case) * len(MODES) + MODES.index(mode)]
    assert torch.equal(dst.block_ids, received["ids"]) and torch.equal(request_bytes(dst), received["blocks"])
    others = torch.ones(dst.regions[0].shape[0], dtype=torch.bool)
    others[dst.block_ids] = False
    assert all(not r.view(torch.uint8)[others].any() for r in dst.regions)


def test_a_peer_copy_needs_one_case_on_both_sides():
    a, b = CASES[0], CASES[1]
    with pytest.raises(ValueError, match="one case on both sides"):
        copy_request(build_request(a, generator=torch.Generator().manual_seed(1)),
                     empty_request(b, generator=torch.Generator().manual_seed(2)), mode="whole")


def test_the_last_blocks_unwritten_slots_travel_as_they_are(ranks):
    i = CASES.index(next(c for c in CASES if c.layout == "full" and c.kv_dtype == "bf16" and c.block_size == 16)) * 2
    blocks = ranks[1][i]["blocks"].view(torch.bfloat16)  # [regions, blocks, heads, 16, 16]
    assert torch.isnan(blocks[:, -1, :, PROMPT % 16:]).all()  # slots 4..15 of block 6: never written
    assert not torch.isnan(blocks[:, :, :, :PROMPT % 16]).any()


def test_blocks_and_messages_by_hand():
    full16, = [c for c in CASES if c.layout == "full" and c.kv_dtype == "bf16" and c.block_size == 16]
    # 7 blocks x 2 layers x (K, V) x 2 heads x 16 slots x 16 values x 2 bytes.
    assert full16.blocks == 7 and full16.wire_bytes == 7 * 2 * 2 * 2 * 16 * 16 * 2 == 28_672
    slide16, = [c for c in CASES if c.layout == "sliding" and c.kv_dtype == "bf16" and c.block_size == 16]
    # Tokens 60..99 sit in blocks 3 (48-63) .. 6: four blocks travel, blocks 0-2 stay.
    assert (slide16.first_block, slide16.blocks) == (3, 4)
    mla64, = [c for c in CASES if c.layout == "mla" and c.kv_dtype == "fp8" and c.block_size == 64]
    # 2 blocks x 2 layers x one latent of 24 values x 64 slots x 1 byte.
    assert mla64.wire_bytes == 2 * 2 * 24 * 64 == 6_144
    assert full16.messages("whole") == 1 and full16.messages("per_layer") == 2


def _toy_shape(layout: str) -> ModelShape:
    if layout == "mla":
        return ModelShape(layers=2, q_heads=2, kv_heads=1, head_dim=24, params=1, kv_lora_rank=16, qk_rope_head_dim=8)
    return ModelShape(layers=2, q_heads=4, kv_heads=2, head_dim=16, params=1,
                      sliding_window=WINDOW if layout == "sliding" else None)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_bytes_moved_are_what_the_planner_says_a_connector_moves(case):
    plan = kv_transfer(_toy_shape(case.layout), get_precision(case.kv_dtype), prompt_tokens=case.prompt_tokens,
                       block_size=case.block_size)
    assert case.wire_bytes == plan.wire_bytes_per_decode_rank
    assert case.blocks == plan.kinds[0].blocks


@pytest.mark.parametrize("model", TRANSFER_MODELS, ids=lambda m: m.model)
@pytest.mark.parametrize("prompt", [1024, 8200, 32768])
@pytest.mark.parametrize("block", [16, 64])
def test_the_benchs_requests_match_the_catalogue_and_the_planner(model, prompt, block):
    shape = get_entry(model.model).shape  # the published config.json
    mla = shape.kv_lora_rank > 0
    heads, dim = (1, shape.kv_lora_rank + shape.qk_rope_head_dim) if mla else (shape.kv_heads, shape.head_dim)
    assert (model.layers, model.n_kv_heads, model.head_dim, model.window) == (shape.layers, heads, dim,
                                                                              shape.sliding_window)
    for dtype in ("bf16", "fp8"):
        case = TransferCase(layout=model.layout, layers=model.layers, n_kv_heads=model.n_kv_heads,
                            head_dim=model.head_dim, prompt_tokens=prompt, block_size=block, kv_dtype=dtype,
                            window=model.window)
        plan = kv_transfer(shape, get_precision(dtype), prompt_tokens=prompt, block_size=block)
        assert case.wire_bytes == plan.wire_bytes_per_decode_rank


def test_full_size_requests_by_hand():
    llama, mistral, deepseek = TRANSFER_MODELS
    kw = dict(prompt_tokens=8192, block_size=16, kv_dtype="bf16")
    full = TransferCase(layout="full", layers=32, n_kv_heads=8, head_dim=128, **kw)
    # Llama-3.1-8B, 8K prompt: 32 layers x (K, V) x 512 blocks x 8 heads x 16 x 128 x 2 B = 1 GiB.
    assert full.wire_bytes == 32 * 2 * 512 * 8 * 16 * 128 * 2 == 2**30
    # Mistral-7B, window 4096: keys 4096..8191, blocks 256..511 travel: half of it.
    slide = TransferCase(layout="sliding", layers=32, n_kv_heads=8, head_dim=128, window=4096, **kw)
    assert (slide.first_block, slide.blocks, slide.wire_bytes) == (256, 256, 2**29)
    # At 8,200 tokens the window starts at 4,104, inside block 256: 257 blocks (513 - 256).
    off = TransferCase(layout="sliding", layers=32, n_kv_heads=8, head_dim=128, window=4096,
                       prompt_tokens=8200, block_size=16)
    assert (off.first_block, off.blocks) == (256, 257)
    # DeepSeek-V3 FP8: 61 layers x 512 blocks x 16 x 576 values x 1 B.
    mla = TransferCase(layout="mla", layers=61, n_kv_heads=1, head_dim=576, prompt_tokens=8192, block_size=16,
                       kv_dtype="fp8")
    assert mla.wire_bytes == 61 * 512 * 16 * 576 == 287_834_112
    assert (llama.layout, mistral.layout, deepseek.layout) == ("full", "sliding", "mla")


@pytest.mark.parametrize("kwargs,message", [
    (dict(layout="paged"), "layout must be one of"),
    (dict(kv_dtype="int4"), "kv_dtype must be one of"),
    (dict(prompt_tokens=0), "prompt_tokens must be a whole number from 1"),
    (dict(block_size=True), "block_size must be a whole number"),
    (dict(layers=2000), "layers must be a whole number from 1 to 1024"),
    (dict(window=16), "window is given for a sliding layout"),
    (dict(layout="mla", n_kv_heads=2), "n_kv_heads must be 1"),
])
def test_bad_cases_are_refused_with_the_field_named(kwargs, message):
    base = dict(layout="full", layers=2, n_kv_heads=2, head_dim=16, prompt_tokens=100, block_size=16)
    with pytest.raises(ValueError, match=message):
        TransferCase(**{**base, **kwargs})


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        CASES[0].messages("rdma")
