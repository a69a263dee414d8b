"""The Tensor Core implicit-GEMM template (conv2d and dense): knobs, the GEMM view of a
workload, validity rules, instruction paths, the analytic prior, the TensorIR schedule, the
warp-specialized wgmma kernel, and the files whose hash keys its records (``template.source_files``)."""
