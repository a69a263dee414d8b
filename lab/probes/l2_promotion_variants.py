"""``config_variants.py`` with every tiled TMA map encoded with another L2 promotion (the package
encodes CU_TENSOR_MAP_L2_PROMOTION_NONE; CUTLASS's default is L2_128B): 0 none, 1 64 B, 2 128 B,
3 256 B.  A probe of whether the weight stream of an M = 128 GEMM (our DRAM throughput 43-46%,
cuBLAS's 61%) reads DRAM better with larger L2 fetches, before it becomes a template change.
The encoding is patched in this process only, and its modules go to their own disk cache (the
cache's key knows the package's sources, not a patch).  The rest of the arguments are
config_variants.py's (``--build-only`` included).  GPU machine.

    python lab/probes/l2_promotion_variants.py PROMOTION SPEC VARIANTS_JSON [--build-only]
"""
import functools, os, runpy, sys

promotion = int(sys.argv[1])
os.environ["TC_AUTOTUNE_CACHE_DIR"] = f"/tmp/tc-autotune-cache-l2-{promotion}"
import tvm  # noqa: E402

tvm.tirx.tensormap_encode_tiled = functools.partial(tvm.tirx.tensormap_encode_tiled, l2_promotion=promotion)
print(f"# l2_promotion = {promotion} (cache {os.environ['TC_AUTOTUNE_CACHE_DIR']})")
sys.argv = ["config_variants.py"] + sys.argv[2:]
runpy.run_path("lab/probes/config_variants.py", run_name="__main__")
