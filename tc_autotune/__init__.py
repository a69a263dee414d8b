"""tc-autotune: AutoTVM-style tuning of Tensor Core conv2d (NHWC) and dense (fp16 in, fp32 accumulate) on TVM.

The package's composition: each task (``core.builtin_tasks``, registered as the face imports it,
first) gets the template that makes its kernels (the
default of ``templates.registry``) and the vendor library its timings are compared with
(``measure.baseline``).  Python runs this face before any module of the package, so the tasks
are whole wherever records are read, while core/, search/ and database/ import no template.

The top-level names load lazily, so ``import tc_autotune.database.records`` (and the CLIs'
argument checks) stay fast and do not import TVM.
"""

import importlib

from ._version import __version__  # noqa: F401 (the package's version)
from .core import builtin_tasks as _builtin
from .core import tasks as _tasks
from .measure import baseline as _baseline
from .templates import registry as _registry

_tasks.use_template(_registry.DEFAULT, _builtin.CONV2D, _builtin.DENSE)
_tasks.use_baseline(_builtin.CONV2D, _baseline.checked_cudnn_time)
_tasks.use_baseline(_builtin.DENSE, _baseline.checked_cublas_time)

_EXPORTS = {
    "Conv2dWorkload": "workloads.conv2d",
    "ConfigSpace": "templates.registry",
    "TcGemmConfig": "templates.registry",
    "Conv2dConfig": "templates.registry",  # the earlier name of TcGemmConfig
    "conv2d_space": "templates.registry",
    "Kernel": "api.kernel",
    "Conv2dKernel": "api.kernel",  # the earlier name of Kernel
    "build_conv2d": "api.build",
    "DenseWorkload": "workloads.dense",
    "dense_space": "templates.registry",
    "build_dense": "api.build",
    "apply_history_best": "api.apply",
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
    try:  # submodules: tc_autotune.workloads.names.get(...) without importing it first
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError:
        pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
