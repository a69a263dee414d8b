"""Why did optimize(measure=True) models run slower in two cases (BENCHMARKS §35)?

A: ResNet-50 batch 1 under torch.compile(mode="reduce-overhead"): all layers fused, against the
   same model with only the fc put back to PyTorch's nn.Linear (what measure=True kept).
B: the MLP at M = 2048 replayed from a CUDA graph, before and after the timer timed a layer in
   the same process (measure=True's timing, without its choice).

    python lab/probes/measure_state.py [b] [--empty-cache]   # b: part B only
"""

import logging
import sys

import torch

from tc_autotune.pytorch import bench, choose, optimize


def reduce_overhead_ms(module, x) -> float:
    torch._dynamo.reset()
    compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        compiled(x)
    return bench._sync_ms(lambda: compiled(x), 50, 15)


def part_a() -> None:
    model, x, _, _ = bench.build_model("resnet50", 1)
    with torch.no_grad():
        fused = optimize(model, (x,))
        print(f"A all fused: graph {bench._sync_ms(bench.graph_of(fused, x), 50, 15):.3f} ms, "
              f"reduce-overhead {reduce_overhead_ms(fused, x):.3f} ms")
        mixed = optimize(model, (x,))
        mixed.fc = model.fc  # PyTorch's nn.Linear, as measure=True kept it
        print(f"A fc PyTorch's: graph {bench._sync_ms(bench.graph_of(mixed, x), 50, 15):.3f} ms, "
              f"reduce-overhead {reduce_overhead_ms(mixed, x):.3f} ms")
        print(f"A PyTorch: reduce-overhead {reduce_overhead_ms(model, x):.3f} ms")


def part_b() -> None:
    model, x, _, _ = bench.build_model("mlp", 2048)
    with torch.no_grad():
        fused = optimize(model, (x,))
        first = bench.graph_of(fused, x)
        print(f"B before timing: graph {bench._sync_ms(first, 20, 15):.3f} ms")
        h = torch.randn(2048, 11008, device="cuda").half()
        timing = choose.time_both(fused.fc2, model.fc2, (h,))  # both: x @ W.T + bias
        print(f"B timed fc2: fused {timing.ours * 1e6:.1f} us, PyTorch's {timing.pytorch * 1e6:.1f} us")
        if "--empty-cache" in sys.argv:
            del h
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        after = " and empty_cache" if "--empty-cache" in sys.argv else ""
        old, new = bench._sync_ms(first, 20, 15), bench._sync_ms(bench.graph_of(fused, x), 20, 15)
        eager = bench._sync_ms(lambda: fused(x), 20, 15)
        print(f"B after timing{after}: old graph {old:.3f} ms, new graph {new:.3f} ms, eager {eager:.3f} ms")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    torch._logging.set_logs(cudagraphs=True, perf_hints=True)
    part_b()
    if "b" not in sys.argv[1:]:
        part_a()
