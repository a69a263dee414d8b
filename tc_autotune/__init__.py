"""tc-autotune: AutoTVM-style tuning of Tensor Core conv2d (NHWC, fp16 in, fp32 accumulate) on TVM."""

__version__ = "0.1.0"

from .workloads import Conv2dWorkload  # noqa: E402
from .space import ConfigSpace, Conv2dConfig, conv2d_space  # noqa: E402
from .kernel import Conv2dKernel, build_conv2d  # noqa: E402
from . import workloads  # noqa: E402,F401

__all__ = [
    "Conv2dWorkload",
    "ConfigSpace",
    "Conv2dConfig",
    "conv2d_space",
    "Conv2dKernel",
    "build_conv2d",
]
