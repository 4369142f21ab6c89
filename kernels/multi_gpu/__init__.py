"""Multi-GPU measurements: a tensor-parallel decode step (each rank's share of the KV heads, the
project's paged decode kernel, the all-reduce of the output projection), one request's KV
blocks moved between GPUs, and the harness that times both against NCCL's bus bandwidth and a
peer copy (``python -m kernels.multi_gpu``; docs/kernels/MULTI_GPU.md).

The same code runs on the CPU over gloo at toy sizes (the tests), and on GPUs over NCCL.
"""
