#!/usr/bin/env python
"""Tune the Tensor Core conv2d template for one or more workloads on the local GPU.

    python scripts/tune.py --workload tutorial --trials 128

Every argument and path is checked before the GPU is touched.
Exit codes: 0 done, 2 bad arguments (one line naming the bad value), 3 no CUDA GPU,
4 nothing valid was measured, 130 interrupted (the log keeps every finished batch).
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tc_autotune import cli  # noqa: E402  (no TVM import: fast argument errors)
from tc_autotune.tuner import TUNERS  # noqa: E402  (no TVM import either)


def parse_args(argv):
    p = cli.script_parser("tune.py", __doc__)
    p.add_argument("--workload", action="append", required=True, type=cli.workload_name,
                   help="preset name (tutorial, rfc-3x3-b32, resnet50-conv1-b1, ...) or spec "
                        "'n=1,h=56,c=64,k=64,r=3,pad=1' (repeatable)")
    p.add_argument("--trials", type=cli.positive_int, default=128, help="new measurements per workload (128)")
    p.add_argument("--tuner", choices=TUNERS, default="xgb", help="search strategy (xgb)")
    p.add_argument("--log", type=cli.appendable_log, default="tuning.jsonl",
                   help="JSONL log to append to and resume from (tuning.jsonl)")
    p.add_argument("--transfer-log", action="append", default=[], type=cli.existing_path,
                   help="other logs (files or folders) whose records pre-train the cost model, "
                        "besides the shipped histories")
    p.add_argument("--no-transfer", action="store_true",
                   help="do not learn from the shipped histories (tuning_logs/, tuning_logs/history/), "
                        "nor measure their zero-shot pick first")
    p.add_argument("--early-stopping", type=cli.positive_int, help="stop after N trials without improvement")
    p.add_argument("--batch-size", type=cli.positive_int, default=16, help="configs per measured batch (16)")
    p.add_argument("--build-workers", type=cli.positive_int, help="parallel builds (default: one per core)")
    p.add_argument("--timeout", type=cli.positive_float, default=30.0,
                   help="seconds a candidate may take on the GPU, load+check+timing (30)")
    p.add_argument("--seed", type=cli.non_negative_int, default=0, help="search seed (0)")
    p.add_argument("--target", type=cli.cuda_arch,
                   help="CUDA arch to tune for, e.g. sm_90 (must be the local GPU's)")
    p.add_argument("--no-cudnn", action="store_true", help="skip the cuDNN comparison at the end")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p, p.parse_args(argv)


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    from tc_autotune import workloads
    from tc_autotune.autotune import NoGpuError, tune_workload
    from tc_autotune.gpu import local_gpu
    from tc_autotune.measure import MeasureOptions

    wls = [workloads.get(spec) for spec in args.workload]  # validated by the parser
    gpu = local_gpu()
    if gpu is None:
        print("tune.py: no CUDA GPU found: tuning measures on the GPU, run it on a machine with one",
              file=sys.stderr)
        return cli.EXIT_NO_GPU
    if args.target and args.target != gpu.arch:
        parser.error(f"bad --target {args.target}: the local GPU ({gpu.name}) is {gpu.arch}")

    options = MeasureOptions(build_workers=args.build_workers or 0, run_timeout=args.timeout)
    failed = []
    for wl in wls:
        try:
            summary = tune_workload(wl, args.trials, args.log, tuner=args.tuner, batch_size=args.batch_size,
                                    early_stopping=args.early_stopping, seed=args.seed, options=options,
                                    transfer_logs=args.transfer_log, shipped_transfer=not args.no_transfer,
                                    compare_cudnn=not args.no_cudnn,
                                    gpu=gpu)
        except NoGpuError as err:
            print(f"tune.py: {err}", file=sys.stderr)
            return cli.EXIT_NO_GPU
        except KeyboardInterrupt:
            print(f"tune.py: interrupted; measurements so far are in {args.log}", file=sys.stderr)
            return cli.EXIT_INTERRUPTED
        print(summary.describe(gpu.name))
        if summary.best_config is None:
            failed.append(str(wl))
    if failed:
        print(f"tune.py: nothing valid was measured for {', '.join(failed)} (see {args.log})", file=sys.stderr)
        return cli.EXIT_NOTHING_VALID
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
