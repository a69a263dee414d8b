"""Time the default and the best logged config of each workload against the baseline (cuDNN;
dense: cuBLAS), in one process, all by the package's one timer.

    python scripts/benchmark.py --log tuning_logs/nvidia-h200.jsonl [--workload tutorial ...]
    python scripts/benchmark.py --log LOG --sweep stages=1,2,3,4     # ablation of knobs
    python scripts/benchmark.py --log LOG --profile   # + kernel device time (torch.profiler)

Installed, the same program is the command tc-benchmark (tc-benchmark --log LOG ...).
Workloads: --workload and --job, else tutorial, rfc-3x3-b1, rfc-3x3-b32, rfc-3x3-b256,
rfc-1x1-b32, rfc-1x1-b256.  Every argument, path and workload is checked before the GPU is
touched or a kernel is built.
Exit codes: 0 done, 2 bad arguments or job file (one line naming the bad value),
3 no CUDA GPU, 9 a file or folder cannot be read or written (permission denied: one line),
10 the GPU could not time a kernel (the timer's CUDA error: one line), 130 interrupted.
"""

import json
import logging
import sys

from . import common as cli  # no TVM import: fast argument errors
from ..templates.registry import DEFAULT  # the default template's knobs (--sweep); no TVM either

PROG = "tc-benchmark"
DEFAULT_WORKLOADS = ["tutorial", "rfc-3x3-b1", "rfc-3x3-b32", "rfc-3x3-b256", "rfc-1x1-b32", "rfc-1x1-b256"]


def knob_values(text) -> tuple[str, list]:
    """``KNOB=V1,V2,...`` with every value among the knob's candidates (the default template's):
    (knob, values)."""
    knobs = DEFAULT.knobs
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or name not in knobs or not values.strip():
        raise cli.BadValue(f"{text!r}: expected KNOB=V1,V2 with KNOB one of {', '.join(knobs)}")
    parsed = [int(v) if v.strip().isdigit() else v.strip() for v in values.split(",")]
    outside = [v for v in parsed if v not in knobs[name]]
    if outside:
        raise cli.BadValue(f"{name}: {outside} not among its values {list(knobs[name])}")
    return name, parsed


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("--workload", action="append", type=cli.workload_name,
                   help="preset or spec (repeatable; default: the list above)")
    p.add_argument("--job", type=cli.existing_path, help="also take the workloads of a nightly job file")
    p.add_argument("--log", action="append", type=cli.existing_path,
                   help="tuning log(s) or folder(s) whose best records to time (repeatable)")
    p.add_argument("--json", type=cli.writable_file, help="also write the rows as JSON here")
    p.add_argument("--plot-dir", type=cli.writable_dir,
                   help="write PNG plots here (needs matplotlib; not with --sweep)")
    p.add_argument("--curve-log", action="append", default=[], type=cli.existing_path,
                   help="log(s) to draw tuning curves from (default: the --log files)")
    p.add_argument("--sweep", action="append", default=[], type=knob_values, metavar="KNOB=V1,V2,...",
                   help="ablation: vary knobs of each workload's best (else default) config (repeatable)")
    p.add_argument("--profile", action="store_true",
                   help="also each side's kernel device time per call from the profiler (CUPTI via "
                        "torch.profiler; needs PyTorch on the GPU)")
    p.add_argument("--pdl", action="store_true",
                   help="build our kernels with Programmatic Dependent Launch, as torch calls and optimized "
                        "models launch them (sm_90+; the graph view; --profile still times the plain builds)")
    p.add_argument("--repeat", type=cli.trial_count, default=50, help="timed repeats per kernel (median; 50)")
    p.add_argument("--min-repeat-ms", type=cli.repeat_ms, default=10,
                   help="each repeat runs back-to-back launches for at least this long (10; 0: no minimum)")
    args = p.parse_args(argv)
    knobs = {}
    for name, values in args.sweep:
        if name in knobs:
            p.error(f"argument --sweep: knob {name} given twice")
        knobs[name] = values
    args.sweep = knobs
    if args.pdl and knobs:
        p.error("argument --pdl: not with --sweep (a sweep times the plain builds)")
    names = list(args.workload or [])
    if args.job:
        from ..tuning import jobs

        try:
            entries = jobs.load_job(args.job).entries
        except jobs.JobError as err:
            p.error(f"argument --job: {err}")
        seen = set()
        names += [e.name for e in entries if not (e.workload in seen or seen.add(e.workload))]
    args.names = names or DEFAULT_WORKLOADS
    return p, args


def main(argv=None, prog: str = PROG) -> int:
    with cli.io_errors_exit(prog):  # permission denied anywhere: one line, exit 9
        return _main(argv, prog)


def _main(argv, prog: str) -> int:
    parser, args = parse_args(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from ..backends.cuda.gpu import probe_local_gpu

    probe = probe_local_gpu()
    if probe.gpu is None:
        print(f"{prog}: {probe.no_gpu_message()}: the benchmark times kernels on the GPU, run it on a "
              "machine with one", file=sys.stderr)
        return cli.EXIT_NO_GPU
    if args.profile and (missing := cli.torch_gpu_missing(prog)):
        print(f"{missing}: --profile reads the kernels' times through torch.profiler", file=sys.stderr)
        return cli.EXIT_NO_GPU
    from ..backends.cuda.timer import TimerError
    from ..tuning import benchmark

    timing = dict(logs=args.log, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    try:
        if args.sweep:
            rows = benchmark.sweep(args.names, args.sweep, **timing)
            print(benchmark.sweep_table(rows))
        else:
            rows = benchmark.benchmark(args.names, profile=args.profile, pdl=args.pdl, **timing)
            print(benchmark.markdown_table(rows))
            if args.plot_dir:
                written = benchmark.write_plots(rows, args.plot_dir, args.curve_log or args.log or [])
                print("plots: " + (", ".join(written) if written else "skipped (matplotlib not installed)"))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return cli.EXIT_INTERRUPTED
    except TimerError as err:  # a kernel that faults when replayed, a capture CUDA refused
        print(f"{prog}: {err}", file=sys.stderr)
        return cli.EXIT_TIMER
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.as_dict() for r in rows], f, indent=1)
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.benchmark
    sys.exit(main())
