"""``python -m kernels.bench``: see :mod:`kernels.bench.harness`."""

import contextlib
import sys

from kernels.bench.harness import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
