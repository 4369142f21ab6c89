"""``python -m sizing``: see :mod:`sizing.cli`.

``python -m sizing explain-log PATH|-`` parses a vLLM start-up log (:mod:`sizing.explain_cli`).
``python -m sizing plan ...`` is kept as an alias of ``python -m planner ...``. It is forwarded
by module name, so the sizing library itself never imports the planner (which sits above it).
"""

import runpy
import sys

from sizing.cli import main, models_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["explain-log"]:
        from sizing.explain_cli import explain_main

        sys.exit(explain_main(sys.argv[2:]))
    if sys.argv[1:2] == ["plan"]:
        del sys.argv[1]
        runpy.run_module("planner", run_name="__main__", alter_sys=True)
    elif sys.argv[1:2] == ["models"]:
        sys.exit(models_main(sys.argv[2:]))
    else:
        sys.exit(main())
