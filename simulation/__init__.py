"""KV-cache fragmentation simulator (NumPy; never imports streamlit).

Modules, one job each:

- ``workloads``: request lengths (log-normal, uniform, fixed, presets) and Poisson arrivals;
- ``traces``: trace CSVs (prompt/output tokens, arrival times) with validation;
- ``memory``: the KV budget and the figure-2 memory breakdown;
- ``policies``: Orca reservation policies (Max, Pow2, Oracle) and context clipping;
- ``allocators``: buddy and first-fit address spaces;
- ``snapshot``: requests that fit, utilisation, waste, policy comparison, block-size sweep;
- ``timeline`` (settings and results in ``timeline_types``; the event loop in ``engine``, which
  jumps over stretches of pure decode in closed form, with its parts in the ``engine_*`` modules):
  continuous batching over time as vLLM's V1 scheduler runs it
  (max_num_seqs, max_num_batched_tokens, chunked prefill), preemption by recompute or swap;
- ``step_cost``: a step's time as a memory/compute roofline (or the user's constant);
- ``block_pool``: paged block pools, vLLM's prefix cache (hashes of full blocks, LRU free queue)
  and a CPU tier; ``content`` and ``prefix_workloads``: what prompts share;
- ``paper_figure2``: the PagedAttention paper's figure 2 reproduced over time;
- ``block_table``: block tables, reference counts, copy-on-write, token addresses;
- ``sharing``: parallel sampling, beam search and prefix caching savings;
- ``cli``: ``python -m simulation snapshot|timeline|prefix``.
"""
