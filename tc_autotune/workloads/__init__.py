"""What a kernel computes: conv2d and dense workloads (shape, dtypes, fused epilogue), their spec
strings and named presets, and the fp32 references every kernel is checked against.

``get(spec_or_preset)`` reads either kind: ``tc_autotune.workloads.get("rfc-3x3-b1")``
(``names``: the kinds, ``conv2d`` and ``dense``, import none of each other).
"""

from .conv2d import Conv2dWorkload, preset_names, resnet50_fused_layers
from .dense import DenseWorkload
from .names import display_name, get, preset_name

__all__ = ["Conv2dWorkload", "DenseWorkload", "get", "display_name", "preset_name", "preset_names",
           "resnet50_fused_layers"]
