"""Per-kernel device time (CUPTI through torch.profiler) of the applied config of an fp8 dense and of
split-K / persistent variants, beside ``torch._scaled_mm``'s kernels: which kernels a call runs, and
how long each.  GPU machine, PyTorch with CUDA.

    python lab/probes/kernel_split.py 1 16        # M values of an fp8 4096 x 4096 (N, K) dense
"""
import sys
from dataclasses import replace

import numpy as np
import torch

from tc_autotune.api.apply import apply_history_best, best_or_default_config
from tc_autotune.api.kernel import compile_kernel
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.measure import baseline
from tc_autotune.measure.profiler import kernel_table
from tc_autotune.measure.checked_timing import task_arrays
from tc_autotune.workloads import get

VARIANTS = ({}, dict(split_k=1), dict(split_k=4), dict(split_k=1, warp_specialized=2))


def _kernels(fn) -> str:
    rows = kernel_table(fn)
    return f"total {sum(r.seconds for r in rows) * 1e6:.2f} us: " + "; ".join(
        f"{r.name[:60]} {r.seconds * 1e6:.2f} us x{r.launches:.0f}" for r in rows)


def main(ms):
    gpu = default_gpu()
    for m in ms:
        wl = get(f"dense:m={m},n=4096,k=4096,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16")
        with apply_history_best(["tuning_logs"]):
            best = best_or_default_config(wl, gpu)
        *inputs, ref = task_arrays(wl)
        tensors = [baseline.device_tensor(a, getattr(torch, a.dtype.name)) for a in inputs]
        out = torch.full(wl.out_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        print(f"\n## m={m}  applied {dict(split_k=best.split_k, swap_ab=best.swap_ab, stages=best.stages)}")
        for change in VARIANTS:
            try:
                kernel = compile_kernel(wl, replace(best, **change), gpu)
            except ValueError as e:  # a variant the space refuses
                print(f"- {change}: {str(e)[:120]}")
                continue
            out.fill_(float("nan"))
            kernel(*tensors, out)
            torch.cuda.synchronize()
            err = float(np.linalg.norm(out.float().cpu().numpy() - ref) / np.linalg.norm(ref))
            print(f"- {change or 'applied'} err {err:.2e}: " + _kernels(lambda: kernel(*tensors, out)))
        run, _ = baseline.runner(wl, *inputs)
        print("- _scaled_mm: " + _kernels(run))


if __name__ == "__main__":
    main(sys.argv[1:] or ["1", "16"])
