"""What the kernels are checked against, written the obvious way: dense attention in PyTorch
(``dense.py``), paged decode (``paged.py``), mixed prefill + decode batches (``varlen.py``), and the
reference page's online softmax in NumPy (``online_softmax.py``). Imports no kernel.
"""
