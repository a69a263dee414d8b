# Run at 99aaad2 (multicast_a, since reverted: it did not pay; docs/BENCHMARKS.md section 41).
# GPU run 3a (2026-12-02): the warp-specialized and dense GPU tests with multicast_a; the M = 128
# GEMMs on the shipped records (before the retune).
set -u
out=$1
date -u > $out/times.txt
timeout 300 python -m pytest -m gpu -q -p no:cacheprovider -n 14 tests/test_gpu_warp_specialized.py tests/test_gpu_dense.py > $out/test_ws.txt 2>&1; echo "ws tests rc=$?"; tail -3 $out/test_ws.txt
timeout 150 python scripts/benchmark.py --job lab/ab-20261202/m128-tune.toml --log tuning_logs --profile --repeat 20 > $out/bench_before.txt 2>&1; echo "before rc=$?"; tail -12 $out/bench_before.txt
date -u >> $out/times.txt
