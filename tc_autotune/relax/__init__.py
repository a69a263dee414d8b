"""Tuned kernels inside TVM's own model compiler (Relax).

* ``partition(mod, logs=None, target=None)``: each conv2d / matmul chain the kernels take
  (``match``: with its bias, folded batch norm, residual add, ReLU / tanh-GELU) becomes one
  ``R.call_tir`` of the tuned kernel of its workload, a PrimFunc added to the module; NCHW
  models are converted to NHWC once (``layout``); ``report(mod)`` says what was done;
* ``build(mod, target=None)``: relax.build of it, with the kernels' pass options and arch (a
  plain ``tvm.compile`` of it needs ``PassContext(config=PASS_CONFIG)``: without them TVM's
  storage rewrite aliases the kernels' shared-memory tiles and the build fails);
* ``extract_workloads(mod, job=...)``: the workloads as a nightly job file, to tune them;
* ``from_torch(model, example_inputs)``: a PyTorch model as a Relax module, its dtypes kept
  (TVM 0.27's importer makes every conv and matmul of an fp16 model fp32).

TVM is imported at the modules' top (building is what this subpackage is for); torch only inside
``from_torch`` and the benchmark.
"""

from .building import build, compile_check, cuda_modules, target_of
from .kernels import PASS_CONFIG
from .match import Layer, find_layers
from .partition import extract_workloads, partition
from .partition_report import PartitionReport, report
from .torch_import import from_torch

__all__ = ["partition", "build", "extract_workloads", "report", "from_torch", "PartitionReport", "find_layers",
           "Layer", "target_of", "cuda_modules", "compile_check", "PASS_CONFIG"]
