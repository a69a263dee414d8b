"""Search quality on held-out shapes: zero-shot, 32/64/256 trials with transfer, 64 without.

    python lab/run_study.py lab/heldout.toml --budget-minutes 9   # tune (resumable)
    python lab/run_study.py lab/heldout.toml --report study.md   # re-time beside cuDNN

A maintainers' harness of a checkout (lab/), not a command of the installed package.
Each workload of the job gets its own two logs in --out (default: the job's best_log_dir), so
no held-out record trains anything else.  Tuning resumes where the logs stop; --report
re-times every arm's config and cuDNN in one process and writes a markdown table.
Exit codes: 0 done, 2 bad arguments or job file, 3 no GPU, 7 the budget ran out before every
workload was tuned (run it again to go on), 9 a file or folder cannot be read or written
(permission denied: one line).
"""

import json
import logging
import sys

from tc_autotune.cli import common as cli  # no TVM import
from tc_autotune.search.xgb_tuner import XGB_VARIANTS  # no TVM import either

PROG = "run_study.py"
EXIT_INCOMPLETE = 7


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("job", type=cli.existing_path, help="job file listing the held-out workloads")
    p.add_argument("--out", type=cli.writable_dir, help="folder of the study's logs (the job's best_log_dir)")
    p.add_argument("--trials", type=cli.trial_count, default=256, help="trials of the transfer run (256)")
    p.add_argument("--plain-trials", type=cli.trial_count, default=64, help="trials without transfer (64)")
    p.add_argument("--tuner", choices=tuple(XGB_VARIANTS), default="xgb",
                   help="search of the transfer arm (xgb); another one gets a log of its own")
    p.add_argument("--budget-minutes", type=cli.positive_float, help="stop starting workloads after this")
    p.add_argument("--estimate-minutes", type=cli.positive_float, default=0.0,
                   help="what one workload is expected to take, before one was timed")
    p.add_argument("--report", type=cli.writable_file, help="re-time and write a markdown table here")
    p.add_argument("--json", type=cli.writable_file, help="with --report: the rows as JSON too")
    return p.parse_args(argv)


def main(argv=None, prog: str = PROG) -> int:
    with cli.io_errors_exit(prog):  # permission denied anywhere: one line, exit 9
        return _main(argv, prog)


def _main(argv, prog: str) -> int:
    args = parse_args(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    from tc_autotune.tuning.jobs import JobError, load_job  # no TVM: a bad job file fails fast

    try:
        job = load_job(args.job)
    except JobError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    out = args.out or job.best_log_dir
    if not args.out:  # the study's logs go there: checked now, as --out is
        try:
            cli.writable_dir(out)
        except cli.BadValue as err:
            print(f"{prog}: job file {job.path}: best_log_dir: {err}", file=sys.stderr)
            return cli.EXIT_BAD_INPUT
        except cli.NoAccess as err:
            print(f"{prog}: job file {job.path}: best_log_dir: {err}", file=sys.stderr)
            return cli.EXIT_IO_ERROR
    from lab import study
    from tc_autotune.backends.cuda.gpu import probe_local_gpu

    probe = probe_local_gpu()
    gpu = probe.gpu
    if gpu is None:
        print(f"{prog}: {probe.no_gpu_message()}: the study measures on the GPU", file=sys.stderr)
        return cli.EXIT_NO_GPU
    wls = [e.workload for e in job.entries]
    if args.report:
        rows = study.retime(wls, out, gpu, checkpoints=(32, 64, args.trials), plain_trials=args.plain_trials)
        with open(args.report, "w") as f:
            f.write(f"{gpu.name}\n\n{study.markdown(rows)}\n")
        if args.json:
            with open(args.json, "w") as f:
                json.dump([study.row_dict(r) for r in rows], f, indent=1)
        print(study.markdown(rows))
        return cli.EXIT_OK
    budget = args.budget_minutes * 60 if args.budget_minutes else None
    from tc_autotune.measure.measurer import LocalMeasurer
    from tc_autotune.templates.registry import conv2d_space

    with LocalMeasurer(conv2d_space(wls[0], gpu)) as measurer:  # one build pool and runner for all
        left = study.run_tuning(wls, out, budget_s=budget, estimate_s=args.estimate_minutes * 60, gpu=gpu,
                                trials=args.trials, plain_trials=args.plain_trials, tuner=args.tuner,
                                measurer=measurer)
    if left:
        print(f"{prog}: {len(left)} workloads not tuned yet: run it again to go on", file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"{prog}: all {len(wls)} workloads tuned; re-time them with --report FILE")
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m lab.study_cli
    sys.exit(main())
