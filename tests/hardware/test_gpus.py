"""The GPU catalogue: vendor figures as stated, custom devices checked, and the package's place
below the sizer (it imports only the input and unit helpers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hardware.gpus import GPU_IDS, custom_gpu, get_gpu
from inputs.errors import InputError
from units import GB

HARDWARE = Path(__file__).resolve().parents[2] / "hardware"


def test_gpu_catalogue():
    # 12 original entries, then 11 added with their driver-reported totals (A10 … RTX 3090).
    assert len(GPU_IDS) == 23 and GPU_IDS[:2] == ("h100-sxm", "h100-pcie")
    assert get_gpu("h100-sxm").memory_bytes == 80 * GB and get_gpu("h100-sxm").bandwidth_tbs == 3.35
    assert get_gpu("h200").memory_bytes == 141 * GB and get_gpu("h200").bandwidth_tbs == 4.8
    assert get_gpu("jetson-agx-orin-64gb").shared_memory
    assert not get_gpu("mi300x").shared_memory and get_gpu("mi300x").memory_gb == 192
    for gpu_id in GPU_IDS:
        g = get_gpu(gpu_id)
        assert g.source and g.memory_gb > 0 and g.bandwidth_tbs > 0 and g.bf16_tflops > 0
    assert custom_gpu(64).memory_bytes == 64 * GB
    with pytest.raises(InputError) as info:
        custom_gpu(-1)
    assert info.value.field == "gpu_memory_gb"


def test_lookup_is_case_insensitive_and_names_the_field():
    assert get_gpu("H200") is get_gpu("h200")
    with pytest.raises(InputError) as info:
        get_gpu("tpu-v9")
    assert info.value.field == "gpu" and "h100-sxm" in info.value.message


@pytest.mark.parametrize(("change", "field"), [
    ({"memory_gb": float("nan")}, "gpu_memory_gb"), ({"memory_gb": float("inf")}, "gpu_memory_gb"),
    ({"memory_gb": 0}, "gpu_memory_gb"), ({"memory_gb": 10**6}, "gpu_memory_gb"), ({"memory_gb": True}, "gpu_memory_gb"),
    ({"bandwidth_tbs": -1.0}, "gpu_bandwidth_tbs"), ({"bf16_tflops": float("nan")}, "gpu_bf16_tflops"),
])
def test_custom_gpu_refuses_unusable_figures(change, field):
    args = {"memory_gb": 80.0, **change}
    with pytest.raises(InputError) as info:
        custom_gpu(args.pop("memory_gb"), **args)
    assert info.value.field == field


def test_hardware_imports_only_inputs_and_units():
    allowed = {"inputs", "units", "__future__", "dataclasses", "math", "enum", "typing", "collections", "functools"}
    for path in HARDWARE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
