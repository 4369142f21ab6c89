"""Paged decode attention: one query token per sequence against a block-table KV cache.

``paged.py`` holds the wrapper every caller uses (``paged_decode_attention``) and the Triton kernel
for 16-bit and FP8 KV; ``backends.py`` says which kernel a call runs; ``int4.py``, ``gluon.py`` and
``rdq.py`` (with its ``rdq_*`` parts) are the other kernels; ``config``, ``checks``, ``launch``,
``merge`` and ``direct_launch`` are the launch table, input checks, host plumbing, split-KV merge
and JIT-free launcher they share.
"""
