"""Tune the Tensor Core conv2d or dense template for one or more workloads on the local GPU(s)
or on remote GPUs behind a TVM RPC tracker.

    python scripts/tune.py --workload tutorial --trials 128
    python scripts/tune.py --workload llm-4096x4096-m128 --workload dense:m=128,n=4096,k=4096
    python scripts/tune.py --workload tutorial --devices 0,1
    python scripts/tune.py --workload tutorial --rpc-tracker 10.0.0.1:9190 --rpc-key h100

Installed, the same program is the command tc-tune (tc-tune --workload tutorial).
Every argument and path is checked before the GPU is touched.
Exit codes: 0 done, 2 bad arguments (one line naming the bad value), 3 no CUDA GPU (or no
RPC server to measure on), 4 nothing valid was measured, 8 every device died or hung during
the run (the log keeps every finished measurement), 9 a file or folder cannot be read or
written (permission denied: one line), 130 interrupted (the log keeps every finished batch).
"""

import logging
import sys

from . import common as cli  # no TVM import: fast argument errors
from ..search.xgb_tuner import TUNERS  # no TVM import either

PROG = "tc-tune"
RPC_CONNECT_S = 5.0  # the MeasureOptions default too; here without importing TVM


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("--workload", action="append", required=True, type=cli.workload_name,
                   help="preset name (tutorial, rfc-3x3-b32, resnet50-conv1-b1, dense-rfc-b32, "
                        "llm-4096x4096-m128, ...) or spec 'n=1,h=56,c=64,k=64,r=3,pad=1' or "
                        "'dense:m=128,n=4096,k=4096,b=nk' (repeatable)")
    p.add_argument("--trials", type=cli.trial_count, default=128,
                   help=f"new measurements per workload (128; at most {cli.MAX_TRIALS})")
    p.add_argument("--tuner", choices=TUNERS, default="xgb", help="search strategy (xgb)")
    p.add_argument("--log", type=cli.appendable_log, default="tuning.jsonl",
                   help="JSONL log to append to and resume from (tuning.jsonl)")
    p.add_argument("--transfer-log", action="append", default=[], type=cli.existing_path,
                   help="other logs (files or folders) whose records pre-train the cost model, "
                        "besides the shipped histories")
    p.add_argument("--no-transfer", action="store_true",
                   help="do not learn from the shipped histories (tuning_logs/, tuning_logs/history/), "
                        "nor measure their zero-shot pick first")
    p.add_argument("--early-stopping", type=cli.trial_count, help="stop after N trials without improvement")
    p.add_argument("--batch-size", type=cli.trial_count, default=16, help="configs per measured batch (16)")
    p.add_argument("--build-workers", type=cli.worker_count, help="parallel builds (default: one per core)")
    p.add_argument("--timeout", type=cli.seconds, default=30.0,
                   help="seconds a candidate may take on the GPU, load+check+timing (30)")
    p.add_argument("--seed", type=cli.non_negative_int, default=0, help="search seed (0)")
    p.add_argument("--target", type=cli.cuda_arch,
                   help="CUDA arch to tune for, e.g. sm_90 (must be the local GPU's)")
    p.add_argument("--devices", type=cli.gpu_indices,
                   help="local GPUs to measure on, as nvidia-smi numbers them, e.g. 0,1 "
                        "(default: every visible GPU of GPU 0's model)")
    p.add_argument("--rpc-tracker", type=cli.tracker_address, metavar="HOST:PORT",
                   help="measure on the remote GPUs of this TVM RPC tracker (with --rpc-key)")
    p.add_argument("--rpc-key", help="the key the RPC servers registered with")
    p.add_argument("--rpc-sessions", type=cli.worker_count,
                   help="RPC servers to measure on at once (default: every free server of the key)")
    p.add_argument("--rpc-connect-timeout", type=cli.seconds, default=RPC_CONNECT_S,
                   help=f"seconds to wait for the RPC tracker to answer a connection ({RPC_CONNECT_S:g})")
    p.add_argument("--no-baseline", "--no-cudnn", dest="no_baseline", action="store_true",
                   help="skip the comparison with the baseline (cuDNN; dense: cuBLAS) at the end "
                        "(always skipped with --rpc-tracker: it runs here; --no-cudnn is its earlier name)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p, p.parse_args(argv)


def main(argv=None, prog: str = PROG) -> int:
    with cli.io_errors_exit(prog):  # permission denied anywhere: one line, exit 9
        return _main(argv, prog)


def _main(argv, prog: str) -> int:
    parser, args = parse_args(argv, prog)
    cli.log_progress(args.verbose)
    if args.rpc_tracker and args.devices:
        parser.error("--devices names local GPUs: not with --rpc-tracker")
    if bool(args.rpc_tracker) != bool(args.rpc_key):
        parser.error("--rpc-tracker and --rpc-key go together")
    if args.rpc_sessions and not args.rpc_tracker:
        parser.error("--rpc-sessions needs --rpc-tracker")
    from .. import workloads
    from ..tuning.autotune import NoGpuError, measurement_devices, tune_workload
    from ..measure.dispatch import AllDevicesLost
    from ..measure.measurer import MeasureOptions

    wls = [workloads.get(spec) for spec in args.workload]  # validated by the parser
    options = MeasureOptions(build_workers=args.build_workers or 0, run_timeout=args.timeout,
                             rpc_connect_s=args.rpc_connect_timeout)
    try:
        gpu, devices = measurement_devices(args.devices, args.rpc_tracker, args.rpc_key, args.rpc_sessions,
                                           options)
    except NoGpuError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return cli.EXIT_NO_GPU
    except ValueError as err:
        parser.error(f"bad --devices: {err}")
    if args.target and args.target != gpu.arch:
        parser.error(f"bad --target {args.target}: the GPU measured on ({gpu.name}) is {gpu.arch}")
    old = next((wl for wl in wls if wl.dtype == "bfloat16" and int(gpu.arch[3:]) < 80), None)
    if old is not None:  # every config of its space is invalid there (rule bf16_arch)
        parser.error(f"bad --workload {old}: bfloat16 needs sm_80 or newer, the GPU measured on ({gpu.name}) "
                     f"is {gpu.arch}")
    fp8 = next((wl for wl in wls if getattr(wl, "scaled", False) and gpu.arch != "sm_90"), None)
    if fp8 is not None:  # every config of its space is invalid there (fp8 takes only Hopper's wgmma)
        parser.error(f"bad --workload {fp8}: fp8 needs sm_90 (Hopper's wgmma), the GPU measured on ({gpu.name}) "
                     f"is {gpu.arch}")
    options = MeasureOptions(build_workers=args.build_workers or 0, run_timeout=args.timeout, devices=devices,
                             rpc_connect_s=args.rpc_connect_timeout)
    logging.getLogger(prog).info("measuring on %d device(s) of %s: %s", len(devices), gpu.name,
                                 ", ".join(d.label for d in devices))
    failed = []
    for wl in wls:
        try:
            summary = tune_workload(wl, args.trials, args.log, tuner=args.tuner, batch_size=args.batch_size,
                                    early_stopping=args.early_stopping, seed=args.seed, options=options,
                                    transfer_logs=args.transfer_log, shipped_transfer=not args.no_transfer,
                                    compare_baseline=not (args.no_baseline or args.rpc_tracker),
                                    gpu=gpu)
        except NoGpuError as err:
            print(f"{prog}: {err}", file=sys.stderr)
            return cli.EXIT_NO_GPU
        except AllDevicesLost as err:
            print(f"{prog}: {err}; the finished measurements are in {args.log}", file=sys.stderr)
            return cli.EXIT_DEVICES_LOST
        except KeyboardInterrupt:
            print(f"{prog}: interrupted; measurements so far are in {args.log}", file=sys.stderr)
            return cli.EXIT_INTERRUPTED
        print(summary.describe(gpu.name))
        if summary.best_config is None:
            failed.append(str(wl))
    if failed:
        print(f"{prog}: nothing valid was measured for {', '.join(failed)} (see {args.log})", file=sys.stderr)
        return cli.EXIT_NOTHING_VALID
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.tune
    sys.exit(main())
