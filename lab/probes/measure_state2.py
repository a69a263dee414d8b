"""The MLP at M = 2048 replayed from a CUDA graph after one of (BENCHMARKS §35b's open question):

  plain    nothing (optimize without measure)
  load     ~0.5 s of our two layers run eagerly on the default stream (the GPU busy, then idle)
  stream   our layers called a few times on another stream first (as the timer's capture calls them)
  measure  optimize(measure=True)

    python lab/probes/measure_state2.py VARIANT
"""

import sys

import torch

from tc_autotune.pytorch import bench, optimize


def main(variant: str) -> None:
    model, x, _, _ = bench.build_model("mlp", 2048)
    with torch.no_grad():
        fast = optimize(model, (x,), measure=variant == "measure")
        if variant == "load":
            for _ in range(800):
                fast(x)
            torch.cuda.synchronize()
        elif variant == "stream":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(torch.cuda.ExternalStream(side.cuda_stream)):
                for _ in range(3):
                    fast(x)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
        eager = bench._sync_ms(lambda: fast(x), 20, 15)
        graph = bench._sync_ms(bench.graph_of(fast, x), 20, 15)
        torch_graph = bench._sync_ms(bench.graph_of(model, x), 20, 15)
    print(f"{variant:8s} eager {eager:.3f} ms, graph {graph:.3f} ms, PyTorch graph {torch_graph:.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
