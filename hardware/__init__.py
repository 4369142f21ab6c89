"""The GPU catalogue: memory, bandwidth and matmul rates as vendors state them, with sources."""
