"""Benchmark: contenders (``contenders``), timing and provenance (``timing``), sweeps (``sweeps``),
JSON records (``records``), the live page's runs (``live``) and the shipped results (``shipped``).
CLI: ``python -m kernels.bench`` (``cli``)."""
