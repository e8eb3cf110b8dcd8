"""``python -m forethought.bench.loop``: the loop bench (see :mod:`forethought.bench.loop.runner`)."""

import sys

from forethought.bench.loop.command import main

if __name__ == "__main__":
    sys.exit(main())
