"""Online softmax, tile by tile, in NumPy: the reference page's exercise for one attention head.

The loop (reference page, problem 5; FlashAttention-2's order: query blocks outside, key/value
tiles inside), for query block i with running max m, running sum l and unnormalised output O::

    for each K, V tile j:
        S_j   = Q_i K_jᵀ / √d                    [Br, Bc]
        m_new = max(m, rowmax(S_j))
        l     = e^(m − m_new) · l + rowsum(e^(S_j − m_new))
        O     = e^(m − m_new) · O + e^(S_j − m_new) · V_j
        m     = m_new
    O = O / l                                    equals softmax(Q Kᵀ / √d) V exactly

Every step is recorded (scores, old and new max, rescale factor, sum, output) so the app can
step through it with a slider. The loop runs in float32, as a kernel's on-chip accumulators do,
and is compared with a float64 naive softmax; it matches to 1e-5.

Bytes "moved" to and from HBM for N tokens, head dim d, b bytes per value, query tile Br
(``Tr = ceil(N / Br)`` query blocks)::

    naive  = read Q, K (2Nd) + write S (N²) + read S, write P (2N²) + read P, V (N² + Nd)
             + write O (Nd)                             = 4Nd + 4N²   values
    tiled  = read Q once (Nd) + read K and V once per query block (Tr · 2Nd) + write O (Nd)
                                                        = 2Nd + 2·Tr·Nd values

With one query block (Br ≥ N) the tiled count is the page's "read Q, K, V + write O = 4Nd";
smaller query tiles re-read K and V, which is why the paper's traffic is Θ(N²d²/M) for an SRAM
of M bytes. The on-chip working set of one step is Br·d + 2·Bc·d + Br·Bc values (+ 2·Br fp32
statistics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from units import cdiv

__all__ = ["LOG2_E", "TileStep", "Traffic", "OnlineSoftmaxRun", "random_head", "naive_attention_np",
           "tile_traffic", "online_softmax_attention"]

# log2(e): e^x = 2^(x log2 e). The Triton and Gluon kernels fold it into the logit scale so that
# each exponential is one exp2 (one MUFU instruction), their running maxima and lse in base 2.
LOG2_E = 1.4426950408889634


@dataclass(frozen=True, kw_only=True)
class TileStep:
    """State after one (query block, key tile) step. Arrays are float32 copies."""

    index: int  # position in the walk, 0-based
    q_block: int
    k_block: int
    rows: tuple[int, int]  # query rows [start, stop)
    cols: tuple[int, int]  # key columns [start, stop)
    scores: np.ndarray  # [rows, cols] S_j = Q_i K_jᵀ / √d, -inf where causally masked
    m_old: np.ndarray  # [rows] running max before this tile (-inf before the first)
    m_new: np.ndarray  # [rows]
    rescale: np.ndarray  # [rows] e^(m_old − m_new): how much the earlier sum and output shrink
    l: np.ndarray  # [rows] running sum after this tile
    out_unnormalised: np.ndarray  # [rows, d] O after this tile
    last_for_block: bool  # the block's final tile: O / l is its finished output


@dataclass(frozen=True, kw_only=True)
class Traffic:
    """HBM bytes of naive and tiled attention for one head, and one step's on-chip bytes."""

    seq_len: int
    head_dim: int
    tile_q: int
    tile_k: int
    bytes_per_value: int
    naive_bytes: int
    tiled_bytes: int
    sram_bytes: int  # one step's working set: Q tile, K and V tiles, scores, m and l (fp32)

    @property
    def ratio(self) -> float:
        return self.naive_bytes / self.tiled_bytes

    @property
    def n_q_blocks(self) -> int:
        """Query blocks of ``tile_q`` rows: how many times the tiled loop reads K and V."""
        return cdiv(self.seq_len, self.tile_q)


@dataclass(frozen=True, kw_only=True)
class OnlineSoftmaxRun:
    steps: tuple[TileStep, ...]
    output: np.ndarray  # [N, d] float32, the tiled result
    reference: np.ndarray  # [N, d] float64, naive softmax(QKᵀ/√d)V
    max_abs_err: float
    traffic: Traffic


def random_head(seq_len: int, head_dim: int, rng: np.random.Generator,
                spread: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K, V [seq_len, head_dim] float32 ~ N(0, spread²) from the injected generator."""
    q, k, v = (rng.standard_normal((seq_len, head_dim)).astype(np.float32) * np.float32(spread)
               for _ in range(3))
    return q, k, v


def naive_attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False) -> np.ndarray:
    """softmax(Q Kᵀ / √d) V in float64, the whole N x N matrix at once (the reference)."""
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q64 @ k64.T / math.sqrt(q64.shape[1])
    if causal:
        s = np.where(np.tri(*s.shape, dtype=bool), s, -np.inf)
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ v64


def tile_traffic(*, seq_len: int, head_dim: int, tile_q: int, tile_k: int, bytes_per_value: int = 2) -> Traffic:
    """Bytes each approach moves for one head (formulas in the module docstring)."""
    n, d, b = seq_len, head_dim, bytes_per_value
    for name, value in (("seq_len", n), ("head_dim", d), ("tile_q", tile_q), ("tile_k", tile_k),
                        ("bytes_per_value", b)):
        if not (isinstance(value, int) and value > 0):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    n_q_blocks = cdiv(n, tile_q)
    naive = (4 * n * d + 4 * n * n) * b
    tiled = (2 * n * d + 2 * n_q_blocks * n * d) * b
    br, bc = min(tile_q, n), min(tile_k, n)
    sram = (br * d + 2 * bc * d + br * bc) * b + 2 * br * 4
    return Traffic(seq_len=n, head_dim=d, tile_q=tile_q, tile_k=tile_k, bytes_per_value=b,
                   naive_bytes=naive, tiled_bytes=tiled, sram_bytes=sram)


def _validate(q: np.ndarray, k: np.ndarray, v: np.ndarray, tile_q: int, tile_k: int) -> None:
    if q.ndim != 2 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must all be [seq_len, head_dim]; got {q.shape}, {k.shape}, {v.shape}")
    for name, t in (("tile_q", tile_q), ("tile_k", tile_k)):
        if not (isinstance(t, int) and t > 0):
            raise ValueError(f"{name} must be a positive int, got {t!r}")


def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, tile_q: int, tile_k: int,
                             causal: bool = False, bytes_per_value: int = 2) -> OnlineSoftmaxRun:
    """Attention for one head by the tiled online-softmax loop, recording every step.

    Parameters
    ----------
    q, k, v : ndarray [N, d]
        One head's queries, keys and values (cast to float32).
    tile_q, tile_k : int
        Query rows per block (Br) and key/value rows per tile (Bc); tails may be shorter.
    causal : bool
        Query i sees keys j <= i. Tiles wholly above the diagonal are skipped, as kernels do.
    bytes_per_value : int
        Element width used for the traffic count (2 for FP16/BF16).

    Returns
    -------
    OnlineSoftmaxRun
    """
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    _validate(q, k, v, tile_q, tile_k)
    n, d = q.shape
    scale = np.float32(1.0 / math.sqrt(d))
    out = np.empty((n, d), dtype=np.float32)
    steps: list[TileStep] = []
    for i, r0 in enumerate(range(0, n, tile_q)):
        r1 = min(r0 + tile_q, n)
        q_i = q[r0:r1]
        m = np.full(r1 - r0, -np.inf, dtype=np.float32)
        l = np.zeros(r1 - r0, dtype=np.float32)
        acc = np.zeros((r1 - r0, d), dtype=np.float32)
        # Causal: keys past the block's last row are invisible to every row of the block.
        col_stop = r1 if causal else n
        tiles = list(range(0, col_stop, tile_k))
        for t, c0 in enumerate(tiles):
            c1 = min(c0 + tile_k, n)
            s = (q_i @ k[c0:c1].T) * scale
            if causal:
                visible = np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None]
                s = np.where(visible, s, np.float32(-np.inf))
            m_new = np.maximum(m, s.max(axis=1))
            # Rows whose every key so far is masked keep m = -inf; e^(-inf - -inf) would be NaN.
            safe = np.where(np.isfinite(m_new), m_new, np.float32(0.0))
            alpha = np.exp(m - safe)
            p = np.exp(s - safe[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[c0:c1]
            steps.append(TileStep(
                index=len(steps), q_block=i, k_block=c0 // tile_k, rows=(r0, r1), cols=(c0, c1),
                scores=s.copy(), m_old=m.copy(), m_new=m_new.copy(), rescale=alpha.copy(), l=l.copy(),
                out_unnormalised=acc.copy(), last_for_block=t == len(tiles) - 1,
            ))
            m = m_new
        out[r0:r1] = acc / l[:, None]
    reference = naive_attention_np(q, k, v, causal=causal)
    err = float(np.max(np.abs(out.astype(np.float64) - reference)))
    traffic = tile_traffic(seq_len=n, head_dim=d, tile_q=tile_q, tile_k=tile_k, bytes_per_value=bytes_per_value)
    return OnlineSoftmaxRun(steps=tuple(steps), output=out, reference=reference, max_abs_err=err, traffic=traffic)
