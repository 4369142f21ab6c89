"""How far each kernel's output may lie from the float32 reference: one table, with the reasons.

Used by the kernel tests, the live page's interpreter check and the GPU check scripts, so a
bound is stated once. Entries are ``(kernel, dtype)``; ``atol`` is the max abs error allowed,
``rtol`` the relative part where the check uses ``torch.testing.assert_close`` (0 otherwise).
Outputs are softmax-weighted averages of N(0, 1) values, so of size <= ~3.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tolerance", "TOLERANCES", "tolerance"]


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    atol: float
    rtol: float = 0.0
    why: str


TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("paged_decode", "bf16"): Tolerance(atol=2e-2, why=(
        "bf16 keeps 8 significant bits: the output cast alone is 2^-8 relative (~1e-2 at |out| ~ 3), "
        "and on the GPU P is rounded to bf16 before the P.V tensor-core dot")),
    ("paged_decode", "fp16"): Tolerance(atol=4e-3, why=(
        "fp16 keeps 11 bits: ~8x tighter than bf16 for the same two roundings")),
    ("paged_decode", "fp8"): Tolerance(atol=2.5e-1, why=(
        "FP8 KV with a bf16 query, against the reference on the dequantised stored values (KV "
        "quantisation not counted), by the default e4m3 q.k dot: the query tile is quantised to "
        "e4m3 (3 mantissa bits, up to 2^-4 relative per element), so the logits move by a few "
        "percent, which a softmax over a handful of tokens passes on almost whole: emulating the "
        "rounding over 2-5-token sequences (3,000 random cases per length, GQA 8) reaches 0.17; "
        "the H200 measured 9.0e-2 at 3 tokens, up to 6.5e-2 over 17-97 and <= 7.5e-3 over 1K-20K "
        "tokens")),
    ("paged_decode", "fp8 fp16 dots"): Tolerance(atol=2e-2, why=(
        "FP8 KV with DecodeConfig(fp8_qk_dot=False): the query stays in fp16 for both dots, so only "
        "the bf16 roundings remain (as for bf16; measured <= 7.8e-3)")),
    ("paged_decode", "fp8 KV (fp16 q)"): Tolerance(atol=4e-3, why=(
        "FP8 KV with an fp16 query, against the dequantised reference: only fp16 roundings remain "
        "(as for fp16)")),
    ("mla_decode", "bf16"): Tolerance(atol=2e-2, why=(
        "as grouped-query bf16 decode: one bf16 rounding of the output and, on the GPU, P rounded "
        "to bf16 before P.C; the 512-wide latent dot accumulates in fp32")),
    ("mla_decode", "fp8"): Tolerance(atol=2e-2, why=(
        "FP8 latent against the reference on the dequantised stored values: the latent is converted "
        "to fp16 exactly, the bf16 query to fp16 exactly (within its range), P rounded to fp16 and "
        "the output to bf16, so only the bf16 roundings remain")),
    ("paged_decode", "int4"): Tolerance(atol=2e-2, why=(
        "INT4 KV with a bf16 query, against the reference on the dequantised codes and scales: the "
        "quantisation error is not counted; the dots run in fp16 (q and the scaled P rounded to fp16) "
        "and the output is rounded to bf16, as for bf16")),
    ("flash_forward", "bf16"): Tolerance(atol=3e-2, rtol=3e-2, why=(
        "the output is rounded once to bf16 (2^-8 relative) and on the GPU P is rounded to bf16 "
        "before P.V; the interpreter's fp32 -> bf16 cast rounds differently from the GPU's, which "
        "can cost a full bf16 ulp. Outputs are O(1), so atol ~ rtol")),
    ("flash_forward", "fp16"): Tolerance(atol=4e-3, rtol=4e-3, why=(
        "the same two roundings in fp16 (2^-11 relative)")),
    ("flash_forward_lse", "fp32"): Tolerance(atol=1e-3, rtol=1e-4, why=(
        "the log-sum-exp never leaves float32: scores are exact products summed in float32, then "
        "exp2/log2 (the GPU's approximate ex2 is accurate to ~2 ulp); only summation order differs")),
    ("chunked_prefill", "bf16"): Tolerance(atol=3e-2, rtol=3e-2, why=(
        "as the tiled forward: one bf16 rounding of the output and, on the GPU, P rounded to bf16 "
        "before P.V; a decode row's output is as small as a prefill row's (a softmax average)")),
    ("chunked_prefill", "fp16"): Tolerance(atol=4e-3, rtol=4e-3, why=(
        "the same two roundings in fp16 (2^-11 relative)")),
    ("chunked_prefill", "fp8"): Tolerance(atol=3e-2, rtol=3e-2, why=(
        "FP8 KV against the reference on the dequantised stored values (quantisation not counted): "
        "the K/V tiles and P go to the tensor cores in fp16, the query is rounded to fp16 and the "
        "output to the query's dtype (bf16: 2^-8 relative)")),
    ("naive_native", "bf16"): Tolerance(atol=3e-2, rtol=3e-2, why=(
        "naive attention in bf16 rounds S, P and the output to bf16: a few 2^-8 roundings of "
        "values of order 1")),
}


def tolerance(kernel: str, dtype: str) -> Tolerance:
    """The bound for ``kernel`` (``"paged_decode"``, ``"flash_forward"``, ...) at ``dtype``."""
    try:
        return TOLERANCES[(kernel, dtype)]
    except KeyError:
        raise KeyError(f"no tolerance for {kernel} at {dtype}; known: {sorted(TOLERANCES)}") from None
