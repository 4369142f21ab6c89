"""``python -m kernels.multi_gpu``: see :mod:`kernels.multi_gpu.cli`.

Forwarded by module name to :mod:`planner.cluster.measured`, which runs :func:`kernels.multi_gpu.cli.main`
with the planner's predictions, so this package never imports the planner that sits above it
(as ``python -m sizing plan`` reaches the planner).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("planner.cluster.measured", run_name="__main__", alter_sys=True)
