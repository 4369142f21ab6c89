"""A decoder layer's kernels around attention, fused as serving engines launch them: the residual
add with RMSNorm, RoPE with the KV-cache write, SiLU-and-mul, and the routing of a mixture of
experts. Each replaces a chain of elementwise PyTorch ops by one launch, so a decode step timed
with them has the engine's kernel count rather than eager PyTorch's."""
