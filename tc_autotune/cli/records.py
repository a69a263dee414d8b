"""What a tuning log holds: per workload and GPU, records, template versions, best and stale.

    python scripts/records.py tuning_logs/nvidia-h100-80gb-hbm3.jsonl
    python scripts/records.py tuning_logs/ tuning_logs/history/ --stale-only
    python scripts/records.py --train-zero-shot        # (maintainers) after adding a history

Installed, the same program is the command tc-records (tc-records LOG ... [--stale-only]).
A record is stale when another version of the kernel generator (template_version) made the
kernel it timed: apply-best skips it, the tuner learns from it and re-measures its config.
--train-zero-shot [FOLDER] retrains the zero-shot model stored beside the shipped logs (FOLDER:
tuning_logs/ by default; it reads its *.jsonl and history/*.jsonl) where it is missing, stale or
behind those logs, and says what it was trained from; builds only read it.  Needs xgboost.
Exit codes: 0 done, 2 bad arguments (a log that does not exist: one line), 9 a log cannot be
read, or the model written (permission denied: one line).
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
    args = p.parse_args(argv)
    if not args.train_zero_shot and not args.logs:
        p.error("the following arguments are required: logs")
    if args.train_zero_shot and (len(args.logs) > 1 or (args.logs and not Path(args.logs[0]).is_dir())):
        p.error("--train-zero-shot takes at most one folder: the shipped logs' (tuning_logs/ by default)")
    return args


def main(argv=None, prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    if args.train_zero_shot:
        return train_zero_shot(args.logs[0] if args.logs else None, prog)
    from ..database import records

    with cli.io_errors_exit(prog):  # a log in a folder of logs that cannot be read: one line, exit 9
        rows = records.summarize(args.logs)
    if args.stale_only:
        rows = [r for r in rows if r.stale]
    print(records.summary_table(rows))
    return cli.EXIT_OK


def train_zero_shot(folder, prog: str) -> int:
    """Retrain the stored zero-shot model where it is not current; print what it holds."""
    import json

    from ..tuning import zero_shot_train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
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
          f"  template version {doc['template_version']}, {len(doc['feature_names'])} features, "
          f"{len(doc['logs'])} logs (sha256 {doc['logs_sha256'][:16]}), {len(doc['excluded'])} shapes excluded\n"
          f"  models: {models}")
    return cli.EXIT_OK


if __name__ == "__main__":  # python -m tc_autotune.cli.records
    sys.exit(main())
