# Run at 99aaad2 (multicast_a, since reverted: it did not pay; docs/BENCHMARKS.md section 41).
# GPU run 3b (2026-12-02): the M = 128 GEMMs tuned 64 trials each (multicast_a among the starting
# tilings), then timed on the merged records.
set -u
out=$1
date -u > $out/times.txt
timeout 330 python scripts/nightly.py lab/ab-20261202/m128-tune.toml --budget-minutes 5 > $out/tune.txt 2>&1; echo "tune rc=$?"; tail -20 $out/tune.txt
cp -r lab/ab-20261202/m128 $out/ 2>/dev/null; cp tuning_logs/nvidia-h200.jsonl $out/
timeout 150 python scripts/benchmark.py --job lab/ab-20261202/m128-tune.toml --log tuning_logs --profile --repeat 20 > $out/bench_after.txt 2>&1; echo "after rc=$?"; tail -12 $out/bench_after.txt
date -u >> $out/times.txt
