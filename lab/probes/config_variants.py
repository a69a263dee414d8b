"""Kernel device time (profiler) of variants of a workload's applied config, each checked against the
fp32 reference first, and the baseline's.  A variant the space refuses is said in one line.
``--build-only`` compiles the configs into the disk cache and times nothing, so several processes can
build at once and the timing runs, one at a time, find their kernels built.  GPU machine.

    python lab/probes/config_variants.py "dense:m=2048,n=4096,k=11008,b=nk" '[{"setmaxnreg": 1}, {"stages": 3}]' [--build-only]
"""
import sys, json
from dataclasses import replace
import numpy as np, torch
from tc_autotune.api.apply import apply_history_best, best_or_default_config
from tc_autotune.api.build import resolve_config
from tc_autotune.api.kernel import compile_kernel
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.measure import baseline
from tc_autotune.measure.profiler import kernel_table
from tc_autotune.measure.checked_timing import task_arrays
from tc_autotune.workloads import get

spec, variants = sys.argv[1], json.loads(sys.argv[2])
gpu = default_gpu()
wl = get(spec)
with apply_history_best(["tuning_logs"]):
    best = best_or_default_config(wl, gpu)
if "--build-only" in sys.argv[3:]:
    for change in [{}] + variants:
        try:
            compile_kernel(wl, resolve_config(wl, replace(best, **change), gpu), gpu)
        except Exception as e:  # the timing run says which variant is refused and why
            print(f"- {change}: {str(e)[:120]}")
    sys.exit(0)
*inputs, ref = task_arrays(wl)
tensors = [baseline.device_tensor(a, getattr(torch, a.dtype.name)) for a in inputs]
odt = getattr(torch, wl.out_dtype)
out = torch.full(wl.out_shape, float("nan"), dtype=odt, device="cuda")
print(f"## {spec}\nbase {best}")
def ktime(fn):
    rows = kernel_table(fn, 20)
    return sum(r.seconds for r in rows) * 1e6, len(rows)
for change in [{}] + variants:
    try:
        cfg = resolve_config(wl, replace(best, **change), gpu)
        kernel = compile_kernel(wl, cfg, gpu)
    except Exception as e:
        print(f"- {change}: refused {str(e)[:150]}"); continue
    out.fill_(float("nan")); kernel(*tensors, out); torch.cuda.synchronize()
    err = float(np.linalg.norm(out.float().cpu().numpy() - ref) / np.linalg.norm(ref))
    us, n = ktime(lambda: kernel(*tensors, out))
    print(f"- {change or 'applied'}: err {err:.1e}, {us:.1f} us ({n} kernels)")
run, _ = baseline.runner(wl, *inputs)
us, n = ktime(run)
print(f"- baseline: {us:.1f} us ({n} kernels)")
