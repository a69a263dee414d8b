# The 2026-12-01 A/B of zero-shot picks on the GPU (lab/probes/pick_ab.py), from the repo root:
#   bash lab/ab-20261201/run.sh OUTDIR conv-validation dense-validation conv-heldout dense-heldout
#   bash lab/ab-20261201/run.sh OUTDIR h100-conv-validation h100-dense-validation h100-conv-heldout h100-dense-heldout
# Decided before the run: the validation sets choose (highest graph-replay geomean over the baseline,
# and by more than 2% over today's way, else today's stays); the held-out sets only report.
set -u
out=$1; shift; cd lab/ab-20261201
declare -A sets=(
  [conv-validation]="170 conv-validation-main.json conv-validation-prior.json conv-validation-mainarch.json conv-validation-priorarch.json"
  [dense-validation]="150 dense-validation-dense-neigh.json dense-validation-dense-ranked.json dense-validation-dense-rankedarch.json dense-validation-dense-rankedprior.json dense-validation-dense-rankedpriorarch.json"
  [conv-heldout]="230 conv-heldout-main.json conv-heldout-prior.json conv-heldout-mainarch.json conv-heldout-priorarch.json"
  # on an H100 (not lent on 2026-12-01): the code before that session (bb03e14) against after it
  [h100-conv-validation]="150 h100/validation-before.json h100/validation-now.json"
  [h100-dense-validation]="120 h100/validation-dense-before.json h100/validation-dense-now.json"
  [h100-conv-heldout]="200 h100/heldout-before.json h100/heldout-now.json"
  [h100-dense-heldout]="150 h100/heldout-dense-before.json h100/heldout-dense-now.json"
  [dense-heldout]="170 dense-heldout-dense-neigh.json dense-heldout-dense-ranked.json dense-heldout-dense-rankedarch.json dense-heldout-dense-rankedprior.json dense-heldout-dense-rankedpriorarch.json")
for name in "$@"; do
  read -r limit files <<< "${sets[$name]}"
  timeout "$limit" python ../probes/pick_ab.py $files --out "$out/$name.json" > "$out/$name.txt" 2>&1
  echo "$name rc=$?"; tail -7 "$out/$name.txt"
done
