"""The tuning logs: records (one JSON line per measurement) on a crash-safe journal, and the
rules that compare them like with like (``api.apply`` applies the best record to a build)."""
