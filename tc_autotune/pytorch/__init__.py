"""tc_autotune in PyTorch models (needs torch; the rest of the package does not).

* ``optimize(model, example_inputs)``: the model with its conv2d / linear layers (and the batch
  norm, residual add and ReLU/GELU after them) on tuned kernels, ``FusedConv2d`` / ``FusedLinear``
  (``optimize.py``);
* ``extract_workloads(model, example_inputs, job=...)``: the workloads it runs, as a nightly job;
* ``torch.ops.tc_autotune.conv2d`` / ``.dense``: the custom operators ``torch.compile`` sees
  (``library.py``; their eager launch path ``ops.py``); ``fallbacks()`` counts the calls that ran PyTorch's ops instead.
"""

from . import library  # noqa: F401  (registers the tc_autotune ops)
from .ops import FallbackWarning, fallbacks, reset_fallbacks
from .optimize import FusedConv2d, FusedLinear, OptimizeReport, extract_workloads, optimize, trace, write_job

__all__ = ["optimize", "extract_workloads", "write_job", "trace", "OptimizeReport", "FusedConv2d", "FusedLinear",
           "fallbacks", "reset_fallbacks", "FallbackWarning"]
