"""Our applied fp8 dense kernels and cuBLASLt's (``torch._scaled_mm``) at M = 1 and 16, 4096 x 4096,
two calls each, for Nsight Compute (GPU machine): where the weight stream loses the 10% that keeps
issue #32's M <= 16 goal out of reach.

    ncu --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis \
        --section WarpStateStats python lab/probes/fp8_ncu.py

Each side runs once before the profiled calls (the build, cuBLASLt's heuristics)."""
import torch

import tc_autotune as tc

N = K = 4096
for m in (1, 16):
    a = (torch.randn(m, K, device="cuda") / 4).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cuda") / 4).to(torch.float8_e4m3fn)
    sa = torch.tensor(0.5, device="cuda")
    sb = torch.tensor(0.25, device="cuda")
    ours = tc.dense(a, w, out_dtype="bfloat16", scale_a=sa, scale_b=sb)
    theirs = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    ref = (a.float() @ w.float().t()) * 0.125
    torch.cuda.synchronize()
    for name, out in (("ours", ours), ("_scaled_mm", theirs)):
        err = ((out.float() - ref).norm() / ref.norm()).item()
        print(f"m={m} n={N} k={K} {name}: relative error {err:.2e}", flush=True)
    for _ in range(2):
        tc.dense(a, w, out_dtype="bfloat16", scale_a=sa, scale_b=sb)
        torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
