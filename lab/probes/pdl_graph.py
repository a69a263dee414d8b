"""The graph view with and without Programmatic Dependent Launch: each workload of a job on its
applied config, built plain (what the benchmark and the tuner time) and with PDL (what ``tc.dense`` /
``tc.conv2d`` on torch tensors and ``tc.optimize``d models launch, ``build_cache.model_pdl``), each
checked against the fp32 reference, then timed by the package's one timer (graph replays of
back-to-back calls) beside the baseline in the same process.  cuBLAS's kernels may start early under
PDL in the baseline's replays; this shows what ours gain from the same.  GPU machine.

    python lab/probes/pdl_graph.py JOB.toml
"""
import sys

from tc_autotune.api.apply import choose_config
from tc_autotune.api.kernel import compile_kernel
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune.measure.checked_timing import checked_kernel_time, task_arrays
from tc_autotune.tuning.benchmark import geomean
from tc_autotune.tuning.jobs import load_job

TIMING = dict(number=20, repeat=30, min_repeat_ms=10)


def main(job_file: str) -> None:
    gpu = default_gpu()
    ratios = {"plain": [], "pdl": []}
    for entry in load_job(job_file).entries:
        workload = entry.workload
        config = choose_config(workload, gpu, warn=False).config
        arrays = task_arrays(workload)
        cells = {}
        for label, pdl in (("plain", False), ("pdl", True)):
            kernel = compile_kernel(workload, config, gpu, pdl=pdl)
            cells[label], _ = checked_kernel_time(kernel, workload, *arrays, **TIMING)
        base, _ = tasks.of(workload).baseline(workload, *arrays, **TIMING)
        for label, seconds in cells.items():
            if seconds and base:
                ratios[label].append(base / seconds)
        us = {k: f"{v * 1e6:7.1f} us" if v else "  wrong" for k, v in {**cells, "baseline": base}.items()}
        ratio = {k: f"{base / v:.2f}" if v and base else "-" for k, v in cells.items()}
        print(f"{entry.name[:72]:72s} plain {us['plain']}  pdl {us['pdl']}  baseline {us['baseline']}  "
              f"ratio plain {ratio['plain']} pdl {ratio['pdl']}", flush=True)
    print(f"geomean baseline / ours by graph replay: plain {geomean(ratios['plain']):.3f}, "
          f"pdl {geomean(ratios['pdl']):.3f} (n={len(ratios['pdl'])}) on {gpu.name}")


if __name__ == "__main__":
    main(sys.argv[1])
