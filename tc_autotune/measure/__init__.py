"""Building candidates and timing them: the measurer (parallel builds), runners (a local GPU
process, a remote GPU over RPC), the dispatcher that keeps every device busy, a built kernel
timed in this process, checked first (``checked_timing``), and the cuDNN / cuBLAS baseline."""
