"""What a tuning log holds: per workload and GPU, records, unverified and stale ones, best times.

    python scripts/records.py tuning_logs/nvidia-h100-80gb-hbm3.jsonl
    python scripts/records.py tuning_logs/ tuning_logs/history/ --stale-only
    python scripts/records.py --restamp tuning_logs/ tuning_logs/history/ --jobs 2   # (maintainers)
    python scripts/records.py --train-zero-shot        # (maintainers) after adding a history

Installed, the same program is the command tc-records (tc-records LOG ... [--stale-only]).
A record is current when its template's sources hash to what it was stamped with; where they
changed since, it is unverified until the code its config generates is checked against the
code it timed (a build does that for the record it picks); a record whose code changed, or that
nothing can check, is stale: apply-best skips it, the tuner learns from it and re-measures it.
--restamp LOG... checks every unverified record of the logs (generating its config's code: TVM,
~0.5 s a config, --jobs at once), and rewrites each log atomically (never losing a line; the
old one kept as LOG.bak): today's source hash where the code is unchanged, stale where it is
not, which it lists.  --dry-run says what it would do and writes nothing.
--train-zero-shot [FOLDER] retrains the zero-shot model stored beside the shipped logs (FOLDER:
tuning_logs/ by default; it reads its *.jsonl and history/*.jsonl) where it is missing, stale or
behind those logs, and says what it was trained from; builds only read it.  Needs xgboost.
Exit codes: 0 done, 2 bad arguments (a log that does not exist: one line), 9 a log cannot be
read or written, or the model written (permission denied: one line).
"""

import logging
import sys
from pathlib import Path

from . import common as cli  # no TVM import

PROG = "tc-records"


def parse_args(argv, prog: str = PROG):
    p = cli.script_parser(prog, __doc__)
    p.add_argument("logs", nargs="*", type=cli.existing_path, help="log files or folders of logs")
    p.add_argument("--stale-only", action="store_true", help="only workloads that have stale records")
    p.add_argument("--train-zero-shot", action="store_true",
                   help="retrain the stored zero-shot model of the shipped logs (or of the one folder given) "
                        "where it is missing, stale or behind its logs")
    p.add_argument("--restamp", action="store_true",
                   help="check the unverified records of the logs against today's code and rewrite the logs")
    p.add_argument("--dry-run", action="store_true", help="with --restamp: report, write nothing")
    p.add_argument("--jobs", type=cli.worker_count, default=1,
                   help="with --restamp: processes generating code at once (default 1)")
    args = p.parse_args(argv)
    if args.train_zero_shot and args.restamp:
        p.error("--restamp and --train-zero-shot are separate steps: restamp first, then retrain")
    if not args.train_zero_shot and not args.logs:
        p.error("the following arguments are required: logs")
    if args.train_zero_shot and (len(args.logs) > 1 or (args.logs and not Path(args.logs[0]).is_dir())):
        p.error("--train-zero-shot takes at most one folder: the shipped logs' (tuning_logs/ by default)")
    if args.restamp and args.stale_only:
        p.error("--stale-only is for the summary, not --restamp")
    if not args.restamp and (args.dry_run or args.jobs != 1):
        p.error(f"{'--dry-run' if args.dry_run else '--jobs'} goes with --restamp")
    return args


def main(argv=None, prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    if args.train_zero_shot:
        return train_zero_shot(args.logs[0] if args.logs else None, prog)
    if args.restamp:
        return restamp(args.logs, args.dry_run, args.jobs, prog)
    from ..database import records

    with cli.io_errors_exit(prog):  # a log in a folder of logs that cannot be read: one line, exit 9
        rows = records.summarize(args.logs)
    if args.stale_only:
        rows = [r for r in rows if r.stale]
    print(records.summary_table(rows))
    return cli.EXIT_OK


def restamp(logs, dry_run: bool, jobs: int, prog: str) -> int:
    """Check the logs' unverified records against today's code; print what each log holds."""
    from ..api.kernel import code_hashes
    from ..database import restamp as restamping

    cli.log_progress()
    with cli.io_errors_exit(prog):  # a log it may not write: one line, exit 9 (those before it are done)
        reports = restamping.restamp(logs, lambda keys: _hash_codes(code_hashes, keys, jobs), dry_run=dry_run)
    for r in reports:
        verb = "would rewrite" if dry_run else ("rewrote" if r.written else "left")
        print(f"{r.path}: {r.records} records: {r.current} current, {r.stamped} stamped, {r.verified} verified, "
              f"{len(r.changed)} changed (now stale), {r.stale} stale before; {verb} "
              f"{r.rewritten if dry_run or r.written else 0} lines")
        for record in r.changed[:10]:
            print(f"  changed: {record.workload} config {record.config.get('index')} on {record.gpu or record.arch}"
                  f" ({record.seconds * 1e3:.4f} ms)" if record.ok else f"  changed: {record.workload} (failed)")
        if len(r.changed) > 10:
            print(f"  ... and {len(r.changed) - 10} more")
    if not dry_run and any(r.written for r in reports):
        print("the logs changed: where they are shipped logs, `tc-records --train-zero-shot` brings the "
              "zero-shot model up to them")
    return cli.EXIT_OK


def _hash_codes(code_hashes, keys, jobs: int) -> dict:
    logging.getLogger(__name__).info("generating the code of %d config(s) in %d process(es)", len(keys), jobs)
    return code_hashes(keys, jobs)


def train_zero_shot(folder, prog: str) -> int:
    """Retrain the stored zero-shot model where it is not current; print what it holds."""
    import json

    from ..tuning import zero_shot_train

    cli.log_progress()
    with cli.io_errors_exit(prog):  # a folder it may not write: one line, exit 9
        current, detail = zero_shot_train.stored_is_current(folder)  # detail: its path, or why not
        try:
            path = Path(detail) if current else zero_shot_train.store(folder)
        except ValueError as err:  # no shipped logs
            print(f"{prog}: {err}", file=sys.stderr)
            return cli.EXIT_BAD_INPUT
        doc = json.loads(path.read_bytes())
    models = "; ".join(f"{m['scope']} {m['gpu'][0]}: {m['rows']} records of {len(m['best'])} workloads"
                       for m in doc["models"]) or "none (no usable record)"
    print(f"{path}: {'current' if current else 'retrained (' + detail + ')'}\n"
          f"  {len(doc['feature_names'])} features, "
          f"{len(doc['logs'])} logs (sha256 {doc['logs_sha256'][:16]}), {len(doc['excluded'])} shapes excluded\n"
          f"  models: {models}")
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.records
    sys.exit(main())
