"""``python -m simulation``: see ``simulation/cli.py``."""

import sys

from simulation.cli import main

if __name__ == "__main__":
    sys.exit(main())
