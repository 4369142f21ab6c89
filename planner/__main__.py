"""``python -m planner``: see :mod:`planner.cli` (also reachable as ``python -m sizing plan``)."""

import sys

from planner.cli import main

if __name__ == "__main__":
    sys.exit(main())
