"""Each layer of a model timed both ways by ``optimize(..., measure=True)``: the fused layer
(tuned record or zero-shot) against PyTorch's own ops for it, and which side was kept.

    python lab/probes/layer_choice.py resnet50 1      # or: resnet50 32, mlp 2048, mlp 128
"""

import sys
import time

import torch

from tc_autotune.api import build_cache
from tc_autotune.pytorch import bench, optimize


def main(name: str, batch: int) -> None:
    model, x, _, _ = bench.build_model(name, batch)
    with torch.no_grad():
        start = time.perf_counter()
        fast = optimize(model, (x,), measure=True)
        seconds = time.perf_counter() - start
    report = fast.tc_autotune_report
    untuned = {str(w) for w in report.untuned}
    print(f"# {name} batch {batch}: optimize(measure=True) {seconds:.1f} s; {report.summary()}")
    print("| layer | fused us | PyTorch us | PyTorch / fused | kept |\n|---|---|---|---|---|")
    ours_sum = torch_sum = best_sum = 0.0
    for layer, (ours, theirs) in report.timed.items():
        kept = "PyTorch's" if layer in report.left else "fused"
        print(f"| {layer} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {theirs / ours:.2f} | {kept} |")
        ours_sum, torch_sum = ours_sum + ours, torch_sum + theirs
        best_sum += theirs if layer in report.left else ours
    print(f"| **sum** | {ours_sum * 1e6:.1f} | {torch_sum * 1e6:.1f} | {torch_sum / ours_sum:.2f} | "
          f"kept: {best_sum * 1e6:.1f} us ({torch_sum / best_sum:.2f}x PyTorch's layers) |")
    print(f"# {len(untuned)} of {len(report.workloads)} kernels untuned (zero-shot); PDL {build_cache.model_pdl()}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
