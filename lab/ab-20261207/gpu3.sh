# GPU run 3 (the device time left, ~2 min): the two fp8 GEMMs where the along-K consumers measured
# fastest, tuned for a minute (their starting tilings, along K among them, are measured first), then
# timed on the merged records with torch._scaled_mm beside them.
out=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
timeout 75 python scripts/nightly.py lab/ab-20261207/fp8-along-k.toml --budget-minutes 1 > $out/tune.txt 2>&1; echo "tune rc=$?"
grep -A4 "^| workload" $out/tune.txt | head -6
cp -r lab/ab-20261207/fp8 $out/ 2>/dev/null; cp tuning_logs/nvidia-h*.jsonl $out/; date -u
timeout 45 python scripts/benchmark.py --job lab/ab-20261207/fp8-along-k.toml --log tuning_logs --profile --repeat 20 > $out/bench-after.txt 2>&1; echo "bench rc=$?"; tail -6 $out/bench-after.txt; date -u
