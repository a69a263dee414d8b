"""Why ResNet-50's batch-1 forward under ``reduce-overhead`` runs at 0.29-0.30 ms in some
processes and 0.41-0.47 ms (host-bound) in others, PDL on or off (BENCHMARKS §36): the compiled
model timed as is, then after ``gc.freeze()`` (a full collection's cost off the forward), with
the process's Python objects and live child processes counted.

    python lab/probes/compiled_state.py
"""

import gc
import os

import torch

from tc_autotune.pytorch import bench, optimize


def _children() -> int:
    mine = str(os.getpid())
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                count += stat.read().split(")")[-1].split()[1] == mine
        except OSError:
            pass
    return count


def main() -> None:
    model, x, _, _ = bench.build_model("resnet50", 1)
    with torch.no_grad():
        ours = optimize(model, (x,))
        compiled = torch.compile(ours, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            compiled(x)
        torch.cuda.synchronize()
        print(f"objects {len(gc.get_objects())}, gc counts {gc.get_count()}, children {_children()}")
        for label in ("as is", "as is", "gc frozen", "gc frozen"):
            if label == "gc frozen":
                gc.collect()
                gc.freeze()
            wall = bench._sync_ms(lambda: compiled(x), 50, 15)
            host = bench._host_ms(lambda: compiled(x), 50, 15)
            print(f"{label:10s} wall {wall:.4f} ms, host {host:.4f} ms, collections {[s['collections'] for s in gc.get_stats()]}")


if __name__ == "__main__":
    main()
