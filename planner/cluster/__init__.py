"""The cluster plan: parallel layouts beyond one TP replica (PP, data-parallel attention, expert
parallelism), disaggregated prefill/decode with its KV transfer, and the memory beyond the KV cache
(LoRA adapters, the multimodal encoder cache, CPU offload tiers)."""
