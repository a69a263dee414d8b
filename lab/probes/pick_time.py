"""The zero-shot pick's time in a fresh process (issue #30: <= 0.3 s beyond compiling): import, then
``choose_config`` of a shape no log holds, the config choice only (no TVM build).

    TC_AUTOTUNE_SHIPPED_LOGS=$PWD/tuning_logs python lab/probes/pick_time.py
"""
import sys
import time
import warnings

t0 = time.perf_counter()
from tc_autotune import workloads  # noqa: E402
from tc_autotune.api import apply  # noqa: E402
from tc_autotune.backends.cuda import gpu as gpus  # noqa: E402

t1 = time.perf_counter()
workload = workloads.get(sys.argv[1] if len(sys.argv) > 1 else "n=8,h=56,c=64,k=128,r=3,stride=2,pad=1")
gpu = gpus.default_gpu()
warnings.simplefilter("ignore")  # the no-record warning: expected here
t2 = time.perf_counter()
choice = apply.choose_config(workload, gpu)
t3 = time.perf_counter()
print(f"import {t1 - t0:.2f} s, pick {t3 - t2:.3f} s, source {choice.source}, "
      f"xgboost loaded {'xgboost' in sys.modules}")
