#!/usr/bin/env python
"""Time default / best-logged configs against cuDNN: python scripts/benchmark.py --workload tutorial ..."""

import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

DEFAULT_WORKLOADS = ["tutorial", "rfc-3x3-b1", "rfc-3x3-b32", "rfc-3x3-b256", "rfc-1x1-b32", "rfc-1x1-b256"]


def _parse_sweep(items) -> dict:
    from tc_autotune.space import KNOBS

    knobs = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or name not in KNOBS or not values:
            raise ValueError(f"--sweep {item!r}: expected KNOB=V1,V2 with KNOB one of {', '.join(KNOBS)}")
        parsed = [int(v) if v.strip().isdigit() else v.strip() for v in values.split(",")]
        outside = [v for v in parsed if v not in KNOBS[name]]
        if outside:
            raise ValueError(f"--sweep {name}: {outside} not among its values {list(KNOBS[name])}")
        knobs[name] = parsed
    return knobs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", action="append", help="preset or spec (repeatable)")
    parser.add_argument("--job", help="take the workloads of a nightly job file")
    parser.add_argument("--log", action="append", help="tuning log(s) whose best records to time")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--plot-dir", help="write PNG plots here (needs matplotlib)")
    parser.add_argument("--curve-log", action="append", default=[],
                        help="log(s) to draw tuning curves from (default: the --log files)")
    parser.add_argument("--sweep", action="append", metavar="KNOB=V1,V2,...",
                        help="ablation: vary knobs of each workload's best (else default) config")
    parser.add_argument("--repeat", type=int, default=50, help="timed repeats per kernel (median)")
    parser.add_argument("--min-repeat-ms", type=float, default=10,
                        help="each repeat runs back-to-back launches for at least this long (10)")
    args = parser.parse_args(argv)
    try:
        knobs = _parse_sweep(args.sweep or [])
    except ValueError as err:
        parser.exit(2, f"benchmark.py: {err}\n")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from tc_autotune import benchmark, nightly

    names = list(args.workload or [])
    if args.job:
        try:
            entries = nightly.load_job(args.job).entries
        except nightly.JobError as err:
            parser.exit(2, f"benchmark.py: {err}\n")
        seen = set()
        names += [e.name for e in entries if not (e.workload in seen or seen.add(e.workload))]
    if knobs:
        rows = benchmark.sweep(names or DEFAULT_WORKLOADS, knobs, logs=args.log, repeat=args.repeat,
                               min_repeat_ms=args.min_repeat_ms)
        print(benchmark.sweep_table(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump([r.as_dict() for r in rows], f, indent=1)
        return 0
    rows = benchmark.benchmark(names or DEFAULT_WORKLOADS, logs=args.log, repeat=args.repeat,
                               min_repeat_ms=args.min_repeat_ms)
    table = benchmark.markdown_table(rows)
    print(table)
    if args.plot_dir:
        written = benchmark.write_plots(rows, args.plot_dir, args.curve_log or args.log or [])
        print("plots: " + (", ".join(written) if written else "skipped (matplotlib not installed)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.as_dict() for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
