"""Tuning runs: one job (``autotune``), scheduled job files with a budget and a report
(``nightly``, ``jobs``), and side-by-side benchmarks against the baseline."""
