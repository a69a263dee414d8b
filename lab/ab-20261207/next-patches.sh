# Prepared for a later device session (not run): two kernel-wide patches, each read from the SASS of the
# applied M = 16 fp8 kernel (BENCHMARKS 46a), timed against today's code on one machine:
# - lab/patches/relaxed-cluster-arrive.patch: the cluster syncs that publish no data (a kernel's end,
#   a multicast pair's start after its fenced barrier init) arrive relaxed; ptxas makes the .release
#   of barrier.cluster.arrive a MEMBAR.ALL.GPU, which at the end waits for the block's stores.
# - lab/patches/no-proxy-fence-after-tma.patch: no fence.proxy.async (MEMBAR.ALL.CTA +
#   FENCE.VIEW.ASYNC.S) before every k-step's wgmma where TMA filled the stage (an mbarrier wait
#   orders it); kept where the producer's threads wrote it (cp.async gathers, fp32 converted).
# Both change the generated code of many shipped records (restamp: stale), so a patch that pays is
# rolled out with a nightly of the shipped jobs at a few trials each: the tuner measures the best
# stale config first.  Times: kernel device time of the shipped best config of each fp8 GEMM of
# M <= 16 in each tree, torch._scaled_mm beside it.
# Usage (GPU machine, the tree's root): bash lab/ab-20261207/next-patches.sh OUT_DIR
out=$1; base=$(mktemp -d)
for variant in relaxed-cluster-arrive no-proxy-fence-after-tma both; do
  cp -r . "$base/$variant" || exit 1
  for p in relaxed-cluster-arrive no-proxy-fence-after-tma; do
    if [ "$variant" = "$p" ] || [ "$variant" = both ]; then (cd "$base/$variant" && patch -p1 -s < "lab/patches/$p.patch") || exit 1; fi
  done
done
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
    for tree in "$PWD" "$base/relaxed-cluster-arrive" "$base/no-proxy-fence-after-tma" "$base/both"; do
      echo "### $tree" | tee -a "$out/patches.txt"
      (cd "$tree" && PYTHONPATH="$tree:$PYTHONPATH" python lab/probes/config_variants.py "$spec" "$best") | tee -a "$out/patches.txt"
    done
  done
done
