# GPU run 2: the swap_ab kernels' tests (the along-K probes), then the six fp8 GEMMs of M <= 16 tuned
# (64 trials each) with the along-K consumers in the space.  Run 3 (bench) times the 15 on the records.
out=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
python -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu_swap_ab.py 2>&1 | tail -3; date -u
timeout 330 python scripts/nightly.py lab/ab-20261207/fp8-small-m.toml --budget-minutes 5 > $out/tune.txt 2>&1; echo "tune rc=$?"
grep -A10 "^| workload" $out/tune.txt | head -12
cp -r lab/ab-20261207/fp8 $out/ 2>/dev/null; cp tuning_logs/nvidia-h*.jsonl $out/; date -u
