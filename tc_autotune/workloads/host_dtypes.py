"""The host (numpy) type of each dtype a workload names.

numpy has no bfloat16 nor fp8: a bf16 (fp8) workload's arrays are ``ml_dtypes.bfloat16``
(``float8_e4m3fn``, ``float8_e5m2``) ones (TVM's own dependency, which TVM and PyTorch take as
such), and importing it here also lets numpy read those names (``astype("bfloat16")``, as the
epilogue's residual of a bf16 output is drawn).  What the references draw inputs in, and what a
runner allocates an output of a dtype in; it imports nothing of the package."""

from __future__ import annotations

import ml_dtypes
import numpy as np

# dtype names numpy knows only through ml_dtypes (TVM's and PyTorch's names for the same formats)
ML_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
             "float8_e5m2": ml_dtypes.float8_e5m2}


def host_dtype(name: str) -> np.dtype:
    """The numpy dtype of a workload's dtype name (bfloat16, the fp8 ones: ml_dtypes')."""
    return np.dtype(ML_DTYPES.get(name, name))
