"""The mixed-batch contenders compute the batch's attention: each against the fp32 reference.

On CPU the Triton contenders run under the interpreter and SDPA on CPU tensors, at a tiny batch
holding every kind of sequence (chunks over a prefix, a first chunk, decode rows of several
lengths); cuDNN needs a GPU and is checked there (``-m gpu``).
"""

from __future__ import annotations

import pytest
import torch

from kernels.bench.mixed import MIXED, bench_mixed_shape, mixed_batches, mixed_inputs
from kernels.bench.records import Ceilings, MixedShape
from kernels.tolerances import tolerance

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
TINY = MixedShape(name="tiny", q_lens=(20, 1, 33, 1), seq_lens=(45, 17, 33, 70), n_q_heads=4, n_kv_heads=2,
                  head_dim=32, block_size=16, dtype="fp16")
PREFILL = MixedShape(name="tiny prefill", q_lens=(24, 24), seq_lens=(24, 24), n_q_heads=4, n_kv_heads=2,
                     head_dim=64, block_size=16, dtype="fp16")


@pytest.mark.parametrize("shape,name", [(TINY, "triton_chunked"), (TINY, "triton_chunked_split"),
                                        (TINY, "gather_sdpa"), (PREFILL, "triton_chunked"),
                                        (PREFILL, "triton_flash"), (PREFILL, "triton_flash_tl")])
def test_contender_matches_reference(shape, name):
    x = mixed_inputs(shape, seed=1, device=DEVICE)
    contender = MIXED[name]
    assert contender.applies(shape)
    out = contender.build(x)()
    err, note = x.err_of(out)
    assert err <= tolerance("chunked_prefill", "fp16").atol, (name, err)
    assert note.startswith("vs fp32 varlen reference, sequences [0, ")


def test_which_contenders_apply():
    assert not MIXED["triton_chunked_split"].applies(PREFILL)  # nothing to split
    assert not MIXED["gather_sdpa"].applies(PREFILL)
    assert not MIXED["triton_flash"].applies(TINY) and not MIXED["sdpa_cudnn"].applies(TINY)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_gpu_quick_mixed_batches_are_timed_and_checked():
    ceilings = Ceilings(copy_tbps=None, copy_buffer_bytes=0, matmul_tflops=None, matmul_n=0)
    for shape in mixed_batches(quick=True):
        result = bench_mixed_shape(shape, ceilings, warmup_ms=2, rep_ms=5)
        for m in result.measurements:
            assert m.status == "ok", (m.contender, m.note)
            assert m.max_abs_err <= tolerance("chunked_prefill", "bf16").atol
