"""GPU catalogue: memory as the vendor states it (decimal GB, 10**9 bytes), memory bandwidth
(TB/s, 10**12 B/s) and dense BF16 tensor throughput (TFLOP/s, without 2:4 sparsity), each
from the vendor's datasheet or product page (``source``).

Memory stays in vendor GB here; :mod:`units` converts. A device whose memory is shared
with the CPU (Jetson) is flagged: its "HBM" also holds the operating system and everything else.

What an engine sees is not the vendor's figure: ``nvidia-smi`` reports a total in MiB
(``driver_total_mib``; H200: 143,771 MiB for a "141 GB" part) and ``cudaMemGetInfo`` — the
total vLLM multiplies by ``gpu_memory_utilization`` — reports less again (``cuda_total_bytes``). Both are kept per GPU
with where each came from; ``None`` where no measurement is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from inputs.bounds import Bound
from inputs.errors import InputError
from units import GB, MiB, TB

# Upper bound for a custom entry: 100 TB of memory on one device rejects typos (MB entered as GB).
MAX_CUSTOM_MEMORY_GB = 100_000
# A custom device's figures, checked at every boundary (widget, URL, CLI option, library call).
CUSTOM_MEMORY_GB = Bound(field="gpu_memory_gb", low=0.001, high=MAX_CUSTOM_MEMORY_GB, unit="GB")
CUSTOM_BANDWIDTH_TBS = Bound(field="gpu_bandwidth_tbs", low=0.001, high=10_000, unit="TB/s")
CUSTOM_BF16_TFLOPS = Bound(field="gpu_bf16_tflops", low=0.001, high=1_000_000, unit="TFLOP/s")


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator. ``memory_gb`` in vendor GB (10**9 B), ``bandwidth_tbs`` in TB/s."""

    id: str
    name: str
    memory_gb: float
    bandwidth_tbs: float
    bf16_tflops: float  # dense tensor-core BF16 (FP16 where no BF16 figure), no sparsity
    source: str
    shared_memory: bool = False  # memory shared with the CPU (unified memory)
    note: str = ""
    driver_total_mib: int | None = None  # nvidia-smi's memory.total
    cuda_total_bytes: int | None = None  # cudaMemGetInfo's total (torch.cuda.mem_get_info()[1])
    driver_source: str = ""  # where the two driver-side figures come from

    @property
    def engine_total_bytes(self) -> int:
        """Total memory as an engine sees it: ``cudaMemGetInfo``'s total when known, else
        ``nvidia-smi``'s, else the vendor figure (:attr:`engine_total_measured` says which)."""
        if self.cuda_total_bytes is not None:
            return self.cuda_total_bytes
        if self.driver_total_mib is not None:
            return self.driver_total_mib * MiB
        return self.memory_bytes

    @property
    def engine_total_measured(self) -> bool:
        """Whether :attr:`engine_total_bytes` is a driver measurement (not the vendor's GB)."""
        return self.cuda_total_bytes is not None or self.driver_total_mib is not None

    @property
    def memory_bytes(self) -> int:
        """Memory in bytes (vendor GB × 10**9)."""
        return round(self.memory_gb * GB)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_tbs * TB

    @property
    def label(self) -> str:
        return f"{self.name} ({self.memory_gb:g} GB)"


_CATALOGUE: tuple[GPU, ...] = (
    GPU(id="h100-sxm", name="H100 SXM", memory_gb=80, bandwidth_tbs=3.35, bf16_tflops=989,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,979 TFLOPS BF16 with sparsity)",
        driver_total_mib=81_559, cuda_total_bytes=85_061_827_297,  # 79.22 GiB
        driver_source="nvidia-smi memory.total 81,559 MiB on 80 GB H100s; CUDA total 79.22 GiB as vLLM logs "
                      "it (total_gpu_memory, rounded to 0.01 GiB) in "
                      "https://github.com/vllm-project/vllm/pull/10511"),
    GPU(id="h100-pcie", name="H100 PCIe", memory_gb=80, bandwidth_tbs=2.0, bf16_tflops=756,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,513 TFLOPS BF16 with sparsity)"),
    GPU(id="h100-nvl", name="H100 NVL", memory_gb=94, bandwidth_tbs=3.9, bf16_tflops=835,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,671 TFLOPS BF16 with sparsity)"),
    GPU(id="h200", name="H200 SXM", memory_gb=141, bandwidth_tbs=4.8, bf16_tflops=989,
        source="https://www.nvidia.com/en-us/data-center/h200/ (datasheet: 1,979 TFLOPS BF16 with sparsity)",
        driver_total_mib=143_771, cuda_total_bytes=150_109_880_320,
        driver_source="measured on an H200 (driver 580.159.04): nvidia-smi memory.total 143,771 MiB; "
                      "torch.cuda.mem_get_info() total 150,109,880,320 B = 139.80 GiB"),
    GPU(id="a100-40gb", name="A100 40GB SXM", memory_gb=40, bandwidth_tbs=1.555, bf16_tflops=312,
        source="https://www.nvidia.com/en-us/data-center/a100/ (datasheet)"),
    GPU(id="a100-80gb", name="A100 80GB SXM", memory_gb=80, bandwidth_tbs=2.039, bf16_tflops=312,
        source="https://www.nvidia.com/en-us/data-center/a100/ (datasheet)"),
    GPU(id="l40s", name="L40S", memory_gb=48, bandwidth_tbs=0.864, bf16_tflops=362,
        source="https://www.nvidia.com/en-us/data-center/l40s/ (datasheet: 733 TFLOPS BF16 with sparsity)"),
    GPU(id="l4", name="L4", memory_gb=24, bandwidth_tbs=0.3, bf16_tflops=121,
        source="https://www.nvidia.com/en-us/data-center/l4/ (datasheet: 242 TFLOPS BF16 with sparsity)"),
    GPU(id="rtx-4090", name="GeForce RTX 4090", memory_gb=24, bandwidth_tbs=1.008, bf16_tflops=165,
        source="NVIDIA Ada Lovelace architecture whitepaper (165.2 TFLOPS BF16, FP32 accumulate, dense)"),
    GPU(id="b200", name="B200", memory_gb=180, bandwidth_tbs=8.0, bf16_tflops=2250,
        source="https://www.nvidia.com/en-us/data-center/dgx-b200/ (1,440 GB and 64 TB/s over 8 GPUs; "
               "HGX B200: 4.5 PFLOPS BF16 with sparsity per GPU)",
        note="shipping HGX/DGX B200 parts expose 180 GB; the announced figure was 192 GB"),
    GPU(id="mi300x", name="AMD Instinct MI300X", memory_gb=192, bandwidth_tbs=5.3, bf16_tflops=1307,
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (1,307.4 TFLOPS BF16 dense)"),
    GPU(id="jetson-agx-orin-64gb", name="Jetson AGX Orin 64GB", memory_gb=64, bandwidth_tbs=0.2048,
        bf16_tflops=42.5, shared_memory=True,
        source="https://www.nvidia.com/en-us/autonomous-machines/embedded-systems/jetson-orin/ (64 GB LPDDR5, "
               "204.8 GB/s; 275 TOPS INT8 sparse in all, 170 from the GPU)",
        note="memory shared with the CPU, OS and perception stack; BF16 rate derived as half the GPU's "
             "dense INT8 rate (170 sparse TOPS / 2 / 2)"),
)

GPU_IDS: tuple[str, ...] = tuple(g.id for g in _CATALOGUE)
DEFAULT_GPU = "h100-sxm"


def gpus() -> tuple[GPU, ...]:
    """The catalogue, in display order."""
    return _CATALOGUE


def get_gpu(gpu_id: str) -> GPU:
    """The catalogue entry with this id (case-insensitive); :class:`InputError` on ``"gpu"`` otherwise."""
    key = gpu_id.lower() if isinstance(gpu_id, str) else gpu_id
    for gpu in _CATALOGUE:
        if gpu.id == key:
            return gpu
    raise InputError("gpu", f"unknown GPU {gpu_id!r}; choose one of {', '.join(GPU_IDS)}")


def custom_gpu(
    memory_gb: float,
    *,
    bandwidth_tbs: float = 1.0,
    bf16_tflops: float = 100.0,
    name: str = "Custom GPU",
    shared_memory: bool = False,
) -> GPU:
    """A user-defined device; memory in vendor GB, bandwidth in TB/s, dense BF16 TFLOP/s."""
    memory_gb = CUSTOM_MEMORY_GB.check(memory_gb)
    bandwidth_tbs = CUSTOM_BANDWIDTH_TBS.check(bandwidth_tbs)
    bf16_tflops = CUSTOM_BF16_TFLOPS.check(bf16_tflops)
    return GPU(
        id="custom", name=name, memory_gb=float(memory_gb), bandwidth_tbs=float(bandwidth_tbs),
        bf16_tflops=float(bf16_tflops), source="entered by the user", shared_memory=shared_memory,
    )
