# The 2026-12-01 A/B of zero-shot picks on the GPU (lab/probes/pick_ab.py), from the repo root:
#   bash lab/ab-20261201/run.sh OUTDIR conv-validation dense-validation conv-heldout dense-heldout
# Decided before the run: the validation sets choose (highest graph-replay geomean over the baseline,
# and by more than 2% over today's way, else today's stays); the held-out sets only report.
set -u
out=$1; shift; cd lab/ab-20261201
declare -A sets=(
  [conv-validation]="170 conv-validation-main.json conv-validation-prior.json conv-validation-mainarch.json conv-validation-priorarch.json"
  [dense-validation]="150 dense-validation-dense-neigh.json dense-validation-dense-ranked.json dense-validation-dense-rankedarch.json dense-validation-dense-rankedprior.json dense-validation-dense-rankedpriorarch.json"
  [conv-heldout]="230 conv-heldout-main.json conv-heldout-prior.json conv-heldout-mainarch.json conv-heldout-priorarch.json"
  [dense-heldout]="170 dense-heldout-dense-neigh.json dense-heldout-dense-ranked.json dense-heldout-dense-rankedarch.json dense-heldout-dense-rankedprior.json dense-heldout-dense-rankedpriorarch.json")
for name in "$@"; do
  read -r limit files <<< "${sets[$name]}"
  timeout "$limit" python ../probes/pick_ab.py $files --out "$out/$name.json" > "$out/$name.txt" 2>&1
  echo "$name rc=$?"; tail -7 "$out/$name.txt"
done
