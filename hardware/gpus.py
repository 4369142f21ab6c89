"""GPU catalogue: memory as the vendor states it (decimal GB, 10**9 bytes), memory bandwidth
(TB/s, 10**12 B/s) and dense BF16 tensor throughput (TFLOP/s, without 2:4 sparsity), each
from the vendor's datasheet or product page (``source``).

Memory stays in vendor GB here; :mod:`units` converts. A device whose memory is shared
with the CPU (Jetson) is flagged: its "HBM" also holds the operating system and everything else.

What an engine sees is not the vendor's figure: ``nvidia-smi`` reports a total in MiB
(``driver_total_mib``; H200: 143,771 MiB for a "141 GB" part) and ``cudaMemGetInfo`` — the
total vLLM multiplies by ``gpu_memory_utilization`` — reports less again (``cuda_total_bytes``). Both are kept per GPU
with where each came from (``driver_source``: a URL with the quoted line, or a measurement); ``None`` where no
measurement is known, and then ``note`` says so (:data:`NO_DRIVER_TOTAL_NOTE`).

Vendors' "GB" here are binary-sized chips sold in decimal units: every driver total is *above* the vendor figure
× 10**9 (81,559 MiB = 85.52e9 B for an "80 GB" H100) and at most the vendor figure × 2**30 (79.65 GiB < 80 GiB).
The CUDA total is the nvidia-smi total less the driver's reservation, and moves a little with the driver version.
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


# What a GPU without a driver-reported total says (the tests check every such entry carries it).
NO_DRIVER_TOTAL_NOTE = "no driver-reported total found; the engine uses the vendor figure, labelled"

# Captured nvidia-smi / deviceQuery outputs (real machines, replayed by the gls tool), one commit each.
_GLS = "https://github.com/thamada/gls/blob/"
_GLS_NOV14 = _GLS + "b09ef139265ffc7e3c78006346981de8e4d70499/gls/"
# "Total amount of global memory" in CUDA's deviceQuery is cudaDeviceProp.totalGlobalMem, the same number
# cudaMemGetInfo returns as its total (checked on the lent H200: cuDeviceTotalMem == cuMemGetInfo total ==
# torch.cuda.mem_get_info()[1] == 150,109,880,320 B). Both move a little with the driver version.
_DQ = "CUDA total from deviceQuery's 'Total amount of global memory' (= cudaMemGetInfo total)"

_CATALOGUE: tuple[GPU, ...] = (
    GPU(id="h100-sxm", name="H100 SXM", memory_gb=80, bandwidth_tbs=3.35, bf16_tflops=989,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,979 TFLOPS BF16 with sparsity)",
        driver_total_mib=81_559, cuda_total_bytes=85_061_827_297,  # 79.22 GiB
        driver_source="nvidia-smi memory.total 81,559 MiB: https://github.com/modal-labs/modal-client/pull/2797 "
                      "('H100: 81559MiB (85.52 GB)') and https://github.com/NVIDIA/nccl/issues/1264 "
                      "('NVIDIA H100 80GB HBM3 ... 0MiB /  81559MiB'); CUDA total 79.22 GiB as vLLM logs it "
                      "(total_gpu_memory, rounded to 0.01 GiB) in https://github.com/vllm-project/vllm/pull/10511 "
                      "and, on an 'H100-80G', https://github.com/vllm-project/vllm/pull/12126 ('total_gpu_memory "
                      "(79.22GiB)'); driver 565.57.01 gives 85,045,477,376 B (79.20 GiB): "
                      + _GLS_NOV14 + "H100SXMx8_deviceQuery.py"),
    GPU(id="h100-pcie", name="H100 PCIe", memory_gb=80, bandwidth_tbs=2.0, bf16_tflops=756,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,513 TFLOPS BF16 with sparsity)",
        note=NO_DRIVER_TOTAL_NOTE),
    GPU(id="h100-nvl", name="H100 NVL", memory_gb=94, bandwidth_tbs=3.9, bf16_tflops=835,
        source="https://www.nvidia.com/en-us/data-center/h100/ (datasheet: 1,671 TFLOPS BF16 with sparsity)",
        driver_total_mib=95_830, cuda_total_bytes=99_861_594_112,
        driver_source="nvidia-smi 'NVIDIA H100 NVL ... 0MiB / 95830MiB' (driver 535.183.01) in "
                      "https://github.com/NVIDIA/gpu-admin-tools/issues/4; " + _DQ + " '95235 MBytes "
                      "(99861594112 bytes)', driver 550.54.14: " + _GLS_NOV14 + "H100NVLx2_deviceQuery.py"),
    GPU(id="h200", name="H200 SXM", memory_gb=141, bandwidth_tbs=4.8, bf16_tflops=989,
        source="https://www.nvidia.com/en-us/data-center/h200/ (datasheet: 1,979 TFLOPS BF16 with sparsity)",
        driver_total_mib=143_771, cuda_total_bytes=150_109_880_320,
        driver_source="measured on an H200 (driver 580.159.04): nvidia-smi memory.total 143,771 MiB; "
                      "torch.cuda.mem_get_info() total 150,109,880,320 B = 139.80 GiB (= cuDeviceTotalMem); "
                      "driver 550.90.12 gives 150,021,734,400 B: " + _GLS
                      + "c0bed08d0e20bb1abccfee5aeedb80bc63b493a6/gls/H200_deviceQuery.py"),
    GPU(id="a100-40gb", name="A100 40GB SXM", memory_gb=40, bandwidth_tbs=1.555, bf16_tflops=312,
        source="https://www.nvidia.com/en-us/data-center/a100/ (datasheet)",
        driver_total_mib=40_960,
        driver_source="nvidia-smi memory.total 40,960 MiB: https://github.com/modal-labs/modal-client/pull/2797 "
                      "('A100 40GB: 40960MiB (42.94 GB)') and 'NVIDIA A100-SXM4-40GB ... 1MiB /  40960MiB' in "
                      "https://github.com/Slusheeking/nextgen/blob/5ec1ce91234999ca7e9a71d722b9b4d054e4baf5/"
                      "docs/SYSTEM_HARDWARE.md; no CUDA total found (the engine uses MiB x 2^20)"),
    GPU(id="a100-80gb", name="A100 80GB SXM", memory_gb=80, bandwidth_tbs=2.039, bf16_tflops=312,
        source="https://www.nvidia.com/en-us/data-center/a100/ (datasheet)",
        driver_total_mib=81_920, cuda_total_bytes=85_100_068_864,
        driver_source="nvidia-smi memory.total 81,920 MiB: https://github.com/modal-labs/modal-client/pull/2797 "
                      "('A100 80GB: 81920MiB (85.89 GB)'); " + _DQ + " 'NVIDIA A100-SXM4-80GB ... 81158 MBytes "
                      "(85100068864 bytes)', driver 555.42.02: " + _GLS_NOV14 + "A100SXMx4_deviceQuery.py"),
    GPU(id="l40s", name="L40S", memory_gb=48, bandwidth_tbs=0.864, bf16_tflops=362,
        source="https://www.nvidia.com/en-us/data-center/l40s/ (datasheet: 733 TFLOPS BF16 with sparsity)",
        driver_total_mib=46_068, cuda_total_bytes=47_803_596_800,
        driver_source="nvidia-smi 'NVIDIA L40S, 595.71.05, 46068 MiB' in "
                      "https://github.com/akash-network/provider-configs/pull/99 and, with 'ECC Mode Current : "
                      "Enabled', " + _GLS_NOV14 + "L40S_smi.py; " + _DQ + " '45589 MBytes (47803596800 bytes)', "
                      "driver 550.127.05: " + _GLS_NOV14 + "L40S_deviceQuery.py"),
    GPU(id="l4", name="L4", memory_gb=24, bandwidth_tbs=0.3, bf16_tflops=121,
        source="https://www.nvidia.com/en-us/data-center/l4/ (datasheet: 242 TFLOPS BF16 with sparsity)",
        driver_total_mib=23_034, cuda_total_bytes=23_570_219_008,
        driver_source="nvidia-smi memory.total 23,034 MiB: https://github.com/modal-labs/modal-client/pull/2797 "
                      "('L4: 23034MiB (24.15 GB)'); " + _DQ + " '22478 MBytes (23570219008 bytes)', "
                      "driver 550.90.07: " + _GLS_NOV14 + "L4_deviceQuery.py"),
    GPU(id="rtx-4090", name="GeForce RTX 4090", memory_gb=24, bandwidth_tbs=1.008, bf16_tflops=165,
        source="NVIDIA Ada Lovelace architecture whitepaper (165.2 TFLOPS BF16, FP32 accumulate, dense)",
        driver_total_mib=24_564, cuda_total_bytes=25_386_352_640,
        driver_source="nvidia-smi 'Memory-Usage ... 23859MiB / 24564MiB' on RTX 4090s in "
                      "https://github.com/vllm-project/vllm/issues/7553; " + _DQ + " '24210 MBytes "
                      "(25386352640 bytes)', driver 550.127.05: " + _GLS_NOV14 + "RTX4090_deviceQuery.py"),
    GPU(id="b200", name="B200", memory_gb=180, bandwidth_tbs=8.0, bf16_tflops=2250,
        source="https://www.nvidia.com/en-us/data-center/dgx-b200/ (1,440 GB and 64 TB/s over 8 GPUs; "
               "HGX B200: 4.5 PFLOPS BF16 with sparsity per GPU)",
        note="shipping HGX/DGX B200 parts expose 180 GB; the announced figure was 192 GB",
        driver_total_mib=183_359,
        driver_source="nvidia-smi 'NVIDIA B200 ... 166593MiB / 183359MiB' (driver 580.95.05) in "
                      "https://github.com/NVIDIA/TensorRT-LLM/issues/10278; no CUDA total in bytes found "
                      "(the engine uses MiB x 2^20)"),
    GPU(id="mi300x", name="AMD Instinct MI300X", memory_gb=192, bandwidth_tbs=5.3, bf16_tflops=1307,
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (1,307.4 TFLOPS BF16 dense)",
        driver_total_mib=196_592,  # 206,141,652,992 B / 2^20, exactly
        driver_source="rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 206141652992' (= 196,592 MiB) in "
                      "https://github.com/ROCm/legacy-rocm-build/issues/4750 (the whole device's total); HIP "
                      "deviceQuery '196592: Total Global Memory (MB)' in SPX mode: " + _GLS_NOV14
                      + "MI300X_deviceQuery.py"),
    GPU(id="jetson-agx-orin-64gb", name="Jetson AGX Orin 64GB", memory_gb=64, bandwidth_tbs=0.2048,
        bf16_tflops=42.5, shared_memory=True,
        source="https://www.nvidia.com/en-us/autonomous-machines/embedded-systems/jetson-orin/ (64 GB LPDDR5, "
               "204.8 GB/s; 275 TOPS INT8 sparse in all, 170 from the GPU)",
        note="memory shared with the CPU, OS and perception stack; BF16 rate derived as half the GPU's "
             "dense INT8 rate (170 sparse TOPS / 2 / 2); " + NO_DRIVER_TOTAL_NOTE),
    # Added: ids lower-case with dashes, appended after the original twelve.
    GPU(id="a10", name="A10", memory_gb=24, bandwidth_tbs=0.6, bf16_tflops=125,
        source="https://www.nvidia.com/en-us/data-center/products/a10-gpu/ (datasheet: 24 GB GDDR6, 600 GB/s, "
               "BF16 Tensor Core 125 | 250 TFLOPS with sparsity)",
        driver_total_mib=23_028, cuda_total_bytes=23_595_909_120,
        driver_source="nvidia-smi 'NVIDIA A10 ... 1MiB /  23028MiB' (ECC on), driver 550.90.12: " + _GLS
                      + "b99e2ecde923177a3f6635c678a7fd3796517cde/gls/A10_smi.py; NVML 'Total':24146608128 "
                      "(= 23,028 MiB) in https://github.com/mayooot/detect-gpu/issues/3; " + _DQ
                      + " '22503 MBytes (23595909120 bytes)': " + _GLS
                      + "b99e2ecde923177a3f6635c678a7fd3796517cde/gls/A10_deviceQuery.py"),
    GPU(id="a10g", name="A10G (AWS)", memory_gb=24, bandwidth_tbs=0.6, bf16_tflops=125,
        source="AWS-only part, no NVIDIA datasheet: 24 GB GDDR6 at 600 GB/s as "
               "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ states; the BF16 rate is "
               "the A10 datasheet's (125 TFLOPS dense), an upper bound (that page says the A10G has less tensor "
               "compute)",
        driver_total_mib=23_028,
        driver_source="nvidia-smi 'NVIDIA A10G ... 8722MiB / 23028MiB' (driver 535.247.01) in "
                      "https://github.com/NVIDIA/DCGM/issues/232; no CUDA total found (the engine uses MiB x 2^20)"),
    GPU(id="rtx-a5000", name="RTX A5000", memory_gb=24, bandwidth_tbs=0.768, bf16_tflops=111.1,
        source="https://www.nvidia.com/en-us/design-visualization/rtx-a5000/ (datasheet: 24 GB GDDR6 with ECC, "
               "768 GB/s, 222.2 TFLOPS tensor with sparsity; dense = half)",
        driver_total_mib=24_564,
        driver_source="'nvidia-smi: NVIDIA RTX A5000, 24564 MiB, 570.211.01, 0x223110DE' in "
                      "https://github.com/akash-network/provider-configs/pull/83; no CUDA total found (the engine "
                      "uses MiB x 2^20)"),
    GPU(id="rtx-a6000", name="RTX A6000", memory_gb=48, bandwidth_tbs=0.768, bf16_tflops=154.8,
        source="https://www.nvidia.com/en-us/design-visualization/rtx-a6000/ (datasheet: 48 GB GDDR6 with ECC, "
               "768 GB/s, 309.7 TFLOPS tensor with sparsity; dense = half)",
        note="the driver figures are with ECC enabled; with ECC off the card exposes more (no measurement found)",
        driver_total_mib=46_068, cuda_total_bytes=47_834_660_864,
        driver_source="nvidia-smi -q 'FB Memory Usage Total : 46068 MiB' with 'ECC Mode Current : Enabled', "
                      "driver 550.127.05: " + _GLS + "ecc9fb580a9542c249e51fec30eba202cef7eba3/gls/"
                      "RTX_A6000_x9_smi.py; " + _DQ + " '45619 MBytes (47834660864 bytes)': " + _GLS
                      + "ecc9fb580a9542c249e51fec30eba202cef7eba3/gls/RTX_A6000_x9_deviceQuery.py"),
    GPU(id="rtx-5090", name="GeForce RTX 5090", memory_gb=32, bandwidth_tbs=1.792, bf16_tflops=209.5,
        source="NVIDIA RTX Blackwell GPU architecture whitepaper (32 GB GDDR7, 1,792 GB/s; 209.5 TFLOPS "
               "FP16/BF16 tensor with FP32 accumulate, dense, as the RTX 4090 entry counts)",
        driver_total_mib=32_607, cuda_total_bytes=33_680_457_728,
        driver_source="nvidia-smi 'NVIDIA GeForce RTX 5090 ... 492MiB /  32607MiB' in "
                      "https://github.com/noonghunna/club-3090/issues/617; " + _DQ + " '32120 MBytes "
                      "(33680457728 bytes)', driver 570.124.06: " + _GLS
                      + "5d64b880942758ed4de2b107422a3f31bb609fac/gls/RTX5090_deviceQuery.py"),
    GPU(id="l40", name="L40", memory_gb=48, bandwidth_tbs=0.864, bf16_tflops=181,
        source="https://www.nvidia.com/en-us/data-center/l40/ (datasheet: 48 GB GDDR6 with ECC, 864 GB/s, "
               "BF16 181.05 | 362.1 TFLOPS with sparsity)",
        note=NO_DRIVER_TOTAL_NOTE),
    GPU(id="h20", name="H20", memory_gb=96, bandwidth_tbs=4.0, bf16_tflops=148,
        source="NVIDIA publishes no public H20 datasheet; 96 GB HBM3, 4.0 TB/s and 148 TFLOPS FP16/BF16 dense "
               "as reported, e.g. https://willitrunai.com/es/gpus/h20-96gb",
        driver_total_mib=97_871,
        driver_source="nvidia-smi 'NVIDIA H20 ... 0MiB /  97871MiB' (driver 580.95.05) in "
                      "https://github.com/NVIDIA/nvtrust/issues/128; no CUDA total found (the engine uses "
                      "MiB x 2^20)"),
    GPU(id="gh200-96gb", name="GH200 (96 GB HBM3)", memory_gb=96, bandwidth_tbs=4.0, bf16_tflops=990,
        source="https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (datasheet: 96 GB HBM3, "
               "4 TB/s; 990 TFLOPS BF16 dense, 1,979 with sparsity)",
        note="GPU memory only; the Grace CPU's LPDDR5X (up to 480 GB) is reachable over NVLink-C2C but is "
             "not counted here",
        driver_total_mib=97_871, cuda_total_bytes=101_468_602_368,
        driver_source="nvidia-smi 'NVIDIA GH200 480GB ... 3MiB /  97871MiB' (FB Total 97871 MiB, Reserved "
                      "1103 MiB), driver 550.127.05: " + _GLS + "b2f1cedeb098383fb647ea9bc7b51e3fec596989/gls/"
                      "GH200_smi.py; " + _DQ + " '96768 MBytes (101468602368 bytes)': " + _GLS
                      + "b2f1cedeb098383fb647ea9bc7b51e3fec596989/gls/GH200_deviceQuery.py"),
    GPU(id="gh200-144gb", name="GH200 (144 GB HBM3e)", memory_gb=144, bandwidth_tbs=4.9, bf16_tflops=990,
        source="https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (datasheet: 144 GB HBM3e, "
               "4.9 TB/s; 990 TFLOPS BF16 dense, 1,979 with sparsity)",
        note="GPU memory only; " + NO_DRIVER_TOTAL_NOTE),
    GPU(id="mi325x", name="AMD Instinct MI325X", memory_gb=256, bandwidth_tbs=6.0, bf16_tflops=1307,
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html (256 GB HBM3E, 6 TB/s; "
               "1,307.4 TFLOPS BF16 dense)",
        note=NO_DRIVER_TOTAL_NOTE),
    GPU(id="rtx-3090", name="GeForce RTX 3090", memory_gb=24, bandwidth_tbs=0.936, bf16_tflops=71,
        source="NVIDIA Ampere GA102 architecture whitepaper (24 GB GDDR6X, 936 GB/s; 71 TFLOPS BF16, FP32 "
               "accumulate, dense)",
        driver_total_mib=24_576, cuda_total_bytes=25_327_697_920,
        driver_source="nvidia-smi 'NVIDIA GeForce RTX 3090 ... 23357MiB /  24576MiB' in "
                      "https://github.com/noonghunna/club-3090/issues/1106; " + _DQ + " '24154 MBytes "
                      "(25327697920 bytes)', driver 560.35.03: " + _GLS_NOV14 + "RTX3090_deviceQuery.py"),
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
