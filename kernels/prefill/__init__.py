"""Prefill attention: the dense FlashAttention-style forward (``flash.py`` in Triton, ``flash_gluon.py``
in Gluon for Hopper, their shared ``checks.py``) and the paged varlen kernel that runs prefill chunks
and decode rows of one batch in one launch (``chunked.py``).
"""
