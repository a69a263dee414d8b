"""Do the baselines' kernels (cuBLAS fp16 GEMMs, cuBLASLt's fp8 ``_scaled_mm``, cuDNN convs) start before
the kernel before them ends, as PDL kernels do?  30 back-to-back calls captured in a CUDA graph (and
eagerly), profiled: how many started early, and the gaps.  GPU machine, PyTorch with CUDA only.

    python lab/probes/baseline_overlap.py
"""
import torch
from torch.profiler import ProfilerActivity, profile

def check(name, fn, n=30):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n): fn()
    for _ in range(5): g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay(); torch.cuda.synchronize()
    ev = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0],
                key=lambda e: e.time_range.start)
    early = sum(1 for a, b in zip(ev, ev[1:]) if b.time_range.start < a.time_range.end)
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(ev, ev[1:])]
    gaps.sort()
    print(f"{name}: {len(ev)} kernels ({ev[0].name[:50]}), started early {early}/{len(ev)-1}, median gap {gaps[len(gaps)//2]:.2f} us, min {gaps[0]:.2f}")
    # eager too
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n): fn()
        torch.cuda.synchronize()
    ev = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0],
                key=lambda e: e.time_range.start)
    early = sum(1 for a, b in zip(ev, ev[1:]) if b.time_range.start < a.time_range.end)
    print(f"   eager: started early {early}/{len(ev)-1}")

for m in (1, 16, 128, 2048):
    a = torch.randn(m, 4096, device="cuda", dtype=torch.float16); w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, device="cuda", dtype=torch.float16)
    check(f"fp16 matmul m={m}", lambda: torch.matmul(a, w.t()))
    check(f"fp16 linear+bias m={m}", lambda: torch.nn.functional.linear(a, w, b))
    a8 = a.to(torch.float8_e4m3fn); w8 = w.to(torch.float8_e4m3fn); one = torch.ones((), device="cuda")
    check(f"fp8 _scaled_mm m={m}", lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True))
x = torch.randn(32, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
cw = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
torch.backends.cudnn.benchmark = True
check("cudnn conv 3x3 b32", lambda: torch.nn.functional.conv2d(x, cw, padding=1))
x1 = x[:1].contiguous(memory_format=torch.channels_last)
check("cudnn conv 3x3 b1", lambda: torch.nn.functional.conv2d(x1, cw, padding=1))
