#!/usr/bin/env python
"""``python scripts/benchmark.py ...`` from a checkout: the tc-benchmark command (tc_autotune.cli.benchmark),
which an installed package has on PATH.  ``--help`` gives its usage and exit codes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tc_autotune.cli import benchmark as command  # noqa: E402  (no TVM import: fast argument errors)


def main(argv=None) -> int:
    return command.main(argv, prog="benchmark.py")


if __name__ == "__main__":
    sys.exit(main())
