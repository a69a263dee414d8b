"""How much do the zero-shot picks move when the logs change a little?  Trains the stored model on
two versions of the shipped logs (A: a folder, B: the same with the given best logs swapped in) under
the given xgboost parameter overrides, then counts the judged workloads (validation and held-out,
convs and dense, both Hoppers) whose pick differs between A and B.  A CPU probe; nothing shipped.
usage: python lab/probes/zero_shot_stability.py LOGS_DIR B_LOG... [--params '{"lambdarank_pair_method": "topk"}']"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JOBS = ["lab/validation.toml", "lab/heldout.toml", "lab/validation-dense.toml", "lab/heldout-dense.toml"]
GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]


def side(logs: Path, swaps: list[Path], params: dict, out: Path) -> dict:
    folder = out / "logs"
    shutil.copytree(logs, folder)
    for log in swaps:
        shutil.copy(log, folder / log.name.split("@")[0])
    from tc_autotune.search.cost_model import XGBCostModel
    from tc_autotune.tuning import zero_shot_train

    def overridden():
        model = XGBCostModel(seed=0, nthread=1)
        model.params.update(params)
        return model
    zero_shot_train._params = overridden
    zero_shot_train.store(folder)
    env = dict(os.environ, TC_AUTOTUNE_SHIPPED_LOGS=str(folder))
    procs = []
    for job in JOBS:
        for gpu in GPUS:
            f = out / f"{Path(job).stem}-{gpu.split()[1]}.json"
            procs.append((f, subprocess.Popen([sys.executable, "lab/probes/picks.py", job, "--gpu", gpu, "--way",
                                               "choice", "--label", "x", "--out", str(f)], env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    for _, p in procs:
        p.wait()
    return {f"{f.stem} {w}": v["config"] for f, _ in procs for w, v in json.load(open(f))["picks"].items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", type=Path)
    ap.add_argument("swap", type=Path, nargs="+", help="best logs of side B (name@anything.jsonl -> name)")
    ap.add_argument("--params", default="{}")
    args = ap.parse_args()
    params = json.loads(args.params)
    with tempfile.TemporaryDirectory() as tmp:
        a = side(args.logs, [], params, Path(tmp) / "a")
        b = side(args.logs, args.swap, params, Path(tmp) / "b")
    moved = [k for k in a if a[k] != b.get(k)]
    for k in moved:
        print("moved", k)
    print(f"params {params}: {len(a) - len(moved)}/{len(a)} picks the same")


if __name__ == "__main__":
    main()
