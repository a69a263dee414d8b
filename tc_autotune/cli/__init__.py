"""The command-line programs: ``tc-tune``, ``tc-nightly``, ``tc-benchmark`` and ``tc-records``
(console scripts of an installed package; ``python scripts/<name>.py`` runs the same ``main``
from a checkout).  ``common`` holds what they share: exit codes, the one-line parser errors.

Each module's ``main(argv=None, prog=...) -> int`` parses and checks its arguments first, with
nothing but the light modules imported (a bad argument costs a second and one line on stderr,
never a TVM import), then calls the package and returns the exit code (``cli.common.EXIT_*``).
"""
