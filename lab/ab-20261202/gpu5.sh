# GPU run 5 (2026-12-02): the narrow-consumer GPU tests after the TMA-store chunk rule, the GPU tests of
# the paths the depth merge moved (PyTorch adapter, Relax, the runner's checker), and the one validation
# GEMM whose zero-shot pick the new M = 128 record moved, before against after.
set -u
out=$1
date -u > $out/times.txt
timeout 50 python -m pytest -m gpu -q -p no:cacheprovider -n 14 tests/test_gpu_warp_specialized.py -k "narrow or multicast or tma_store" > $out/test_narrow.txt 2>&1; echo "narrow rc=$?"; tail -2 $out/test_narrow.txt
timeout 110 python -m pytest -m gpu -q -p no:cacheprovider -n 14 tests/test_gpu_pytorch.py tests/test_gpu_relax.py tests/test_gpu_torch.py > $out/test_moved.txt 2>&1; echo "moved rc=$?"; tail -2 $out/test_moved.txt
cd lab/ab-20261202 && timeout 45 python ../probes/pick_ab.py dense-m256-before.json dense-m256-after.json --out $out/dense-m256.json > $out/dense-m256.txt 2>&1; echo "ab rc=$?"; tail -4 $out/dense-m256.txt
date -u >> $out/times.txt
