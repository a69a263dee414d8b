#!/usr/bin/env python
"""ResNet-50 (fp16) through TVM's model compiler with and without the tuned kernels, against
PyTorch eager in the same process (GPU; ``tc_autotune.relax.bench``).

    python scripts/benchmark_relax.py                       # batch 1 and 32
    python scripts/benchmark_relax.py --batch 32 --json relax.json --log resnet50-b32.jsonl

Per batch: torch.export and import into Relax, ``relax`` (tvm.compile with TVM's default CUDA
pipeline and dlight schedules), ``relax+tc`` (tc_autotune.relax.partition, then build), each
output checked against the fp32 PyTorch model, then VM calls and PyTorch eager timed (median of
repeats, synchronized).  Prints each phase's seconds, a table and, with --json, the results.
Exit codes: 0 done, 1 an output was wrong, 2 bad arguments, 3 no CUDA GPU (or no PyTorch),
9 a file or folder cannot be read or written.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tc_autotune.cli import common as cli  # noqa: E402  (no TVM import: fast argument errors)


def parse_args(argv):
    p = cli.script_parser("benchmark_relax.py", __doc__)
    p.add_argument("--batch", action="append", type=cli.positive_int, help="batch, repeatable (default: 1 and 32)")
    p.add_argument("--log", action="append", default=[], type=cli.existing_path,
                   help="tuning logs whose best records come first (apply_history_best), repeatable")
    p.add_argument("--json", type=cli.writable_file, help="also write the results as JSON here")
    return p, p.parse_args(argv)


def main(argv=None) -> int:
    with cli.io_errors_exit("benchmark_relax.py"):  # permission denied anywhere: one line, exit 9
        return _main(argv)


def _main(argv) -> int:
    _, args = parse_args(argv)
    missing = cli.torch_gpu_missing("benchmark_relax.py")
    if missing:
        print(missing, file=sys.stderr)
        return 3
    import contextlib

    import tvm

    if not tvm.cuda(0).exist:
        print("benchmark_relax.py: TVM sees no CUDA GPU (tvm.cuda(0).exist is False)", file=sys.stderr)
        return 3
    from tc_autotune.api import apply
    from tc_autotune.relax import bench

    with apply.apply_history_best(args.log) if args.log else contextlib.nullcontext():
        result = bench.run(tuple(args.batch or (1, 32)), say=lambda text: print(text, flush=True))
    print(bench.table(result))
    print(f"total {result['total_s']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if any(row.get("wrong") for row in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
