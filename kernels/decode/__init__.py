"""Paged decode attention: one query token per sequence against a block-table KV cache.

``api.py`` holds the one entry every caller uses (``paged_decode_attention``, any pool: 16-bit,
FP8, INT4); ``backends.py`` says which kernel a call runs. The kernels: ``paged.py`` (Triton,
16-bit and FP8), ``int4.py`` (Triton, INT4) and ``rdq.py`` with its ``rdq_*`` parts (the
register-dequant warp-MMA kernel for FP8 and INT4 on Hopper). ``config``, ``checks``,
``launch``, ``merge`` and ``direct_launch`` are the launch table, input checks, host plumbing,
split-KV merge and JIT-free launcher they share.
"""
