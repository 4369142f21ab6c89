"""KV-cache fragmentation simulator (NumPy; never imports streamlit).

Modules, one job each:

- ``workloads``: request lengths (log-normal, uniform, fixed, presets) and Poisson arrivals;
- ``traces``: trace CSVs (prompt/output tokens, arrival times) with validation;
- ``memory``: the KV budget and the figure-2 memory breakdown;
- ``policies``: Orca reservation policies (Max, Pow2, Oracle) and context clipping;
- ``allocators``: buddy and first-fit address spaces;
- ``snapshot``: requests that fit, utilisation, waste, policy comparison, block-size sweep;
- ``timeline``: continuous batching over time with preemption by recompute or swap;
- ``block_table``: block tables, reference counts, copy-on-write, token addresses;
- ``sharing``: parallel sampling, beam search and prefix caching savings;
- ``cli``: ``python -m simulation snapshot|timeline``.
"""
