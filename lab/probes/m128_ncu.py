"""Our applied dense kernels and cuBLAS's (``F.linear``) at M = 128, two calls each, for Nsight
Compute (GPU machine):

    ncu --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis \
        --section Occupancy python lab/probes/m128_ncu.py

Each side runs once before the profiled calls (the build, cuBLAS's heuristics)."""
import torch
import torch.nn.functional as F

import tc_autotune as tc

SHAPES = ((11008, 4096), (4096, 11008), (4096, 4096))  # (N, K) of the LLM job's M = 128 GEMMs

for n, k in SHAPES:
    a = torch.randn(128, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    ours, theirs = tc.dense(a, w), F.linear(a, w)
    torch.cuda.synchronize()
    err = ((ours - theirs.float()).norm() / theirs.float().norm()).item()
    print(f"m=128 n={n} k={k}: relative error {err:.2e}", flush=True)
    for _ in range(2):
        tc.dense(a, w)
        F.linear(a, w)
    torch.cuda.synchronize()
