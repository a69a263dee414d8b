"""Does Programmatic Dependent Launch pay?  Chains of our kernels replayed from a CUDA graph with
PDL on and off, in one process (GPU machine, sm_90+, PyTorch with CUDA): the same configs built
both ways (``build_cache.kernel(..., pdl=)``), the outputs checked first (PDL's bit for bit equal to
the plain chain's), then the median wall time per replay (after warm-up; the two variants timed in
turn, several rounds), and the sum of the kernels' device times from the profiler
(``measure.profiler``, eager calls).  A PDL kernel's device time counts from its early start, so
its sum includes the time its blocks wait: compare the wall times; the gap between the plain
chain's wall time and its device sum is what PDL can hide (launch gaps, prologues).  "started
early" counts the kernels of one profiled replay that started before the one before them ended:
0 without PDL; with it, the launches that really overlapped (TVM's runtime launches a cluster
kernel, split-K's, through the same attribute list: this shows it does).

    python lab/probes/pdl_chain.py                              # two 3x3 conv chains and a dense chain
    python lab/probes/pdl_chain.py --layers 60 "n=1,h=14,w=14,c=256,k=256,r=3,s=3,pad=1,out_dtype=float16,epilogue=bias_relu"
    python lab/probes/pdl_chain.py --model resnet50 --batch 1   # the whole model, optimized (TC_AUTOTUNE_PDL)

A chain is ``--layers`` layers of one workload whose output feeds the next (its input and output
shapes must agree: a conv with c = k, stride 1, 'same' padding; a dense with n = k), each with its
own weights; a residual epilogue adds the output of two layers back.  ``--model`` optimizes the
model twice (``TC_AUTOTUNE_PDL`` 1 and 0) and times each optimized model's graph replay.
"""
import argparse
import os
import statistics
import time

import torch

from tc_autotune.api import build_cache
from tc_autotune.backends.cuda.gpu import default_gpu, has_pdl
from tc_autotune.core import tasks
from tc_autotune.measure.profiler import kernel_table
from tc_autotune.workloads import get

# ResNet-50 3x3 convs at batch 1 (the first's record on the H100: warp-specialized, split-K over a
# cluster of 4), and a dense whose record there is TIR mma with split-K (two kernels a layer)
CHAINS = ("n=1,h=28,w=28,c=128,k=128,r=3,s=3,pad=1,out_dtype=float16,epilogue=bias_relu",
          "n=1,h=14,w=14,c=256,k=256,r=3,s=3,pad=1,out_dtype=float16,epilogue=bias_relu",
          "dense:m=16,n=4096,k=4096,b=nk,dtype=bfloat16,out_dtype=bfloat16")


class Chain:
    """``layers`` layers of ``spec`` on buffers of their own, with plain and PDL kernels."""

    def __init__(self, spec: str, layers: int):
        self.workload = wl = get(spec)
        self.kernels = {on: build_cache.kernel(wl, pdl=on) for on in (False, True)}
        *inputs, (_, out_shape, out_dtype) = tasks.of(wl).signature(wl)
        if tuple(inputs[0][1]) != tuple(out_shape):
            raise SystemExit(f"{spec}: its input {inputs[0][1]} is not its output {out_shape}: no chain")
        gen = torch.Generator(device="cuda").manual_seed(0)

        def randn(shape, dtype, scale):
            return (torch.randn(shape, generator=gen, device="cuda") * scale).to(getattr(torch, dtype))

        self.acts = [randn(out_shape, out_dtype, 1.0) for _ in range(layers + 1)]  # acts[0]: the input
        self.args = []  # per layer: its inputs after the data, in the kernel's order
        for i in range(layers):
            extra = []
            for name, shape, dtype in inputs[1:]:
                if name == "residual":
                    extra.append(self.acts[max(i - 1, 0)])
                elif name == "weight":  # O(1) activations: 1 / sqrt(fan-in), (N, K)'s or HWIO's
                    fan_in = shape[-1] if len(shape) == 2 else shape[0] * shape[1] * shape[2]
                    extra.append(randn(shape, dtype, fan_in ** -0.5))
                else:  # fp8's scales, a channel scale or bias
                    extra.append(randn(shape, dtype, 0.1))
            self.args.append(extra)

    def run(self, pdl: bool) -> None:
        launch = self.kernels[pdl].torch_launch(self.acts[0].device)
        for i, extra in enumerate(self.args):
            launch(self.acts[i], *extra, out=self.acts[i + 1])

    def outputs(self) -> list:
        return [a.clone() for a in self.acts[1:]]


def graph(fn):
    """``fn()`` captured in a CUDA graph (warmed up on a side stream first); returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def median_us(replays: dict, iters: int, rounds: int) -> dict:
    """{variant: median us per call} of each ``replays[variant]()``, timed in turn for ``rounds``
    rounds of ``iters`` calls after a warm-up (drifting clocks hit both alike)."""
    samples = {name: [] for name in replays}
    for fn in replays.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in replays.items():
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / iters * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def device_profile(fn) -> tuple[float, float]:
    """(us of CUDA kernel device time, kernel launches) per ``fn()`` call (eager, the profiler)."""
    rows = kernel_table(fn, 20)
    return sum(r.seconds for r in rows) * 1e6, sum(r.launches for r in rows)


def started_early(fn) -> str:
    """"k/n": of the n device activities (kernels, copies) of one profiled ``fn()`` (a replay), the
    k that started before the one before them ended."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    early = sum(start < spans[i - 1][1] for i, (start, _) in enumerate(spans) if i)
    return f"{early}/{len(spans)}"


def row(name: str, wall: dict, profiles: dict, early: dict) -> str:
    """A table row: wall times per replay, what PDL saves, the device-time sums (``device_profile``)
    and the kernels that started early (``started_early``)."""
    saved, kernels = wall[False] - wall[True], profiles[False][1]
    return (f"| {name} | {kernels:.0f} | {wall[False]:.1f} | {wall[True]:.1f} | {saved:+.1f} "
            f"({saved / kernels:+.2f}/kernel) | {profiles[False][0]:.1f} | {profiles[True][0]:.1f} | "
            f"{early[False]} / {early[True]} |")


def chain_row(spec: str, layers: int, iters: int, rounds: int) -> str:
    chain = Chain(spec, layers)
    results = {}
    for on in (False, True):  # checked first: eager, then a replay
        chain.run(on)
        results[on] = chain.outputs()
    replays = {on: graph(lambda on=on: chain.run(on)) for on in (False, True)}
    for on, replay in replays.items():
        for out in chain.acts[1:]:
            out.fill_(float("nan"))
        replay()
        assert all(torch.equal(a, b) for a, b in zip(chain.outputs(), results[False])), f"PDL={on}: replay differs"
    assert all(torch.equal(a, b) for a, b in zip(results[True], results[False])), "PDL's outputs differ"
    wall = median_us(replays, iters, rounds)
    profiles = {on: device_profile(lambda on=on: chain.run(on)) for on in (False, True)}
    early = {on: started_early(replay) for on, replay in replays.items()}
    config = chain.kernels[True].config
    kind = ("warp-specialized" + (" persistent" if config.warp_specialized == 2 else "") if config.warp_specialized
            else config.intrinsic) + (f", split-K {config.split_k}" if config.split_k > 1 else "")
    return row(f"{layers} x {spec} ({kind})", wall, profiles, early)


def model_row(name: str, batch: int, iters: int, rounds: int) -> str:
    from tc_autotune.pytorch import ops
    from tc_autotune.pytorch.bench import build_model
    from tc_autotune.pytorch.optimize import optimize

    model, x, _, _ = build_model(name, batch)
    replays, outputs, profiles = {}, {}, {}
    with torch.no_grad():
        for on in (False, True):
            os.environ[build_cache.PDL_ENV] = "1" if on else "0"
            ops.clear_launches()  # bound again, to the kernels of this setting
            fast = optimize(model, (x,))
            outputs[on] = fast(x).clone()
            pdl_layers = [launch.kernel.pdl for launch in ops._LAUNCHES.values() if isinstance(launch, ops.TorchLaunch)]
            assert all(p == on for p in pdl_layers), f"PDL={on}: a layer bound the other build"
            replays[on] = graph(lambda fast=fast: fast(x))
            profiles[on] = device_profile(lambda fast=fast: fast(x))
    os.environ.pop(build_cache.PDL_ENV)
    assert torch.equal(outputs[True], outputs[False]), "the PDL model's output differs"
    wall = median_us(replays, iters, rounds)
    early = {on: started_early(replay) for on, replay in replays.items()}
    return row(f"{name} batch {batch} (optimized: {len(pdl_layers)} layers on our kernels)", wall, profiles, early)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", default=list(CHAINS), help="workloads to chain (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=30, help="layers per chain")
    parser.add_argument("--model", help="also time this optimized model (resnet50, mlp, resnet50-layer3)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iters", type=int, default=200, help="replays per timed round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    gpu = default_gpu()
    if not has_pdl(gpu.arch):
        raise SystemExit(f"PDL needs sm_90 or above; this GPU is {gpu.name} ({gpu.arch})")
    print(f"{gpu.name}: CUDA-graph replay, median of {args.rounds} rounds of {args.iters}; us per replay\n")
    print("| chain | kernels per replay | wall, plain | wall, PDL | PDL saves | device sum, plain | device sum, PDL "
          "| started early, plain / PDL |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for spec in args.specs:
        print(chain_row(spec, args.layers, args.iters, args.rounds), flush=True)
    if args.model:
        print(model_row(args.model, args.batch, args.iters, args.rounds), flush=True)


if __name__ == "__main__":
    main()
