"""Per-launch kernel device time of one forward (median of 20), ours (``tc.optimize``) and PyTorch's, in
launch order: where a model's time goes.  GPU machine, PyTorch with CUDA.

    python lab/probes/model_launches.py resnet50 1          # eager
    python lab/probes/model_launches.py mlp 2048
    python lab/probes/model_launches.py resnet50 1 compiled # both under reduce-overhead (ours' kernels not listed)
"""
import sys, torch
from torch.profiler import ProfilerActivity, profile
from tc_autotune.pytorch.bench import build_model
from tc_autotune.pytorch.optimize import optimize

def launches(fn, iters=20):
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0]
    per = len(ev) // iters
    rows = []
    for i in range(per):
        times = sorted(ev[j * per + i].device_time_total for j in range(iters))
        rows.append((ev[i].name, times[iters // 2]))
    return rows

name, batch = sys.argv[1], int(sys.argv[2])
compiled = len(sys.argv) > 3  # reduce-overhead: both sides compiled
model, x, ref, x32 = build_model(name, batch)
with torch.no_grad():
    ours = optimize(model, (x,))
    if compiled:
        ours = torch.compile(ours, mode="reduce-overhead", fullgraph=True)
        model = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            ours(x); model(x)
    for label, fn in (("ours", lambda: ours(x)), ("torch", lambda: model(x))):
        rows = launches(fn)
        print(f"## {name} b{batch} {label}: {len(rows)} kernels, total {sum(t for _, t in rows):.1f} us")
        for i, (n, t) in enumerate(rows):
            if not compiled or "main_kernel" not in n:
                print(f"{i:3d} {t:8.2f} {n[:110]}")
