# GPU run 3: the 15 fp8 LLM shapes on the shipped logs (run 2's records merged) against torch._scaled_mm,
# both views (graph replay; kernel device time from the profiler), every kernel checked first.
out=$1
date -u
timeout 280 python scripts/benchmark.py --job tuning_logs/llm-dense-fp8.toml --log tuning_logs --profile --repeat 20 > $out/bench.txt 2>&1; echo "bench rc=$?"; tail -24 $out/bench.txt; date -u
