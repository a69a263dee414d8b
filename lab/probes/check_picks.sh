#!/usr/bin/env bash
# usage: lab/probes/check_picks.sh [REPO [OUTDIR]]: today's build picks (apply.choose_config) for the validation,
# held-out and fp32 jobs on both Hopper GPUs against the pick files the GPU A/Bs judged; prints each
# workload whose pick moved and "picks identical: N/M" (run after any change to the template, prior or model)
set -euo pipefail
R=${1:-/work/main}; cd "$R"; T=${2:-$(mktemp -d)}; mkdir -p $T
run() { PYTHONPATH=$R python lab/probes/picks.py "$1" --gpu "$2" --way choice --label now --out "$T/$3.json" >/dev/null 2>&1; }
run lab/validation.toml "NVIDIA H200" cv & run lab/heldout.toml "NVIDIA H200" ch &
run lab/validation-dense.toml "NVIDIA H200" dv & run lab/heldout-dense.toml "NVIDIA H200" dh & wait
run lab/validation.toml "NVIDIA H100 80GB HBM3" hcv & run lab/heldout.toml "NVIDIA H100 80GB HBM3" hch &
run lab/validation-dense.toml "NVIDIA H100 80GB HBM3" hdv & run lab/heldout-dense.toml "NVIDIA H100 80GB HBM3" hdh & wait
run lab/fp32-input.toml "NVIDIA H200" fp & wait
python - "$T" <<'PY'
import json, sys
T = sys.argv[1]; A = "lab/ab-20261201/"
pairs = [("cv", A+"conv-validation-priorarch.json"), ("ch", A+"conv-heldout-priorarch.json"),
         ("dv", A+"dense-validation-dense-rankedpriorarch.json"), ("dh", A+"dense-heldout-dense-rankedpriorarch.json"),
         ("hcv", A+"h100/validation-now.json"), ("hch", A+"h100/heldout-now.json"),
         ("hdv", A+"h100/validation-dense-now.json"), ("hdh", A+"h100/heldout-dense-now.json"),
         ("fp", "lab/ab-20261202/fp32-choice-prior.json")]
tot = bad = 0
for k, ref in pairs:
    a = json.load(open(f"{T}/{k}.json"))["picks"]; b = json.load(open(ref))["picks"]
    for w in b:
        tot += 1
        ca = dict(a.get(w, {}).get("config") or {}); cb = b[w]["config"]
        extra = {k: ca.pop(k) for k in list(ca) if k not in cb}  # knobs newer than the file: must be off
        if ca != cb or any(extra.values()):
            bad += 1; print("DIFF", k, w)
print(f"picks identical: {tot-bad}/{tot}")
PY
