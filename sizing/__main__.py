"""``python -m sizing``: see :mod:`sizing.cli`.

``python -m sizing plan ...`` is kept as an alias of ``python -m planner ...``. It is forwarded
by module name, so the sizing library itself never imports the planner (which sits above it).
"""

import runpy
import sys

from sizing.cli import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["plan"]:
        del sys.argv[1]
        runpy.run_module("planner", run_name="__main__", alter_sys=True)
    else:
        sys.exit(main())
