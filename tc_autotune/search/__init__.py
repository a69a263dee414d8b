"""Choosing configs: tuners (random, grid, XGBoost-guided), the cost model they share, the
annealing walk and the zero-shot picks for shapes nobody tuned.  It imports no template: a
space holds its own (training the zero-shot model is ``tuning``'s)."""
