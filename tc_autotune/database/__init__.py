"""The tuning logs: records (one JSON line per measurement) on a crash-safe journal, the rules
that compare them like with like, and the index that applies the best record to a build."""
