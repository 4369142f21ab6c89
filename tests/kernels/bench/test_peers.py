"""The CUDA libraries' paged kernels as optional contenders: named in the records, absent ones say so.

Timing them needs the GPU and the libraries (the GPU-marked harness tests); what runs here is
the part every machine has: the contender table, the names the records accept, and the record
an uninstalled peer leaves.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from kernels.bench import peers
from kernels.bench.contenders import DECODE
from kernels.bench.records import DECODE_CONTENDERS, FP8_PAGED_PEERS, PAGED_PEERS, DecodeShape, decode_kv_bytes
from kernels.bench.sweeps import SweepConfig, _bench_decode_contender
from ui.kernel_tables import CONTENDER_NAMES

SHAPE = DecodeShape(batch=8, context=32768, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16)


def test_the_contender_table_and_the_record_names_agree_in_order():
    assert tuple(DECODE) == DECODE_CONTENDERS
    for name in (*PAGED_PEERS, *FP8_PAGED_PEERS):
        assert DECODE[name].needs in (peers.CUDNN_PACKAGE, peers.FLASHINFER_PACKAGE)
        assert DECODE[name].layout.startswith("paged") and name in CONTENDER_NAMES
    # FP8 peers are credited with one byte per value, the 16-bit ones with two (as our FP8 kernel is).
    assert {DECODE[n].kv_bytes_per_value for n in FP8_PAGED_PEERS} == {1}
    assert {DECODE[n].kv_bytes_per_value for n in PAGED_PEERS} == {2}
    assert DECODE["flashinfer_tc_fp8"].work(SHAPE) == decode_kv_bytes(8, 32768, 8, 128, 1) == 2**29


def test_the_full_sweep_asks_for_every_peer_and_can_leave_them_out():
    assert SweepConfig().peers and not SweepConfig(peers=False).peers


@pytest.mark.parametrize("name", [*PAGED_PEERS, *FP8_PAGED_PEERS])
def test_a_peer_that_does_not_import_leaves_a_not_available_record(name):
    contender = DECODE[name]
    module = {peers.CUDNN_PACKAGE: "cudnn", peers.FLASHINFER_PACKAGE: "flashinfer"}[contender.needs]
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")  # CI installs neither
    m = _bench_decode_contender(contender, SimpleNamespace(shape=SHAPE), {})
    assert m.contender == name and m.status == "not_available" and m.median_ms is None
    assert contender.needs in m.note and "scripts/peer_wheels.sh" in m.note
    assert m.work == contender.work(SHAPE)


def test_flashinfer_page_counts_round_each_sequence_up_to_whole_pages():
    import torch

    lens = torch.tensor([1, 16, 17, 32768], dtype=torch.int32)
    assert peers._sequence_pages(lens, 16).tolist() == [1, 1, 2, 2048]
