# swap_ab's multicast pair and two consumers along K (issue #32, fp8 M <= 16): correctness, then the six
# M <= 16 fp8 LLM shapes' applied configs against the new variants and torch._scaled_mm, kernel device
# time (profiler), each kernel checked against the fp32 reference first.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
python -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu_swap_ab.py 2>&1 | tail -5
date -u
V16='[{"swap_ab": 8, "split_k": 1}, {"swap_ab": 8, "split_k": 1, "multicast_b": 1}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2, "multicast_b": 1}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2, "multicast_b": 1, "stages": 3}, {"swap_ab": 16, "split_k": 1, "block_col_warps": 2}]'
V1='[{"swap_ab": 8, "split_k": 1}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2, "stages": 3}, {"swap_ab": 8, "split_k": 1, "block_col_warps": 2, "stages": 2}]'
for nk in "n=4096,k=4096" "n=11008,k=4096" "n=4096,k=11008"; do
  python lab/probes/config_variants.py "dense:batch=1,m=16,$nk,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16" "$V16"
  python lab/probes/config_variants.py "dense:batch=1,m=1,$nk,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16" "$V1"
done
date -u
