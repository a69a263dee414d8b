"""Choosing configs: tuners (random, grid, XGBoost-guided), the cost model they share and the
zero-shot picks for shapes nobody tuned."""
