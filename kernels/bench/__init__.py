"""Benchmark harness: contenders, sweeps, JSON records and the shipped results. CLI: ``python -m kernels.bench``."""
