"""Leave-one-out on CPU: how well the zero-shot model ranks a tuned workload it was not trained on.

For each conv workload of HISTORY (or of --job), a model trained on the shipped logs without it ranks
the configs HISTORY measured for it (``tuning.zero_shot_eval.leave_one_out``, xgboost).  Printed per
workload: the Spearman correlation of scores and throughput, and the best measured time over the time
of the measured config the model ranks first ("top"); then their geomean / mean.  A quick check of a
change to the prior or the features before the GPU judges it on the validation set (BENCHMARKS 38d).

    python lab/probes/zero_shot_loo.py tuning_logs/history/nvidia-h100-20261125-zoo.jsonl
    python lab/probes/zero_shot_loo.py tuning_logs/history/nvidia-h100-20261122-nvcc.jsonl --job tuning_logs/seeds.toml
"""
import argparse

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("history", help="a log of many measured configs per workload")
parser.add_argument("--job", help="only the workloads of this job file (default: every conv of HISTORY)")
args = parser.parse_args()

from tc_autotune.database import records  # noqa: E402
from tc_autotune.tuning import zero_shot_eval  # noqa: E402
from tc_autotune.tuning.benchmark import geomean  # noqa: E402
from tc_autotune.tuning.jobs import load_job  # noqa: E402
from tc_autotune.workloads.conv2d import Conv2dWorkload  # noqa: E402

if args.job:
    names = [str(e.workload) for e in load_job(args.job).entries if isinstance(e.workload, Conv2dWorkload)]
else:
    names = sorted({str(r.workload) for r in records.load(args.history)
                    if r.ok and isinstance(r.workload, Conv2dWorkload)})
rows = zero_shot_eval.leave_one_out(names, history=args.history)
for r in rows:
    print(f"{r.workload:64s} spearman {r.spearman:5.2f}  top {r.top_ratio:4.2f}  ({r.measured} measured)")
if rows:
    print(f"{len(rows)} workloads: geomean top {geomean([r.top_ratio for r in rows]):.3f}, mean spearman "
          f"{sum(r.spearman for r in rows) / len(rows):.3f}, top below 0.7: {sum(r.top_ratio < 0.7 for r in rows)}")
