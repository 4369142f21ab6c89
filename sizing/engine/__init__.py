"""Engine-exact sizing: the figures vLLM prints at start-up, reproduced from a model's shape.

Modules, one job each (pure Python; nothing runs at import time):

* ``memory``    the per-GPU memory profile of vLLM's V1 worker (driver total × utilisation −
                weights − activation peak − non-torch − CUDA graphs), estimates labelled.
* ``groups``    KV-cache groups as vLLM's allocator forms them: one page size, groups of
                equal size, padding layers; blocks, tokens, concurrency, max_model_len.
* ``capacity``  :func:`plan_engine` (one request → one frozen :class:`EngineReport`) and the
                reverse questions (utilisation for N users, largest max_model_len, smallest TP).
* ``mxfp4``     MXFP4 experts as vLLM holds them: the padding of the MoE kernel it picks per GPU.
* ``pipeline``  vLLM's split of layers over pipeline stages.
* ``vllm_log``  the parser of a pasted start-up log; ``explain`` reconstructs its figures.
* ``launch``    the ``vllm serve`` and SGLang commands for a plan (the deployment they launch
                is chosen above this package, in :mod:`sizing.answer`).
* ``cli``       the engine options of ``python -m sizing`` and ``explain-log``.

The behaviour followed is vLLM's main branch as of its v0.2x releases (``kv_cache_utils.py``,
``kv_cache_interface.py``, ``gpu_worker.py``); :class:`~sizing.engine.groups.GroupingRule`
keeps the older rules reachable for logs of older versions.
"""
