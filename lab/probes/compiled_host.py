"""Where the host time of one compiled forward goes, ours (``optimize`` then ``torch.compile``)
against PyTorch's model compiled the same way (issue #29: the MLP block at M = 128 is host-bound
under ``max-autotune``, ours ~24 us a call more).

    python lab/probes/compiled_host.py MODEL BATCH MODE [--measure] [--full PREFIX]

(``--full PREFIX``: every function of 1000 calls by cumulative time, to PREFIX.ours.txt and
PREFIX.pytorch.txt.)

Prints Inductor's counters, each side's CUDA kernels per call, the graph inputs each compiled side has, the wall and
host time per call, and the 25 functions with the most own time over 300 calls of each (cProfile).
"""

import cProfile
import io
import pstats
import sys

import torch
from torch._dynamo.utils import counters

from tc_autotune.measure.profiler import kernel_table
from tc_autotune.pytorch import bench, optimize


def _profile(fn, calls: int = 300, limit: int = 25, order: str = "tottime") -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats(order).print_stats(limit)
    return text.getvalue()


def _kernels(fn, calls: int = 20) -> str:
    """Each CUDA kernel's device time per call (the package's profiler table), the longest first."""
    rows = sorted(kernel_table(fn, calls), key=lambda k: -k.seconds)
    return "\n".join(f"  {k.seconds * 1e6:8.1f} us  x{k.launches:g}  {k.name[:110]}" for k in rows[:12])


def main(name: str, batch: int, mode: str, measure: bool) -> None:
    model, x, _, _ = bench.build_model(name, batch)
    with torch.no_grad():
        ours = optimize(model, (x,), measure=measure)
        print(ours.tc_autotune_report.summary())
        sides = {}
        for label, module, fullgraph in (("ours", ours, True), ("pytorch", model, False)):
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(module, mode=mode, fullgraph=fullgraph)
            for _ in range(3):
                compiled(x)
            torch.cuda.synchronize()
            print(f"{label}: inductor counters {dict(counters['inductor'])}")
            print(f"{label}: graph breaks {dict(counters['graph_break'])}, stats {dict(counters['stats'])}")
            sides[label] = compiled
        print(f"ours graph (by hand): wall {bench._sync_ms(bench.graph_of(ours, x), 50, 15):.4f} ms per call")
        for label, compiled in sides.items():
            wall = bench._sync_ms(lambda: compiled(x), 50, 15)
            host = bench._host_ms(lambda: compiled(x), 50, 15)
            print(f"{label}: wall {wall:.4f} ms, host {host:.4f} ms per call")
        for label, compiled in sides.items():
            print(f"{label}: kernels per call\n{_kernels(lambda: compiled(x))}")
        print(f"ours uncompiled: kernels per call\n{_kernels(lambda: ours(x))}")
        for label, compiled in sides.items():
            print(f"==== {label}: cProfile, 300 calls ====")
            print(_profile(lambda: compiled(x)))
            if "--full" in sys.argv:
                with open(f"{sys.argv[sys.argv.index('--full') + 1]}.{label}.txt", "w") as out:
                    out.write(_profile(lambda: compiled(x), 1000, 400, "cumulative"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], "--measure" in sys.argv[4:])
