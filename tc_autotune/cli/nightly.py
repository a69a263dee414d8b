"""Nightly tuning job: python scripts/nightly.py tuning_logs/nightly.toml [--report-only]

Installed, the same program is the command tc-nightly (tc-nightly JOB [--report-only]).
The job file, the arguments and the job's paths (log, report and best-log folders) are checked
before the lock is taken or the GPU is touched.
With --devices 0,1 every batch is spread over those GPUs (default: GPU 0); the report names
the devices that measured each workload's records.
Exit codes: 0 fine, 2 bad job file or arguments, 3 no CUDA GPU, 5 another run holds the lock,
6 a workload regressed beyond the noise threshold, re-timed slower than the default config,
produced no valid record or could not be re-timed (the timer's error is logged), 8 every device died or hung (the log keeps every finished
measurement), 9 a file or folder cannot be read or written (permission denied).
"""

import sys

from . import common as cli  # no TVM import: fast argument errors

PROG = "tc-nightly"


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("job", type=cli.existing_path, help="job file (TOML or JSON)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the logs, no GPU")
    p.add_argument("--budget-minutes", type=cli.positive_float, help="override the job's wall-clock budget")
    p.add_argument("--no-transfer", action="store_true",
                   help="the tuner does not learn from the shipped histories (tuning_logs/history/)")
    p.add_argument("--devices", type=cli.gpu_indices,
                   help="local GPUs to spread each batch over, as nvidia-smi numbers them, e.g. 0,1 (default: 0)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p, p.parse_args(argv)


def check_job_paths(job, report_only: bool) -> None:
    """Raise cli.BadValue when a path the run will write cannot be written: found now, not
    after hours of tuning (the lock sits beside the log, so its folder must be writable)."""
    checks = [] if report_only else [("log", cli.appendable_log, job.log)]
    checks += [("lock", cli.appendable_log, job.lock_path), ("report_dir", cli.writable_dir, job.report_dir)]
    if not report_only:
        checks.append(("best_log_dir", cli.writable_dir, job.best_log_dir))
    for key, check, path in checks:
        try:
            check(path)
        except cli.BadValue as err:
            raise cli.BadValue(f"job file {job.path}: {key}: {err}") from None
        except cli.NoAccess as err:
            raise cli.NoAccess(f"job file {job.path}: {key}: {err}") from None


def main(argv=None, prog: str = PROG) -> int:
    with cli.io_errors_exit(prog):  # permission denied anywhere: one line, exit 9
        return _main(argv, prog)


def _main(argv, prog: str) -> int:
    parser, args = parse_args(argv, prog)
    cli.log_progress(args.verbose)
    from ..tuning import jobs  # the job file is checked before TVM is imported
    from ..measure.dispatch import AllDevicesLost  # no TVM either

    try:
        job = jobs.load_job(args.job)
        check_job_paths(job, args.report_only)
    except (jobs.JobError, cli.BadValue) as err:
        parser.error(str(err))  # one line, exit 2
    if args.budget_minutes is not None:
        job.budget_s = args.budget_minutes * 60
    try:
        with jobs.job_lock(job):
            from ..tuning import nightly
            from ..tuning.autotune import measurement_devices
            from ..measure.measurer import MeasureOptions

            gpu, options = None, None
            if not args.report_only:
                from ..backends.cuda.gpu import probe_local_gpu

                probe = probe_local_gpu()
                gpu = probe.gpu
                if gpu is None:
                    print(f"{prog}: {probe.no_gpu_message()} (use --report-only to rebuild the report)",
                          file=sys.stderr)
                    return cli.EXIT_NO_GPU
                try:
                    gpu, devices = measurement_devices(args.devices or (0,))
                except ValueError as err:
                    parser.error(f"bad --devices: {err}")
                options = MeasureOptions(devices=devices)
            report = nightly.run_nightly(job, gpu=gpu, report_only=args.report_only,
                                         transfer=not args.no_transfer, options=options)
    except jobs.LockedError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return cli.EXIT_LOCKED
    except AllDevicesLost as err:
        print(f"{prog}: {err}; the finished measurements are in {job.log}", file=sys.stderr)
        return cli.EXIT_DEVICES_LOST
    print(report.to_markdown())
    if report.failed:
        names = ", ".join(f"{r.name} ({r.status})" for r in report.failed)
        print(f"{prog}: {names}", file=sys.stderr)
        return cli.EXIT_REGRESSION
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.nightly
    sys.exit(main())
