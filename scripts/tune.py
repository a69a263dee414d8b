#!/usr/bin/env python
"""Tune the Tensor Core conv2d template for one or more workloads on the local GPU.

    python scripts/tune.py --workload tutorial --trials 128

Exit codes: 0 done, 2 bad arguments, 3 no CUDA GPU, 4 nothing valid was measured.
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tc_autotune.autotune import TUNERS  # noqa: E402  (no TVM import: fast argument errors)

EXIT_OK, EXIT_BAD_ARGS, EXIT_NO_GPU, EXIT_NOTHING_VALID = 0, 2, 3, 4


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(EXIT_BAD_ARGS, f"{self.prog}: error: {message}\n")


def positive_number(kind, what):
    """An argparse type: ``kind`` (int or float) parsed from the text, and > 0."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value

    return parse


positive = positive_number(int, "an integer")
seconds = positive_number(float, "a number of seconds")


def parse_args(argv):
    p = OneLineParser(prog="tune.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", action="append", required=True,
                   help="preset name (tutorial, rfc-3x3-b32, resnet50-conv1-b1, ...) or spec "
                        "'n=1,h=56,c=64,k=64,r=3,pad=1' (repeatable)")
    p.add_argument("--trials", type=positive, default=128, help="new measurements per workload (128)")
    p.add_argument("--tuner", choices=TUNERS, default="xgb")
    p.add_argument("--log", default="tuning.jsonl", help="JSONL log to append to and resume from")
    p.add_argument("--transfer-log", action="append", default=[],
                   help="other logs whose records pre-train the cost model")
    p.add_argument("--early-stopping", type=positive, help="stop after N trials without improvement")
    p.add_argument("--batch-size", type=positive, default=16, help="configs per measured batch (16)")
    p.add_argument("--build-workers", type=positive, help="parallel builds (default: one per core)")
    p.add_argument("--timeout", type=seconds, default=30.0,
                   help="seconds a candidate may take on the GPU, load+check+timing (30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", help="CUDA arch to tune for, e.g. sm_90 (must be the local GPU's)")
    p.add_argument("--no-cudnn", action="store_true", help="skip the cuDNN comparison at the end")
    p.add_argument("-v", "--verbose", action="store_true")
    return p, p.parse_args(argv)


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    from tc_autotune import workloads

    try:
        wls = [workloads.get(spec) for spec in args.workload]
    except ValueError as err:
        parser.error(f"bad --workload: {err}")
    if args.target is not None and not (args.target.startswith("sm_") and args.target[3:].isdigit()):
        parser.error(f"bad --target {args.target!r}: expected a CUDA arch such as sm_90")

    from tc_autotune.autotune import NoGpuError, tune_workload
    from tc_autotune.gpu import local_gpu
    from tc_autotune.measure import MeasureOptions

    gpu = local_gpu()
    if gpu is None:
        print("tune.py: no CUDA GPU found: tuning measures on the GPU, run it on a machine with one",
              file=sys.stderr)
        return EXIT_NO_GPU
    if args.target and args.target != gpu.arch:
        parser.error(f"bad --target {args.target}: the local GPU ({gpu.name}) is {gpu.arch}")

    options = MeasureOptions(build_workers=args.build_workers or 0, run_timeout=args.timeout)
    failed = []
    for wl in wls:
        try:
            summary = tune_workload(wl, args.trials, args.log, tuner=args.tuner, batch_size=args.batch_size,
                                    early_stopping=args.early_stopping, seed=args.seed, options=options,
                                    transfer_logs=args.transfer_log, compare_cudnn=not args.no_cudnn,
                                    gpu=gpu)
        except NoGpuError as err:
            print(f"tune.py: {err}", file=sys.stderr)
            return EXIT_NO_GPU
        except KeyboardInterrupt:
            print(f"tune.py: interrupted; measurements so far are in {args.log}", file=sys.stderr)
            return 130
        print(report(summary, gpu))
        if summary.best_config is None:
            failed.append(str(wl))
    if failed:
        print(f"tune.py: nothing valid was measured for {', '.join(failed)} (see {args.log})", file=sys.stderr)
        return EXIT_NOTHING_VALID
    return EXIT_OK


def report(summary, gpu) -> str:
    lines = [f"== {summary.workload} on {gpu.name}: {summary.trials} trials in {summary.elapsed:.0f} s, "
             f"{summary.errors} errors {summary.error_counts} -> {summary.log}",
             f"   resumed from {summary.resumed} earlier records on this GPU; "
             f"{summary.other_records} records of other workloads or GPUs to learn from"]
    if summary.best_config is None:
        lines.append("   no valid config measured")
        return "\n".join(lines)
    flops = summary.workload.flops
    lines.append(f"   best config: {summary.best_config.as_dict()}")
    lines.append(f"   best (search): {summary.best_seconds * 1e3:.4f} ms = "
                 f"{flops / summary.best_seconds / 1e12:.1f} TFLOP/s")
    if summary.final_seconds:
        lines.append(f"   best (re-timed): {summary.final_seconds * 1e3:.4f} ms = "
                     f"{flops / summary.final_seconds / 1e12:.1f} TFLOP/s")
    if summary.cudnn_seconds:
        lines.append(f"   cuDNN (PyTorch, same run): {summary.cudnn_seconds * 1e3:.4f} ms = "
                     f"{flops / summary.cudnn_seconds / 1e12:.1f} TFLOP/s; "
                     f"cuDNN/tuned time ratio {summary.cudnn_ratio:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
