#!/usr/bin/env python
"""Nightly tuning job: python scripts/nightly.py tuning_logs/nightly.toml [--report-only]

Exit codes: 0 fine, 2 bad job file or arguments, 3 no CUDA GPU, 5 another run holds the lock,
6 a workload regressed beyond the noise threshold or produced no valid record.
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    parser = OneLineParser(prog="nightly.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", help="job file (TOML or JSON)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the logs, no GPU")
    parser.add_argument("--budget-minutes", type=float, help="override the job's wall-clock budget")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    from tc_autotune import nightly

    try:
        job = nightly.load_job(args.job)
    except nightly.JobError as err:
        print(f"nightly.py: {err}", file=sys.stderr)
        return nightly.EXIT_BAD_JOB
    if args.budget_minutes is not None:
        if args.budget_minutes <= 0:
            parser.error(f"--budget-minutes must be positive, got {args.budget_minutes}")
        job.budget_s = args.budget_minutes * 60
    try:
        with nightly.job_lock(job):
            gpu = None
            if not args.report_only:
                from tc_autotune.gpu import local_gpu

                gpu = local_gpu()
                if gpu is None:
                    print("nightly.py: no CUDA GPU found (use --report-only to rebuild the report)",
                          file=sys.stderr)
                    return nightly.EXIT_NO_GPU
            report = nightly.run_nightly(job, gpu=gpu, report_only=args.report_only)
    except nightly.LockedError as err:
        print(f"nightly.py: {err}", file=sys.stderr)
        return nightly.EXIT_LOCKED
    print(report.to_markdown())
    if report.failed:
        names = ", ".join(f"{r.name} ({r.status})" for r in report.failed)
        print(f"nightly.py: {names}", file=sys.stderr)
        return nightly.EXIT_REGRESSION
    return nightly.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
