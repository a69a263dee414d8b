"""Tuning runs: one job (``autotune``), scheduled job files with a budget and a report
(``nightly``, ``jobs``), side-by-side benchmarks against the baseline, and the zero-shot model
trained from the logs (``zero_shot_train``) and measured (``zero_shot_eval``)."""
