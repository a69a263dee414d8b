"""Host microseconds per launch of one conv (rfc-3x3-b1) built plain and with PDL, in one process (so
no process-order effect), the GPU idle or busy behind a queued sleep kernel: the raw function, the torch
launch, and PyTorch's ``F.conv2d`` after them.  GPU machine, PyTorch with CUDA.

    python lab/probes/pdl_host_cost.py
"""
import statistics, time, torch
import torch.nn.functional as F
from tc_autotune.api import build_cache
from tc_autotune import workloads
wl = workloads.get("rfc-3x3-b1")
data = torch.randn(wl.data_shape, device="cuda").half()
weight = (torch.randn(wl.weight_shape, device="cuda") * 0.05).half()
out = torch.empty(wl.out_shape, device="cuda", dtype=getattr(torch, wl.out_dtype))
ks = {p: build_cache.kernel(wl, pdl=p) for p in (False, True)}
ls = {p: k.torch_launch(data.device) for p, k in ks.items()}
x = data.permute(0, 3, 1, 2); w = weight.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
def per_call(fn, busy, calls=200, repeats=30):
    for _ in range(20): fn()
    torch.cuda.synchronize(); s = []
    for _ in range(repeats):
        if busy: torch.cuda._sleep(20_000_000)  # ~10 ms of GPU: every launch below queues behind it
        t = time.perf_counter()
        for _ in range(calls): fn()
        s.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(s)
for rnd in range(3):
    for busy in (False, True):
        row = []
        for p in (False, True, False, True):
            L = ls[p]
            row.append(f"{'pdl' if p else 'plain'} raw {per_call(lambda: L.function(data, weight, out, *L.workspaces), busy):5.1f}")
            row.append(f"launch {per_call(lambda: L(data, weight, out=out), busy):5.1f}")
            row.append(f"F.conv2d after {per_call(lambda: F.conv2d(x, w, None, 1, 1), busy):5.1f}")
        print(f"round {rnd} {'busy' if busy else 'idle'}: " + " | ".join(row), flush=True)
