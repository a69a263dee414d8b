"""Build and time the configs of two or more pick files (``picks.py``) on this GPU, in one process,
against the task's baseline (cuDNN, cuBLAS): the A/B of ways of picking a config for workloads
nobody tuned.  GPU machine, PyTorch with CUDA.

    python lab/probes/pick_ab.py a.json b.json [--out ab.json]

Every distinct (workload, config) is built once, in parallel worker processes (into the build
cache), then per workload: the fp32 reference, each side's kernel checked against it then timed by
the package's one timer (graph replays), the baseline the same way, and each side's and the
baseline's kernel device time from the profiler.  The sides' order rotates from workload to workload
so drift within the process favours none.  Printed: a row per workload, then per side the geomean
of baseline time over the side's in both views (wrong or unbuildable kernels count as missing,
listed).
"""
import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing as mp
import time
from pathlib import Path

from tc_autotune.api import build_cache
from tc_autotune.api.build import resolve_config
from tc_autotune.api.kernel import build_arch, compile_kernel
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune.measure.checked_timing import checked_kernel_time, task_arrays
from tc_autotune.tuning.benchmark import device_times, geomean
from tc_autotune.workloads import get

TIMING = dict(number=20, repeat=30, min_repeat_ms=10)


def _module(spec: str, config: dict, gpu):
    workload = get(spec)
    config = resolve_config(workload, config, gpu)
    arch = build_arch(workload, config, gpu)
    return workload, config, arch, build_cache.module_key(workload, config, arch)


def _build(spec: str, config: dict, gpu) -> str:
    """A worker: compile (spec, config) into the build cache unless it is there; its key."""
    workload, config, arch, key = _module(spec, config, gpu)
    if build_cache.cached_module(key, workload, config, arch) is None:
        build_cache.store_module(key, compile_kernel(workload, config, gpu))
    return key


def build_all(jobs: list, gpu) -> dict:
    """{(spec, config json): kernel or the error} of every job, built in parallel."""
    out = {}
    context = mp.get_context("forkserver")
    with cf.ProcessPoolExecutor(min(16, len(jobs)) or 1, mp_context=context) as pool:
        futures = {job: pool.submit(_build, job[0], json.loads(job[1]), gpu) for job in jobs}
        for job, future in futures.items():
            try:
                future.result()
                workload, config, arch, key = _module(job[0], json.loads(job[1]), gpu)
                out[job] = build_cache.cached_module(key, workload, config, arch)
            except Exception as err:  # noqa: BLE001 (one config that cannot build is a row, not a stop)
                out[job] = f"{type(err).__name__}: {str(err)[:200]}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("picks", nargs="+")
    parser.add_argument("--out", default="pick_ab.json")
    args = parser.parse_args()
    sides = [json.loads(Path(p).read_text()) for p in args.picks]
    labels = [s["label"] for s in sides]
    specs = list(dict.fromkeys(spec for s in sides for spec in s["picks"]))
    gpu = default_gpu()
    jobs = list(dict.fromkeys((spec, json.dumps(s["picks"][spec]["config"], sort_keys=True))
                              for s in sides for spec in specs if s["picks"].get(spec, {}).get("config")))
    start = time.time()
    kernels = build_all(jobs, gpu)
    print(f"built {len(jobs)} kernels in {time.time() - start:.0f} s on {gpu.name}", flush=True)
    rows = []
    for n, spec in enumerate(specs):
        workload = get(spec)
        arrays = task_arrays(workload)
        row = {"workload": spec, "sides": {}}
        order = labels[n % len(labels):] + labels[:n % len(labels)]
        for label in order:
            side = sides[labels.index(label)]["picks"].get(spec)
            if not side or not side["config"]:
                row["sides"][label] = {"source": side and side["source"], "error": "no pick"}
                continue
            kernel = kernels[(spec, json.dumps(side["config"], sort_keys=True))]
            cell = {"source": side["source"], "config": side["config"]}
            if isinstance(kernel, str):
                cell["error"] = kernel
            else:
                cell["graph_s"], cell["err"] = checked_kernel_time(kernel, workload, *arrays, **TIMING)
                if cell["graph_s"] is not None:
                    cell["kernel_s"], cell["baseline_kernel_s"] = device_times(kernel, workload, arrays)
            row["sides"][label] = cell
        row["baseline_graph_s"], _ = tasks.of(workload).baseline(workload, *arrays, **TIMING)
        base_k = [c["baseline_kernel_s"] for c in row["sides"].values() if c.get("baseline_kernel_s")]
        row["baseline_kernel_s"] = sorted(base_k)[len(base_k) // 2] if base_k else None
        rows.append(row)
        cells = "  ".join(f"{label} {_ratio(row, label, 'graph')}/{_ratio(row, label, 'kernel')}" for label in labels)
        print(f"{spec:72s} {cells}", flush=True)
    print("\ngeomean of baseline time / ours (graph / kernels):")
    summary = {}
    for label in labels:
        graph = [r for r in (_value(row, label, "graph") for row in rows) if r]
        kern = [r for r in (_value(row, label, "kernel") for row in rows) if r]
        missing = [row["workload"] for row in rows if not _value(row, label, "graph")]
        summary[label] = {"graph": geomean(graph), "kernel": geomean(kern), "n": len(graph),
                          "min_graph": min(graph, default=None), "missing": missing}
        print(f"  {label:24s} {summary[label]['graph']:.3f} / {summary[label]['kernel']:.3f}  "
              f"(n={len(graph)}, lowest {summary[label]['min_graph']:.2f}, missing {missing})")
    Path(args.out).write_text(json.dumps({"gpu": gpu.name, "rows": rows, "summary": summary,
                                          "picks": args.picks, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
                                         indent=1))


def _value(row, label, view) -> float | None:
    cell, base = row["sides"].get(label, {}), row[f"baseline_{view}_s"]
    ours = cell.get(f"{view}_s")
    return base / ours if ours and base else None


def _ratio(row, label, view) -> str:
    value = _value(row, label, view)
    return "  -  " if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
