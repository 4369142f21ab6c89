"""The reference page's attention cost models: FlashAttention's HBM traffic, decode's KV read, rooflines.

Pure arithmetic (no torch, no streamlit), so the live page can print the model next to a
measurement and the tests can check every figure against the reference page's worked answer
(problem 5: N = 8,192, d = 128, FP16, 32 heads, H100 3.35 TB/s and 989 TFLOP/s).

Prefill, per head (sequence length N, head dim d, b bytes per value)::

    N x N matrix        = N^2 b                       (S or P, if materialised)
    standard traffic    = 4 N^2 b                     (write S, read S, write P, read P: only the
                                                       N^2 terms, as the page counts them)
    tiled traffic       = 4 N d b                     (read Q, K, V; write O; S and P stay on chip)
    FLOPs               = 4 N^2 d                     (two matmuls, 2 FLOPs per multiply-add)

    memory-bound time   = traffic / bandwidth;  compute-bound time = FLOPs / FLOP rate
    predicted time      = max(memory-bound, compute-bound) (an idealised floor)

Per layer multiplies by the query heads and the batch. The page counts the full N x N matrix
whether or not the attention is causal (naive code materialises all of it and masks), and the
full 4 N^2 d FLOPs; ``causal=True`` halves only the FLOPs, as a causal kernel skips the upper
triangle (``prefill_flops`` below, which the benchmark records use too).

Decode (one query token per sequence against a cache of L tokens)::

    KV bytes = 2 x batch x L x KV heads x d x b;  time = KV bytes / bandwidth
    FLOPs    = 4 x batch x query heads x L x d;   intensity = FLOPs / KV bytes = 2 x group / b

Mixed batch (chunked prefill): sequence b has q_b new tokens after c_b = s_b - q_b cached ones::

    pairs    = q_b c_b + q_b (q_b + 1) / 2        (token i sees c_b + i + 1 keys)
    FLOPs    = 4 x query heads x d x sum_b pairs;  bytes >= K, V of every cached token + Q + O

Units: bytes and FLOPs are plain counts; bandwidth in TB/s and rates in TFLOP/s are decimal
(1e12), as datasheets quote them; times are returned in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.gpus import get_gpu

__all__ = [
    "decode_kv_bytes", "decode_flops", "prefill_flops", "varlen_pairs", "varlen_flops", "varlen_hbm_bytes",
    "tbps", "tflops", "copy_tbps",
    "Hardware", "H100_SXM", "H200_SXM", "hardware_from_catalogue", "PrefillModel", "DecodeModel", "RooflinePoint",
    "prefill_model", "decode_model", "roofline_point", "attainable_tflops", "ridge_intensity",
    "decode_contender_bytes", "prefill_contender_bytes", "mixed_contender_bytes",
]

TERA = 1e12


# ----------------------------------------------------------------------------------------------
# Counts and rates (the benchmark records and the models both use these)
# ----------------------------------------------------------------------------------------------


def decode_kv_bytes(batch: int, context: int, n_kv_heads: int, head_dim: int, bytes_per_value: int) -> int:
    """Bytes of K and V a decode step must read (each cached value once)."""
    return 2 * batch * context * n_kv_heads * head_dim * bytes_per_value


def decode_int4_kv_bytes(batch: int, context: int, n_kv_heads: int, head_dim: int) -> int:
    """Bytes of an INT4 cache a decode step reads: per token, KV head and K or V, ``head_dim / 2``
    bytes of 4-bit codes and two fp16 scales (one per half head vector; ``kernels.cache.int4``)."""
    return 2 * batch * context * n_kv_heads * (head_dim // 2 + 2 * 2)


def decode_flops(batch: int, context: int, n_q_heads: int, head_dim: int) -> int:
    """FLOPs of one decode step: q.k and p.v, a multiply-add each, per query head and token."""
    return 4 * batch * n_q_heads * context * head_dim


def prefill_flops(batch: int, seq_len: int, n_q_heads: int, head_dim: int, causal: bool) -> int:
    """FLOPs of attention forward over N x N scores; causal computes half of them."""
    full = 4 * batch * n_q_heads * seq_len * seq_len * head_dim
    return full // 2 if causal else full


def varlen_pairs(q_len: int, seq_len: int) -> int:
    """(query, key) pairs one sequence of a mixed batch scores: its ``q_len`` new tokens sit after
    ``seq_len - q_len`` cached ones and token ``i`` sees ``seq_len - q_len + i + 1`` keys."""
    context = seq_len - q_len
    return q_len * context + q_len * (q_len + 1) // 2


def varlen_flops(q_lens, seq_lens, n_q_heads: int, head_dim: int) -> int:
    """FLOPs of attention over a mixed batch (prefill chunks and decode rows): two matmuls,
    2 FLOPs per multiply-add, over each sequence's visible pairs (a decode row: ``seq_len``)."""
    return 4 * n_q_heads * head_dim * sum(varlen_pairs(q, s) for q, s in zip(q_lens, seq_lens))


def varlen_hbm_bytes(q_lens, seq_lens, n_q_heads: int, n_kv_heads: int, head_dim: int,
                     bytes_per_value: int) -> int:
    """Least HBM bytes of a mixed batch: every cached K and V once, the queries read and the
    outputs written once."""
    kv = 2 * sum(seq_lens) * n_kv_heads * head_dim * bytes_per_value
    return kv + 2 * sum(q_lens) * n_q_heads * head_dim * bytes_per_value


def tbps(nbytes: float, ms: float) -> float:
    """Terabytes (1e12) per second."""
    return nbytes / (ms * 1e-3) / TERA


def tflops(flops: float, ms: float) -> float:
    """Tera-FLOPs (1e12) per second."""
    return flops / (ms * 1e-3) / TERA


def copy_tbps(buffer_bytes: int, ms: float) -> float:
    """Device-to-device copy bandwidth, counting the bytes read and the bytes written."""
    return tbps(2 * buffer_bytes, ms)


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """A GPU's two ceilings: HBM bandwidth (TB/s) and dense tensor-core rate (TFLOP/s)."""

    name: str
    hbm_tbps: float
    tflops: float

    def __post_init__(self) -> None:
        if not (self.hbm_tbps > 0 and self.tflops > 0):
            raise ValueError(f"{self.name}: bandwidth and FLOP rate must be > 0, got "
                             f"{self.hbm_tbps} TB/s, {self.tflops} TFLOP/s")

    def seconds_to_move(self, nbytes: float) -> float:
        """Memory-bound time: ``nbytes`` through HBM at the full bandwidth."""
        return nbytes / (self.hbm_tbps * TERA)

    def seconds_to_compute(self, flops: float) -> float:
        """Compute-bound time: ``flops`` at the full tensor-core rate."""
        return flops / (self.tflops * TERA)


def _bound(memory_s: float, compute_s: float) -> str:
    """Which ceiling sets the idealised time."""
    return "memory" if memory_s > compute_s else "compute"


def hardware_from_catalogue(gpu_id: str) -> Hardware:
    """A catalogue GPU's datasheet ceilings (dense, no sparsity) as a ``Hardware``."""
    gpu = get_gpu(gpu_id)
    return Hardware(name=f"{gpu.name} (datasheet)", hbm_tbps=gpu.bandwidth_tbs, tflops=float(gpu.bf16_tflops))


# The reference page's H100 and this project's H200, from the GPU catalogue.
H100_SXM = hardware_from_catalogue("h100-sxm")
H200_SXM = hardware_from_catalogue("h200")


@dataclass(frozen=True, kw_only=True)
class PrefillModel:
    """FlashAttention traffic model of one prefill shape on one piece of hardware.

    ``*_per_head`` fields are for one (sequence, query head); ``*_layer`` fields multiply by
    ``n_heads x batch``. Times are seconds.
    """

    seq_len: int
    head_dim: int
    n_heads: int
    batch: int
    bytes_per_value: int
    causal: bool
    hardware: Hardware

    @property
    def heads_total(self) -> int:
        return self.n_heads * self.batch

    @property
    def matrix_bytes_per_head(self) -> int:
        """Bytes of one N x N matrix (S or P) in the input dtype."""
        return self.seq_len * self.seq_len * self.bytes_per_value

    @property
    def matrix_bytes_layer(self) -> int:
        """S materialised for every head of the layer (what naive attention must hold)."""
        return self.matrix_bytes_per_head * self.heads_total

    @property
    def standard_traffic_per_head(self) -> int:
        """Write S, read S, write P, read P: four passes over the N x N matrix."""
        return 4 * self.matrix_bytes_per_head

    @property
    def tiled_traffic_per_head(self) -> int:
        """Read Q, K, V and write O once each: four N x d matrices."""
        return 4 * self.seq_len * self.head_dim * self.bytes_per_value

    @property
    def standard_traffic_layer(self) -> int:
        return self.standard_traffic_per_head * self.heads_total

    @property
    def tiled_traffic_layer(self) -> int:
        return self.tiled_traffic_per_head * self.heads_total

    @property
    def traffic_ratio(self) -> float:
        """How many times less data the tiled kernel moves (N / d for this model)."""
        return self.standard_traffic_per_head / self.tiled_traffic_per_head

    @property
    def flops_layer(self) -> int:
        return prefill_flops(self.batch, self.seq_len, self.n_heads, self.head_dim, self.causal)

    @property
    def flops_per_head(self) -> float:
        return self.flops_layer / self.heads_total

    @property
    def standard_memory_s_per_head(self) -> float:
        return self.hardware.seconds_to_move(self.standard_traffic_per_head)

    @property
    def standard_memory_s(self) -> float:
        """Time to move S and P through HBM for the whole layer (the page's ~5.1 ms)."""
        return self.hardware.seconds_to_move(self.standard_traffic_layer)

    @property
    def tiled_memory_s_per_head(self) -> float:
        return self.hardware.seconds_to_move(self.tiled_traffic_per_head)

    @property
    def tiled_memory_s(self) -> float:
        return self.hardware.seconds_to_move(self.tiled_traffic_layer)

    @property
    def compute_s(self) -> float:
        """Both matmuls at the full tensor-core rate (the page's ~1.1 ms)."""
        return self.hardware.seconds_to_compute(self.flops_layer)

    @property
    def standard_s(self) -> float:
        """Idealised floor of standard attention: the slower of its traffic and its matmuls."""
        return max(self.standard_memory_s, self.compute_s)

    @property
    def tiled_s(self) -> float:
        return max(self.tiled_memory_s, self.compute_s)

    @property
    def standard_bound(self) -> str:
        return _bound(self.standard_memory_s, self.compute_s)

    @property
    def tiled_bound(self) -> str:
        return _bound(self.tiled_memory_s, self.compute_s)

    @property
    def standard_intensity(self) -> float:
        """FLOPs per byte of HBM traffic when S and P go through HBM."""
        return self.flops_layer / self.standard_traffic_layer

    @property
    def tiled_intensity(self) -> float:
        return self.flops_layer / self.tiled_traffic_layer


@dataclass(frozen=True, kw_only=True)
class DecodeModel:
    """Decode step model: read every cached K and V byte once at the HBM bandwidth."""

    batch: int
    context: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    bytes_per_value: int  # 2 for bf16/fp16, 1 for FP8 (scales are a few bytes per head, ignored)
    hardware: Hardware

    @property
    def kv_bytes(self) -> int:
        return decode_kv_bytes(self.batch, self.context, self.n_kv_heads, self.head_dim,
                               self.bytes_per_value)

    @property
    def flops(self) -> int:
        return decode_flops(self.batch, self.context, self.n_q_heads, self.head_dim)

    @property
    def memory_s(self) -> float:
        return self.hardware.seconds_to_move(self.kv_bytes)

    @property
    def compute_s(self) -> float:
        return self.hardware.seconds_to_compute(self.flops)

    @property
    def predicted_s(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def intensity(self) -> float:
        """FLOPs per KV byte: 2 x GQA group / bytes per value (1 for MHA in bf16)."""
        return self.flops / self.kv_bytes

    @property
    def tokens_per_s(self) -> float:
        """Decode steps per second times the batch, if the step ran at the bandwidth."""
        return self.batch / self.predicted_s


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name} must be > 0, got {value!r}")


def prefill_model(*, seq_len: int, head_dim: int, n_heads: int, bytes_per_value: int,
                  hardware: Hardware, batch: int = 1, causal: bool = False) -> PrefillModel:
    """The FlashAttention traffic model of ``batch`` sequences of ``seq_len`` tokens, one layer."""
    _check_positive(seq_len=seq_len, head_dim=head_dim, n_heads=n_heads,
                    bytes_per_value=bytes_per_value, batch=batch)
    return PrefillModel(seq_len=seq_len, head_dim=head_dim, n_heads=n_heads, batch=batch,
                        bytes_per_value=bytes_per_value, causal=causal, hardware=hardware)


def decode_model(*, batch: int, context: int, n_q_heads: int, n_kv_heads: int, head_dim: int,
                 bytes_per_value: int, hardware: Hardware) -> DecodeModel:
    """The decode model (KV bytes / bandwidth) of one step at ``batch`` x ``context`` tokens."""
    _check_positive(batch=batch, context=context, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads,
                    head_dim=head_dim, bytes_per_value=bytes_per_value)
    if n_q_heads % n_kv_heads:
        raise ValueError(f"n_q_heads={n_q_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    return DecodeModel(batch=batch, context=context, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads,
                       head_dim=head_dim, bytes_per_value=bytes_per_value, hardware=hardware)


@dataclass(frozen=True, kw_only=True)
class RooflinePoint:
    """One measured contender on the roofline: x = FLOPs per HBM byte, y = achieved TFLOP/s."""

    label: str
    intensity: float  # FLOP / byte
    tflops: float  # achieved


def roofline_point(label: str, *, flops: float, hbm_bytes: float, seconds: float) -> RooflinePoint:
    """Place a measurement: its model FLOPs and HBM bytes over its measured time."""
    _check_positive(flops=flops, hbm_bytes=hbm_bytes, seconds=seconds)
    return RooflinePoint(label=label, intensity=flops / hbm_bytes, tflops=flops / seconds / TERA)


def attainable_tflops(intensity: float, *, hbm_tbps: float, tflops: float) -> float:
    """The roofline: min(peak rate, intensity x bandwidth), TFLOP/s (TB/s x FLOP/B = TFLOP/s)."""
    return min(tflops, intensity * hbm_tbps)


def ridge_intensity(*, hbm_tbps: float, tflops: float) -> float:
    """FLOP/byte where the bandwidth roof meets the compute roof (≈ 295 for an H100)."""
    return tflops / hbm_tbps


# ----------------------------------------------------------------------------------------------
# HBM bytes each contender must move (the roofline's x axis)
# ----------------------------------------------------------------------------------------------


def decode_contender_bytes(contender: str, *, batch: int, context: int, n_q_heads: int, n_kv_heads: int,
                           head_dim: int, bytes_per_value: int = 2) -> int:
    """Least HBM bytes of one decode step for a contender (queries and outputs are negligible).

    The paged kernel and SDPA on contiguous KV read the cache once; the FP8 kernel reads one
    byte per value, the INT4 kernel its 4-bit codes and fp16 scales (:func:`decode_int4_kv_bytes`);
    gather-then-SDPA reads the pages, writes the gathered copy and reads it
    again (3x); naive attention expands K and V to the query heads (read the cache, write and
    read the group-times-larger copy: (1 + 2 x group)x).
    """
    kv = decode_kv_bytes(batch, context, n_kv_heads, head_dim, bytes_per_value)
    if contender == "triton_paged_fp8":
        return decode_kv_bytes(batch, context, n_kv_heads, head_dim, 1)
    if contender == "triton_paged_int4":
        return decode_int4_kv_bytes(batch, context, n_kv_heads, head_dim)
    if contender == "gather_sdpa":
        return 3 * kv
    if contender == "naive":
        group = n_q_heads // n_kv_heads
        return kv * (1 + 2 * group) if group > 1 else kv
    return kv


def mixed_contender_bytes(contender: str, *, q_lens, seq_lens, n_q_heads: int, n_kv_heads: int, head_dim: int,
                          bytes_per_value: int = 2) -> int:
    """HBM bytes of one mixed batch for a contender: the paged kernels and the dense forwards
    read the cache once (:func:`varlen_hbm_bytes`); gather-then-SDPA also writes the gathered
    copy and reads it again (3x the KV bytes, padding not counted)."""
    io = varlen_hbm_bytes(q_lens, seq_lens, n_q_heads, n_kv_heads, head_dim, bytes_per_value)
    if contender == "gather_sdpa":
        return io + 2 * varlen_hbm_bytes((), seq_lens, n_q_heads, n_kv_heads, head_dim, bytes_per_value)
    return io


def prefill_contender_bytes(contender: str, *, batch: int, seq_len: int, n_q_heads: int, n_kv_heads: int,
                            head_dim: int, bytes_per_value: int = 2) -> int:
    """HBM bytes of one prefill: Q and O per query head, K and V per KV head; naive adds the
    page's four passes over the N x N matrix per query head (write S, read S, write P, read P)."""
    io = batch * seq_len * head_dim * bytes_per_value * (2 * n_q_heads + 2 * n_kv_heads)
    if contender == "naive":
        return io + 4 * batch * n_q_heads * seq_len * seq_len * bytes_per_value
    return io
