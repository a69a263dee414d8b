"""``config_variants.py`` with the warp-specialized ring deepened by another factor: deep_ring=1 gives
``DEEP_RING_FACTOR x stages`` stages (2 in the template).  A probe of whether a ring deeper than the
template's (cuBLAS keeps 13 stages of 64 x 64 tiles at M = 128) pays before it becomes a knob value.
The factor is patched in this process only; the rest of the arguments are config_variants.py's
(``--build-only`` included).  GPU machine.

    python lab/probes/ring_variants.py FACTOR SPEC VARIANTS_JSON [--build-only]
"""
import runpy, sys
from tc_autotune.templates.tc_gemm import knobs

knobs.DEEP_RING_FACTOR = int(sys.argv[1])
print(f"# DEEP_RING_FACTOR = {knobs.DEEP_RING_FACTOR}")
sys.argv = ["config_variants.py"] + sys.argv[2:]
runpy.run_path("lab/probes/config_variants.py", run_name="__main__")
