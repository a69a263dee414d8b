"""What a tuning log holds: per workload and GPU, records, template versions, best and stale.

    python scripts/records.py tuning_logs/nvidia-h100-80gb-hbm3.jsonl
    python scripts/records.py tuning_logs/ tuning_logs/history/ --stale-only

Installed, the same program is the command tc-records (tc-records LOG ... [--stale-only]).
A record is stale when another version of the kernel generator (template_version) made the
kernel it timed: apply-best skips it, the tuner learns from it and re-measures its config.
Exit codes: 0 done, 2 bad arguments (a log that does not exist: one line), 9 a log cannot be
read (permission denied: one line).
"""

import sys

from . import common as cli  # no TVM import

PROG = "tc-records"


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("logs", nargs="+", type=cli.existing_path, help="log files or folders of logs")
    p.add_argument("--stale-only", action="store_true", help="only workloads that have stale records")
    return p.parse_args(argv)


def main(argv=None, prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    from ..database import records

    with cli.io_errors_exit(prog):  # a log in a folder of logs that cannot be read: one line, exit 9
        rows = records.summarize(args.logs)
    if args.stale_only:
        rows = [r for r in rows if r.stale]
    print(records.summary_table(rows))
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.records
    sys.exit(main())
