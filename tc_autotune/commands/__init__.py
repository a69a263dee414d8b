"""The command-line programs: ``tc-tune``, ``tc-nightly``, ``tc-benchmark``, ``tc-records`` and
``tc-study`` (console scripts of an installed package; ``python scripts/<name>.py`` runs the same
``main`` from a checkout).

Each module's ``main(argv=None, prog=...) -> int`` parses and checks its arguments first, with
nothing but the light modules imported (a bad argument costs a second and one line on stderr,
never a TVM import), then calls the package and returns the exit code (``cli.EXIT_*``).
"""
