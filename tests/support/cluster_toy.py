"""The toy model the cluster-plan tests size by hand, and its figures.

2 layers, 4 query and 4 KV heads of 64, 10⁹ parameters, bf16 weights and KV, on a custom GPU of
10 GB, 1 TB/s and 100 TFLOP/s at datasheet efficiency 1, pools joined by InfiniBand NDR
(400 Gb/s = 50 GB/s per direction, no published latency). Per GPU at TP 1::

    weights            10⁹ × 2 B = 2 GB                      A = 2e9 ÷ 1e12 = 2 ms
    KV per token       2 layers × 2 (K, V) × 4 heads × 64 × 2 B = 2,048 B
    KV budget          0.9 × 10 GB − 2 GB = 7 GB
    attention FLOPs    4 × 2 layers × 4 heads × 64 = 2,048 per cached token

The load: 2,000 requests/s of 1,000 prompt + 100 output tokens, TPOT ≤ 5 ms, mean TTFT ≤ 60 ms.
"""

from __future__ import annotations

from hardware.gpus import custom_gpu
from planner.bandwidth import datasheet_estimate
from planner.cluster.replica import ClusterSpec, Load
from sizing.models import ModelShape
from sizing.precisions import get_precision

BF16 = get_precision("bf16")
TOY = ModelShape(name="toy", layers=2, q_heads=4, kv_heads=4, head_dim=64, params=10**9)
BANDWIDTH, FLOPS, LINK = 1e12, 100e12, 50e9
A = 2e9 / BANDWIDTH  # one read of the weights
KV_PER_TOKEN = 2 * 2 * 4 * 64 * 2  # 2,048 B
ATTENTION = 4 * 2 * 4 * 64  # FLOPs per cached token

LOAD = Load(rate_per_s=2000, prompt_tokens=1000, output_tokens=100, tpot_target_s=0.005, ttft_target_s=0.06)
CONTEXT = 1100
B = CONTEXT * KV_PER_TOKEN / BANDWIDTH  # 2.2528 µs per decoding sequence
C = (2 * 1e9 + ATTENTION * CONTEXT) / FLOPS  # 20.0225 µs per decoding sequence
T_S = (1000 * 2 * 1e9 + ATTENTION * 1000**2 / 2) / FLOPS  # 20.01 ms: matmul-bound (weights take 2 ms)
# One prompt's KV on the wire: ⌈1,000 ÷ 16⌉ = 63 whole blocks of 16 tokens.
WIRE = 63 * 16 * KV_PER_TOKEN  # 2,064,384 B
TRANSFER = WIRE / LINK


def toy_spec(memory_gb: float = 10, model: ModelShape = TOY, **kwargs) -> ClusterSpec:
    """The toy on its custom GPU (``memory_gb`` vendor GB), datasheet efficiencies."""
    return ClusterSpec(model=model, kv_precision=BF16, weight_precision=BF16, estimate=datasheet_estimate(),
                       gpu=custom_gpu(memory_gb, bandwidth_tbs=1, bf16_tflops=100), **kwargs)
