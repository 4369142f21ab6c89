"""Index maps and register layouts of the register-dequant decode kernel (:mod:`kernels.decode.rdq`).

The kernel feeds Ampere-style warp MMAs (``mma.sync.m16n8k16``, fp16 in, fp32 out) with K and V
dequantised in registers. Which value a thread holds in an MMA operand is fixed by the
instruction; which *physical* head dim and token that value is, is ours to choose, because

* ``s = q . k`` sums over head dims: any permutation of the head-dim index applied to both q
  and K leaves the scores unchanged;
* ``o = p . V`` produces one output per head dim: a permutation of V's head-dim index permutes
  the output columns, undone by the store's offsets;
* the token index only has to agree between S's columns and V's rows (it is the identity here).

Fragment facts used (PTX ISA, "Matrix fragments for mma.m16n8k16" with ``.f16``; lane ``=
4 g + t``): A (16 x 16) holds rows ``g, g + 8`` at columns ``2t, 2t+1, 2t+8, 2t+9``; B (16 x 8,
K x N) holds column ``n = g`` at rows ``k = 2t, 2t+1, 2t+8, 2t+9``; C (16 x 8) rows ``g, g+8``
at columns ``2t, 2t+1``. Consecutive ``k`` pairs share one 32-bit register.

The maps below are chosen so that a thread's operand values are the bytes of one contiguous
slice of a token row: for K, lane ``t`` owns bytes ``[t RB/4, (t+1) RB/4)`` of token ``g``
(``RB`` = bytes per token row: ``D/2`` for INT4, ``D`` for FP8; 16 or 32 bytes at d 128); for V,
lane ``g`` owns bytes ``[g RB/8, (g+1) RB/8)`` of tokens ``2t, 2t+1, 2t+8, 2t+9``. The same
functions written with integer arithmetic on ``gl.arange`` give the kernel's query and output
offsets; the tests check these against a direct model of what each register holds.

Also here: the dequantising PTX, whose output order these maps encode. Pure Python (no Triton):
importable anywhere; the kernel's layouts are built from these lists.
"""

from __future__ import annotations

__all__ = ["k_physical_byte", "v_physical_byte", "INT4_K_ELEMENT_BYTE", "FP8_K_ELEMENT_BYTE",
           "k_tile_layout_bases", "v_tile_layout_bases", "INT4_K_PTX", "INT4_V_PTX", "FP8_K_PTX", "FP8_V_PTX",
           "MOVMATRIX_PTX", "p_transpose_reshape", "word_layout_bases"]

# Which byte of a 32-bit code word the m-th value a K conversion returns comes from. INT4: the
# nibble trick masks bytes 0 and 2 of a word (then of the word shifted right by 8: bytes 1 and
# 3), so values come out as bytes 0, 2, 1, 3. FP8: cvt.rn.f16x2.e4m3x2 converts bytes in order.
INT4_K_ELEMENT_BYTE = (0, 2, 1, 3)
FP8_K_ELEMENT_BYTE = (0, 1, 2, 3)


def k_physical_byte(k: int, row_bytes: int, element_byte: tuple[int, ...]) -> int:
    """Byte of a token's code row (``row_bytes`` long) that logical q.k index ``k`` reads.

    ``k = 16 s + 8 h + 2 t + e`` (MMA k-step ``s``, B rows ``2t + e + 8h``): lane ``t`` reads
    16-bit pairs from its own slice of ``row_bytes / 4`` bytes; word ``s`` of the slice feeds
    k-step ``s``, its values ``m = 2 h + e`` in the conversion's order ``element_byte``.
    """
    s, h, t, e = k >> 4, (k >> 3) & 1, (k >> 1) & 3, k & 1
    return t * (row_bytes // 4) + 4 * s + element_byte[2 * h + e]


def v_physical_byte(n: int, row_bytes: int) -> int:
    """Byte of a token's code row that logical output column ``n`` of p.V comes from.

    ``n = 8 r + g`` (B column ``g`` of n-tile ``r``): lane ``g`` reads ``row_bytes / 8``
    contiguous bytes, i.e. ``WT = row_bytes / 32`` words. The conversion returns, per word ``w``
    and token pair, values for bytes ``(0, 1)`` and ``(2, 3)`` (``q``), each pair ``(bb)`` of
    two tokens; ``r`` orders them as ``((w0 * 2 + q) * 2 + bb)``.
    """
    words_per_lane = row_bytes // 32
    wg, bb, q, w0 = n & 7, (n >> 3) & 1, (n >> 4) & 1, n >> 5
    return 4 * (wg * words_per_lane + w0) + 2 * q + bb


def _bits(n: int) -> int:
    return n.bit_length() - 1


def k_tile_layout_bases(block_n: int, row_bytes: int) -> dict:
    """Linear-layout bases of a ``[block_n, row_bytes]`` code tile for K (one warp): registers
    walk the lane's ``row_bytes / 4`` contiguous bytes, then tokens ``8 i``; lanes ``t`` (bits 0-1)
    pick the slice, lanes ``g`` (bits 2-4) the token."""
    per_lane = row_bytes // 4
    regs = [[0, 1 << i] for i in range(_bits(per_lane))] + [[8 << i, 0] for i in range(_bits(block_n // 8))]
    lanes = [[0, per_lane], [0, 2 * per_lane], [1, 0], [2, 0], [4, 0]]
    return dict(reg_bases=regs, lane_bases=lanes, warp_bases=[], block_bases=[], shape=[block_n, row_bytes])


def v_tile_layout_bases(block_n: int, row_bytes: int) -> dict:
    """Linear-layout bases of a ``[block_n, row_bytes]`` code tile for V (one warp): registers
    walk the lane's ``row_bytes / 8`` contiguous bytes, then token bit 0 (``e``), bit 3 (``h``)
    and the k-steps; lanes ``t`` carry token bits 1-2, lanes ``g`` the byte slice."""
    per_lane = row_bytes // 8
    regs = ([[0, 1 << i] for i in range(_bits(per_lane))] + [[1, 0], [8, 0]]
            + [[16 << i, 0] for i in range(_bits(block_n // 16))])
    lanes = [[2, 0], [4, 0], [0, per_lane], [0, 2 * per_lane], [0, 4 * per_lane]]
    return dict(reg_bases=regs, lane_bases=lanes, warp_bases=[], block_bases=[], shape=[block_n, row_bytes])


def word_layout_bases(byte_bases: dict) -> dict:
    """The same tile as 32-bit words (``[block_n, row_bytes / 4]``): a byte layout whose first two
    register bases walk the four bytes of a word (every layout above) without those two, its
    column coordinates divided by 4. A lane then holds as words exactly the bytes it held."""
    regs = byte_bases["reg_bases"]
    if regs[:2] != [[0, 1], [0, 2]]:
        raise ValueError(f"the first two register bases must walk a word's bytes, got {regs[:2]}")
    def words(basis: list[int]) -> list[int]:
        return [basis[0], basis[1] // 4]

    return dict(reg_bases=[words(b) for b in regs[2:]], lane_bases=[words(b) for b in byte_bases["lane_bases"]],
                warp_bases=[], block_bases=[], shape=[byte_bases["shape"][0], byte_bases["shape"][1] // 4])


# INT4 K: one word of four code bytes ($4) -> fp16 pairs (c - 8) of the low nibbles of bytes
# (0, 2) and (1, 3) ($0, $1) and of the high nibbles ($2, $3). lop3 0xEA is (a & b) | c:
# fp16 0x6400 | c = 1024 + c and 0x6400 | 16 c = 1024 + 16 c (exact: spacing 1 in [1024, 2048));
# 0x6408 = 1032, 0x2C00 = 1/16, 0xD480 = -72.
INT4_K_PTX = """{
.reg .b32 w8, k1032, k16, km72;
mov.b32 k1032, 0x64086408;
mov.b32 k16, 0x2C002C00;
mov.b32 km72, 0xD480D480;
shr.b32 w8, $4, 8;
lop3.b32 $0, $4, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $1, w8, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $2, $4, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 $3, w8, 0x00F000F0, 0x64006400, 0xEA;
sub.f16x2 $0, $0, k1032;
sub.f16x2 $1, $1, k1032;
fma.rn.f16x2 $2, $2, k16, km72;
fma.rn.f16x2 $3, $3, k16, km72;
}"""

# INT4 V: a word of an even token ($8, bytes A0..A3) and of the next token ($9, B0..B3) -> fp16
# pairs (token a, token b) at one dim: low nibbles of bytes 0, 1 ($0, $1) and 2, 3 ($2, $3), high
# nibbles likewise ($4..$7). prmt 0x5410 gives bytes [A0, A1, B0, B1] (0x7632: [A2, A3, B2, B3]);
# the nibble masks read bytes 0 and 2 of a word, the word shifted right by 8 supplies A1 and B1.
INT4_V_PTX = """{
.reg .b32 p0, p1, s0, s1, k1032, k16, km72;
mov.b32 k1032, 0x64086408;
mov.b32 k16, 0x2C002C00;
mov.b32 km72, 0xD480D480;
prmt.b32 p0, $8, $9, 0x5410;
prmt.b32 p1, $8, $9, 0x7632;
shr.b32 s0, p0, 8;
shr.b32 s1, p1, 8;
lop3.b32 $0, p0, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $1, s0, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $2, p1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $3, s1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $4, p0, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 $5, s0, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 $6, p1, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 $7, s1, 0x00F000F0, 0x64006400, 0xEA;
sub.f16x2 $0, $0, k1032;
sub.f16x2 $1, $1, k1032;
sub.f16x2 $2, $2, k1032;
sub.f16x2 $3, $3, k1032;
fma.rn.f16x2 $4, $4, k16, km72;
fma.rn.f16x2 $5, $5, k16, km72;
fma.rn.f16x2 $6, $6, k16, km72;
fma.rn.f16x2 $7, $7, k16, km72;
}"""

# FP8 K: four e4m3 bytes ($2) -> fp16 pairs of bytes (0, 1) and (2, 3), in order.
FP8_K_PTX = """{
.reg .b16 h0, h1;
mov.b32 {h0, h1}, $2;
cvt.rn.f16x2.e4m3x2 $0, h0;
cvt.rn.f16x2.e4m3x2 $1, h1;
}"""

# FP8 V: words of two tokens ($4: A, $5: B) -> fp16 pairs (A_i, B_i) for bytes i = 0..3 ($0..$3).
FP8_V_PTX = """{
.reg .b32 p0, p1;
.reg .b16 h0, h1, h2, h3;
prmt.b32 p0, $4, $5, 0x5140;
prmt.b32 p1, $4, $5, 0x7362;
mov.b32 {h0, h1}, p0;
mov.b32 {h2, h3}, p1;
cvt.rn.f16x2.e4m3x2 $0, h0;
cvt.rn.f16x2.e4m3x2 $1, h1;
cvt.rn.f16x2.e4m3x2 $2, h2;
cvt.rn.f16x2.e4m3x2 $3, h3;
}"""

# The swapped design's P^T (kernels.decode.rdq_swap): movmatrix transposes an 8 x 8 block of 16-bit
# values held one row per four lanes (lane 4 r + c: row r, columns 2c and 2c+1, one register):
# afterwards lane 4 r + c holds column r of the block, rows 2c and 2c+1. An 8-row half of a C
# fragment is such a block, so one movmatrix per half turns S^T's tokens-by-heads fragment into
# the tokens-as-k layout of a B operand.
MOVMATRIX_PTX = "movmatrix.sync.aligned.m8n8.trans.b16 $0, $1;"


def p_transpose_reshape(block_n: int, heads: int) -> tuple[list[int], tuple[int, ...]]:
    """``(shape, permutation)`` that relabel the movmatrix output ``Y`` (``[block_n, heads]`` in
    the C layout) as ``Z = P``, ``[block_n tokens, heads]`` in the B layout:
    ``Z[16 i + 8 h + 2 t + e, 8 c + g] = Y[16 i + 8 h + g, 8 c + 2 t + e]``.

    ``Y`` viewed as ``[i, h, g, c, t, e]`` and permuted to ``[i, h, t, e, c, g]``, then reshaped
    back to ``[block_n, heads]``; the kernel does exactly this with ``gl.reshape``/``gl.permute``.
    """
    return [block_n // 16, 2, 8, heads // 8, 4, 2], (0, 1, 4, 5, 3, 2)
