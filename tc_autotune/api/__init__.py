"""What a user calls: ``build_conv2d`` / ``build_dense`` (a kernel for one workload and config,
the best logged one by default: ``apply``) and ``tc.conv2d`` / ``tc.dense`` (a cached kernel called
on arrays, from the disk cache of built kernels: ``build_cache``)."""
