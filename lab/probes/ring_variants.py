"""``config_variants.py`` with the warp-specialized ring deepened by another factor: deep_ring=1 gives
``DEEP_RING_FACTOR x stages`` stages (2 in the template).  A probe of whether a ring deeper than the
template's (cuBLAS keeps 13 stages of 64 x 64 tiles at M = 128) pays before it becomes a knob value.
``--build-only`` compiles the variants into the disk cache and times nothing, so several processes can
build at once and the timing runs, one at a time, find their kernels built.  GPU machine.

    python lab/probes/ring_variants.py FACTOR SPEC VARIANTS_JSON [--build-only]
"""
import json, runpy, sys
from dataclasses import replace
from tc_autotune.templates.tc_gemm import knobs

knobs.DEEP_RING_FACTOR = int(sys.argv[1])
if "--build-only" in sys.argv:
    from tc_autotune.api.apply import apply_history_best, best_or_default_config
    from tc_autotune.api.build import resolve_config
    from tc_autotune.api.kernel import compile_kernel
    from tc_autotune.backends.cuda.gpu import default_gpu
    from tc_autotune.workloads import get
    gpu, wl = default_gpu(), get(sys.argv[2])
    with apply_history_best(["tuning_logs"]):
        best = best_or_default_config(wl, gpu)
    for change in [{}] + json.loads(sys.argv[3]):
        try:
            compile_kernel(wl, resolve_config(wl, replace(best, **change), gpu), gpu)
        except Exception as e:  # the timing run says which variant is refused and why
            print(f"- {change}: {str(e)[:120]}")
    sys.exit(0)
print(f"# DEEP_RING_FACTOR = {knobs.DEEP_RING_FACTOR}")
sys.argv = ["config_variants.py"] + sys.argv[2:4]
runpy.run_path("lab/probes/config_variants.py", run_name="__main__")
