"""What a user calls: ``build_conv2d`` / ``build_dense`` (a kernel for one workload and config,
the best logged one by default) and ``tc.conv2d`` / ``tc.dense`` (a cached kernel called on arrays)."""
