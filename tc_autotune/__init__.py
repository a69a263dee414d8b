"""tc-autotune: AutoTVM-style tuning of Tensor Core conv2d (NHWC) and dense (fp16 in, fp32 accumulate) on TVM.

The top-level names load lazily, so ``import tc_autotune.records`` (and the CLIs'
argument checks) stay fast and do not import TVM.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Conv2dWorkload": "workloads",
    "ConfigSpace": "space",
    "Conv2dConfig": "space",
    "conv2d_space": "space",
    "Conv2dKernel": "kernel",
    "build_conv2d": "kernel",
    "DenseWorkload": "dense_workloads",
    "dense_space": "space",
    "build_dense": "kernel",
    "apply_history_best": "apply",
    "conv2d": "functional",
    "dense": "functional",
    "load_best": "records",
    "pick_best": "records",
    "XGBTuner": "tuner",
    "RandomTuner": "tuner",
    "GridTuner": "tuner",
    "optimize": "pytorch",  # these two import torch
    "extract_workloads": "pytorch",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    try:  # submodules: tc_autotune.workloads.get(...) without importing it first
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError:
        pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
