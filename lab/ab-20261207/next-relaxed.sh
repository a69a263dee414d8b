# Prepared for a later device session (not run): does a relaxed cluster arrive pay?  ptxas makes the
# .release of barrier.cluster.arrive a MEMBAR.ALL.GPU (BENCHMARKS 46a), which at a split-K or multicast
# kernel's end waits for the block's stores.  lab/patches/relaxed-cluster-arrive.patch makes the syncs
# that publish no data (the kernel's end; a multicast pair's start, after its fenced barrier init)
# arrive relaxed.  This times the shipped best config of each split-K fp8 GEMM of M <= 16, with and
# without the patch, back to back on one machine, torch._scaled_mm beside each (kernel device time).
# Usage (GPU machine, the tree's root): bash lab/ab-20261207/next-relaxed.sh OUT_DIR
out=$1; alt=$(mktemp -d)/tree
cp -r . "$alt" && (cd "$alt" && patch -p1 -s < lab/patches/relaxed-cluster-arrive.patch) || exit 1
for nk in "n=4096,k=4096" "n=11008,k=4096" "n=4096,k=11008"; do
  for m in 1 16; do
    spec="dense:batch=1,m=$m,$nk,b=nk,dtype=float8_e4m3fn,out_dtype=bfloat16"
    best=$(python -c "
import json, sys
from dataclasses import asdict
from tc_autotune.api.apply import apply_history_best, best_or_default_config
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.workloads import get
with apply_history_best(['tuning_logs']):
    print(json.dumps([asdict(best_or_default_config(get(sys.argv[1]), default_gpu()))]))" "$spec")
    for tree in "$PWD" "$alt"; do
      echo "### $tree"; (cd "$tree" && PYTHONPATH="$tree:$PYTHONPATH" python lab/probes/config_variants.py "$spec" "$best") | tee -a "$out/relaxed.txt"
    done
  done
done
