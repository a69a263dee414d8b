#!/usr/bin/env python
"""``python lab/run_study.py ...``: the held-out study (lab.study_cli), a maintainers' harness
of a checkout, not a command of the installed package.  ``--help`` gives its usage and exit codes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from lab import study_cli as command  # noqa: E402  (no TVM import: fast argument errors)


def main(argv=None) -> int:
    return command.main(argv, prog="run_study.py")


if __name__ == "__main__":
    sys.exit(main())
