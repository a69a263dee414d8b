# GPU run 2: the six fp8 GEMMs of M <= 16 timed on the shipped records (before), tuned 64 trials each
# with the along-K consumers in the space, and timed again (after), against torch._scaled_mm in the same
# process each time; both views, every kernel checked against the fp32 reference first.
out=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
B="python scripts/benchmark.py --job lab/ab-20261207/fp8-small-m-bench.toml --log tuning_logs --profile --repeat 20"
timeout 100 $B > $out/bench-before.txt 2>&1; echo "bench rc=$?"; tail -12 $out/bench-before.txt; date -u
timeout 300 python scripts/nightly.py lab/ab-20261207/fp8-small-m.toml --budget-minutes 4.5 > $out/tune.txt 2>&1; echo "tune rc=$?"
grep -A10 "^| workload" $out/tune.txt | head -12
cp -r lab/ab-20261207/fp8 $out/ 2>/dev/null; cp tuning_logs/nvidia-h*.jsonl $out/; date -u
timeout 100 $B > $out/bench-after.txt 2>&1; echo "bench rc=$?"; tail -12 $out/bench-after.txt; date -u
