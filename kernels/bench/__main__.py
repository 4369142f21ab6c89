"""``python -m kernels.bench``: see :mod:`kernels.bench.cli`."""

import contextlib
import sys

from kernels.bench.cli import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
