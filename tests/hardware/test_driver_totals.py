"""Driver-reported totals in the GPU catalogue: each figure sits where the physics of binary-sized memory
chips puts it, names where it came from, and every GPU without one says so.

Two units meet here. Vendors sell chips of 2**30-byte GiB but print "GB" (10**9 B), so an honest driver total
lies *above* the vendor figure × 10**9 and *at most* the vendor figure × 2**30 (the chips hold no more). Only
in the binary unit is the driver total "below the vendor GB": 81,559 MiB is 85.52e9 B (above 80e9) but
79.65 GiB (below 80 GiB).
"""

from __future__ import annotations

import re

import pytest

from hardware.gpus import DEFAULT_GPU, GPU_IDS, NO_DRIVER_TOTAL_NOTE, get_gpu, gpus
from units import GB, GiB, MiB

MEASURED = [g for g in gpus() if g.driver_total_mib is not None]
WITH_CUDA_TOTAL = [g for g in gpus() if g.cuda_total_bytes is not None]
UNMEASURED = [g for g in gpus() if g.driver_total_mib is None and g.cuda_total_bytes is None]

# NVIDIA HBM parts whose driver reserves part of the HBM for itself (ECC/row-remap tables, firmware, and on
# B200 the stacks hold 192 GB of which 180 are exposed): nvidia-smi reports strictly less than the binary
# capacity. The A100s are the exception: their HBM2e shows in full (81,920 MiB = 80 GiB, 40,960 MiB = 40 GiB),
# the reservation appearing only in the CUDA total.
HBM_BELOW_BINARY = ("h100-sxm", "h100-nvl", "h200", "b200", "h20", "gh200-96gb")
HBM_SHOWN_IN_FULL = ("a100-80gb", "a100-40gb")

ORIGINAL_IDS = ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "a100-40gb", "a100-80gb", "l40s", "l4", "rtx-4090",
                "b200", "mi300x", "jetson-agx-orin-64gb")
ADDED_IDS = ("a10", "a10g", "rtx-a5000", "rtx-a6000", "rtx-5090", "l40", "h20", "gh200-96gb", "gh200-144gb",
             "mi325x", "rtx-3090")


def _ids(group):
    return [g.id for g in group]


def _figure_in(text: str, value: int) -> bool:
    """Whether ``value`` is written in ``text``, plain (81559) or with thousands commas (81,559)."""
    return str(value) in text or f"{value:,}" in text


@pytest.mark.parametrize("gpu", MEASURED, ids=_ids(MEASURED))
def test_driver_total_lies_between_the_vendor_figure_in_decimal_and_binary_bytes(gpu):
    driver_bytes = gpu.driver_total_mib * MiB
    assert driver_bytes > gpu.memory_gb * GB, f"{gpu.id}: below the vendor's decimal GB — MiB entered as MB?"
    assert driver_bytes <= gpu.memory_gb * GiB, f"{gpu.id}: more than the chips hold"


def test_nvidia_hbm_parts_report_less_than_their_binary_capacity():
    for gpu_id in HBM_BELOW_BINARY:
        g = get_gpu(gpu_id)
        assert g.driver_total_mib is not None, gpu_id
        assert g.driver_total_mib * MiB < g.memory_gb * GiB, gpu_id
    for gpu_id in HBM_SHOWN_IN_FULL:
        g = get_gpu(gpu_id)
        assert g.driver_total_mib * MiB == g.memory_gb * GiB, gpu_id
        if g.cuda_total_bytes is not None:  # the reservation is there, one layer down
            assert g.cuda_total_bytes < g.memory_gb * GiB, gpu_id


@pytest.mark.parametrize("gpu", WITH_CUDA_TOTAL, ids=_ids(WITH_CUDA_TOTAL))
def test_cuda_total_is_the_smi_total_less_a_small_reservation(gpu):
    assert gpu.driver_total_mib is not None, f"{gpu.id}: a CUDA total without the nvidia-smi total"
    smi_bytes = gpu.driver_total_mib * MiB
    assert gpu.cuda_total_bytes < smi_bytes
    assert gpu.cuda_total_bytes > 0.95 * smi_bytes  # reservations seen: 0.4 % (H200) to 2.4 % (L4)
    assert gpu.cuda_total_bytes < gpu.memory_gb * GiB
    assert gpu.engine_total_bytes == gpu.cuda_total_bytes and gpu.engine_total_measured


@pytest.mark.parametrize("gpu", MEASURED, ids=_ids(MEASURED))
def test_driver_source_names_a_url_or_a_measurement_and_quotes_the_figures(gpu):
    source = gpu.driver_source
    assert re.search(r"https://\S+", source) or "measured" in source, gpu.id
    assert _figure_in(source, gpu.driver_total_mib) or _figure_in(source, gpu.driver_total_mib * MiB), gpu.id
    if gpu.cuda_total_bytes is not None:
        # exact bytes, or vLLM's two-decimal GiB log line (stored rounded, as the H100 entry says)
        assert (_figure_in(source, gpu.cuda_total_bytes)
                or f"{gpu.cuda_total_bytes / GiB:.2f} GiB" in source), gpu.id
    assert NO_DRIVER_TOTAL_NOTE not in gpu.note, gpu.id


@pytest.mark.parametrize("gpu", UNMEASURED, ids=_ids(UNMEASURED))
def test_gpus_without_a_driver_total_say_so(gpu):
    assert NO_DRIVER_TOTAL_NOTE in gpu.note
    assert gpu.driver_source == ""
    assert not gpu.engine_total_measured and gpu.engine_total_bytes == gpu.memory_bytes


def test_every_gpu_is_either_measured_or_says_it_is_not():
    assert len(MEASURED) + len(UNMEASURED) == len(GPU_IDS)
    assert set(_ids(UNMEASURED)) == {"h100-pcie", "jetson-agx-orin-64gb", "l40", "gh200-144gb", "mi325x"}


def test_hand_checks():
    # "80 GB" H100: 81,559 MiB = 85,520,809,984 B — 85.52 GB, above 80e9, yet 79.65 GiB, below 80 GiB;
    # vLLM budgets from the CUDA total, 79.22 GiB.
    h100 = get_gpu("h100-sxm")
    assert h100.driver_total_mib * MiB == 85_520_809_984
    assert 85_520_809_984 > 80 * GB and 85_520_809_984 < 80 * GiB
    assert round(h100.driver_total_mib * MiB / GiB, 2) == 79.65
    assert round(h100.engine_total_bytes / GiB, 2) == 79.22
    # MI300X: rocm-smi's 206,141,652,992 B is 196,592 MiB exactly = 191.98 GiB, above 192e9.
    mi300x = get_gpu("mi300x")
    assert mi300x.driver_total_mib * MiB == 206_141_652_992 == mi300x.engine_total_bytes
    assert round(206_141_652_992 / GiB, 2) == 191.98 and 206_141_652_992 > 192 * GB
    # RTX 3090 (GDDR6X, no ECC): nvidia-smi shows all 24 GiB; CUDA keeps 23.59 GiB.
    rtx3090 = get_gpu("rtx-3090")
    assert rtx3090.driver_total_mib == 24 * 1024
    assert round(rtx3090.engine_total_bytes / GiB, 2) == 23.59
    # GH200 96 GB: FB total 97,871 MiB less 1,103 MiB reserved = 96,768 MiB, the deviceQuery total.
    gh200 = get_gpu("gh200-96gb")
    assert gh200.cuda_total_bytes == (97_871 - 1_103) * MiB
    # A10 with ECC on: 23,028 MiB, NVML's 24,146,608,128 B.
    assert get_gpu("a10").driver_total_mib * MiB == 24_146_608_128


def test_catalogue_order_ids_and_default():
    assert GPU_IDS[:len(ORIGINAL_IDS)] == ORIGINAL_IDS
    assert GPU_IDS[len(ORIGINAL_IDS):] == ADDED_IDS
    assert len(set(GPU_IDS)) == len(GPU_IDS)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", gpu_id) for gpu_id in GPU_IDS)
    assert DEFAULT_GPU == "h100-sxm"
    for gpu_id in ADDED_IDS:
        g = get_gpu(gpu_id)
        assert g.source and g.memory_gb > 0 and g.bandwidth_tbs > 0 and g.bf16_tflops > 0
