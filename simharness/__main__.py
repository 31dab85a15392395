"""``python -m simharness ...``: the ``simharness`` command (`simharness.cli.main`)."""

import sys

from simharness.cli import main

if __name__ == '__main__':
    sys.exit(main())
