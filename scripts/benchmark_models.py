#!/usr/bin/env python
"""Time whole models the way PyTorch users run them, against PyTorch in the same mode (GPU).

    python scripts/benchmark_models.py --model resnet50 --batch 1 --batch 32
    python scripts/benchmark_models.py --model mlp --batch 128 --batch 2048 --mode eager --mode max-autotune
    python scripts/benchmark_models.py --model mlp --batch 2048 --measure   # layers PyTorch runs faster stay PyTorch's
    python scripts/benchmark_models.py --model resnet50 --measure off       # every layer fused, none timed
    python scripts/benchmark_models.py --calls             # host time of one conv call, each way
    python scripts/benchmark_models.py --first-forward --model resnet50 --batch 1

Modes: eager, graph (captured by hand), kernels (profiler: CUDA kernel time per forward),
default / reduce-overhead / max-autotune (torch.compile of both sides).  Every model's output is
checked against an fp32 reference before it is timed.  Exit codes: 0 done, 2 bad arguments,
3 no CUDA GPU (or no PyTorch), 9 a file or folder cannot be read or written (permission denied).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tc_autotune.cli import common as cli  # noqa: E402  (no TVM import: fast argument errors)

MEASURE = {None: None, "all": True, "untuned": "untuned", "off": False}  # --measure -> optimize's measure
MODES = ("eager", "graph", "kernels", "default", "reduce-overhead", "max-autotune")


def parse_args(argv):
    p = cli.script_parser("benchmark_models.py", __doc__)
    p.add_argument("--model", choices=("resnet50", "resnet50-layer3", "mlp"), default="resnet50",
                   help="resnet50-layer3: ResNet-50's largest stage alone (6 bottlenecks at 14x14)")
    p.add_argument("--batch", action="append", type=cli.positive_int, help="batch (mlp: tokens M), repeatable")
    p.add_argument("--mode", action="append", choices=MODES, help="repeatable (default: eager, graph, kernels, "
                   "reduce-overhead)")
    p.add_argument("--measure", nargs="?", const="all", choices=("all", "untuned", "off"),
                   help="optimize's measure: all (bare --measure): each layer timed against PyTorch's own and kept "
                   "only where not slower; untuned: only layers without a record; off (default: optimize's own, "
                   "untuned)")
    p.add_argument("--calls", action="store_true", help="time one conv call each way instead")
    p.add_argument("--first-forward", action="store_true", help="time optimize + the first forward instead")
    p.add_argument("--log", action="append", default=[], type=cli.existing_path,
                   help="tuning logs whose best records come first (apply_history_best), repeatable")
    p.add_argument("--json", type=cli.writable_file, help="also write the rows as JSON here")
    return p, p.parse_args(argv)


def main(argv=None) -> int:
    with cli.io_errors_exit("benchmark_models.py"):  # permission denied anywhere: one line, exit 9
        return _main(argv)


def _main(argv) -> int:
    _, args = parse_args(argv)
    missing = cli.torch_gpu_missing("benchmark_models.py")
    if missing:
        print(missing, file=sys.stderr)
        return 3
    import contextlib

    from tc_autotune.api import apply
    from tc_autotune.pytorch import bench

    with apply.apply_history_best(args.log) if args.log else contextlib.nullcontext():
        return _run(bench, args)


def _run(bench, args) -> int:
    if args.calls:
        result = bench.call_overhead()
        for name, value in result.items():
            print(f"{name:32s} {value:8.1f}" + (" us" if name != "fallbacks" else ""))
    elif args.first_forward:
        result = [bench.first_forward(args.model, b) for b in args.batch or [1]]
        for b, row in zip(args.batch or [1], result):
            print(f"{args.model} batch {b}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                                           for k, v in row.items()))
    else:
        result = []
        print("| model | batch | mode | ours (ms) | PyTorch (ms) | speedup | note |\n|---|---|---|---|---|---|---|")
        for batch in args.batch or [1]:
            modes = tuple(args.mode or ("eager", "graph", "kernels", "reduce-overhead"))
            for row in bench.model_rows(args.model, batch, modes, measure=MEASURE[args.measure]):
                result.append(row.as_dict())
                cell = lambda v, f="{:.3f}": f.format(v) if v is not None else ""  # noqa: E731
                print(f"| {row.model} | {row.batch} | {row.mode} | {cell(row.ours_ms)} | {cell(row.torch_ms)} | "
                      f"{cell(row.speedup, '{:.2f}x')} | {row.note} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
