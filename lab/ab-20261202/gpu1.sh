# GPU run 1 (2026-12-02): the fp32 fold's tests, the fp32 A/B, the GPU tests owed for 63b711a.
set -u
out=$1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $out/gpu.txt
date -u > $out/start.txt
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider -n 8 tests/test_fp32_input.py > $out/test_fp32.txt 2>&1; echo "fp32 tests rc=$?"; tail -3 $out/test_fp32.txt
cd lab/ab-20261202
timeout 200 python ../probes/pick_ab.py fp32-before.json fp32-choice.json fp32-fp16-twin.json --out $out/fp32-ab.json > $out/fp32-ab.txt 2>&1; echo "ab rc=$?"; tail -8 $out/fp32-ab.txt
cd ../..
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider -n 14 tests/test_gpu_dense.py tests/test_gpu_pytorch.py > $out/test_owed.txt 2>&1; echo "owed rc=$?"; tail -3 $out/test_owed.txt
date -u >> $out/start.txt
