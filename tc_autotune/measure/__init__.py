"""Building candidates and timing them: the measurer (parallel builds), runners (a local GPU
process, a remote GPU over RPC), the dispatcher that keeps every device busy, and the
cuDNN / cuBLAS baseline."""
