# GPU run 4 (2026-12-02): the warp-specialized and dense GPU tests with consumer_n and deep_ring; the
# M = 128 GEMMs tuned 64 trials each with them, timed before and after against cuBLAS.
set -u
out=$1
date -u > $out/times.txt
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider -n 14 tests/test_gpu_warp_specialized.py tests/test_gpu_dense.py > $out/test_ws.txt 2>&1; echo "ws tests rc=$?"; tail -3 $out/test_ws.txt
timeout 100 python scripts/benchmark.py --job lab/ab-20261202/m128b-tune.toml --log tuning_logs --profile --repeat 20 > $out/bench_before.txt 2>&1; echo "before rc=$?"; tail -7 $out/bench_before.txt
timeout 200 python scripts/nightly.py lab/ab-20261202/m128b-tune.toml --budget-minutes 3 > $out/tune.txt 2>&1; echo "tune rc=$?"; grep -A8 "^| workload" $out/tune.txt; grep -A4 "^Best log" $out/tune.txt
cp -r lab/ab-20261202/m128b $out/ 2>/dev/null; cp tuning_logs/nvidia-h200.jsonl $out/
timeout 100 python scripts/benchmark.py --job lab/ab-20261202/m128b-tune.toml --log tuning_logs --profile --repeat 20 > $out/bench_after.txt 2>&1; echo "after rc=$?"; tail -7 $out/bench_after.txt
date -u >> $out/times.txt
