"""Paged KV pools the kernels read: the bf16/fp16 and FP8 pool builder with its quantisation
(``paged.py``) and the INT4 layout and quantisation (``int4.py``). Imports no kernel.
"""
