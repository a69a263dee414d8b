"""tc-autotune: AutoTVM-style tuning of Tensor Core conv2d (NHWC) and dense (fp16 in, fp32 accumulate) on TVM.

The top-level names load lazily, so ``import tc_autotune.database.records`` (and the CLIs'
argument checks) stay fast and do not import TVM.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Conv2dWorkload": "workloads.conv2d",
    "ConfigSpace": "core.space",
    "TcGemmConfig": "core.space",
    "Conv2dConfig": "core.space",  # the earlier name of TcGemmConfig
    "conv2d_space": "core.space",
    "Kernel": "api.kernel",
    "Conv2dKernel": "api.kernel",  # the earlier name of Kernel
    "build_conv2d": "api.kernel",
    "DenseWorkload": "workloads.dense",
    "dense_space": "core.space",
    "build_dense": "api.kernel",
    "apply_history_best": "database.apply",
    "conv2d": "api.functional",
    "dense": "api.functional",
    "load_best": "database.records",
    "pick_best": "database.records",
    "XGBTuner": "search.xgb_tuner",
    "RandomTuner": "search.tuner",
    "GridTuner": "search.tuner",
    "optimize": "pytorch",  # these two import torch
    "extract_workloads": "pytorch",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    try:  # submodules: tc_autotune.workloads.conv2d.get(...) without importing it first
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError:
        pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
