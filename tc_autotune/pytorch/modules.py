"""The layers ``optimize`` puts into a model: a conv2d or linear with its fused epilogue.

Each holds its parameters in the kernels' layout, prepared once when it is made (a conv's
weight HWIO with a batch norm's scale folded in, fp32 biases), and takes the tensors a
PyTorch model passes it: a conv's input and residual in NCHW shape, channels-last in memory
(``x.permute(0, 2, 3, 1)`` is then the NHWC tensor the kernel reads, no copy), and gives its
output the same way.  Under ``torch.compile`` they call the ``tc_autotune`` ops.
"""

from __future__ import annotations

import torch
from torch import nn

from . import ops
from .fusion import same_padding


class FusedConv2d(nn.Module):
    """``act(conv2d(x, weight) + bias [+ residual])`` on a tuned kernel (``ops.conv2d_nhwc``)."""

    def __init__(self, weight_hwio: torch.Tensor, bias: torch.Tensor | None, stride, padding, dilation,
                 activation: str = "none", residual: bool = False, out_dtype: torch.dtype = torch.float16):
        super().__init__()
        self.register_buffer("weight", weight_hwio.contiguous())
        self.register_buffer("bias", None if bias is None else bias.float().contiguous())
        self.stride, self.padding, self.dilation = list(stride), list(padding), list(dilation)
        self.activation, self.residual, self.out_dtype = activation, residual, out_dtype
        self._key = ops.conv2d_key(self.stride, self.padding, self.dilation, activation, out_dtype)

    @classmethod
    def of(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, activation: str = "none",
           residual: bool = False) -> "FusedConv2d":
        """From a (groups=1, zero-padded) ``nn.Conv2d`` and the eval-mode batch norm after it,
        folded in: weight * gamma / sqrt(var + eps) per output channel, bias likewise."""
        weight = conv.weight.detach().float()
        bias = conv.bias.detach().float() if conv.bias is not None else None
        if bn is not None:
            scale = bn.weight.detach().float() if bn.affine else torch.ones_like(bn.running_var, dtype=torch.float32)
            shift = bn.bias.detach().float() if bn.affine else torch.zeros_like(scale)
            scale = scale / torch.sqrt(bn.running_var.float() + bn.eps)
            weight = weight * scale.view(-1, 1, 1, 1)
            base = bias if bias is not None else torch.zeros_like(scale)
            bias = (base - bn.running_mean.float()) * scale + shift
        padding = conv.padding if not isinstance(conv.padding, str) else same_padding(conv)
        return cls(weight.to(conv.weight.dtype).permute(2, 3, 1, 0), bias, conv.stride, padding, conv.dilation,
                   activation, residual, conv.weight.dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        res = residual.permute(0, 2, 3, 1) if residual is not None else None
        y = ops.conv2d_nhwc(x.permute(0, 2, 3, 1), self.weight, None, self.bias, res, self.stride, self.padding,
                            self.dilation, self.activation, self.out_dtype, static_key=self._key)
        return y.permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        r, s, c, k = self.weight.shape
        epilogue = "+".join(["bias"] * (self.bias is not None) + ["residual"] * self.residual
                            + [self.activation] * (self.activation != "none")) or "none"
        return (f"{c}, {k}, kernel_size=({r}, {s}), stride={tuple(self.stride)}, padding={tuple(self.padding)}, "
                f"epilogue={epilogue}")


class FusedLinear(nn.Module):
    """``act(x @ weight.T + bias [+ residual])`` on a tuned kernel (``ops.dense_nk``): an
    nn.Linear's (N, K) weight is used as it is."""

    def __init__(self, weight_nk: torch.Tensor, bias: torch.Tensor | None, activation: str = "none",
                 residual: bool = False):
        super().__init__()
        self.register_buffer("weight", weight_nk.detach().contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous())
        self.activation, self.residual, self.out_dtype = activation, residual, weight_nk.dtype

    @classmethod
    def of(cls, linear: nn.Linear, activation: str = "none", residual: bool = False) -> "FusedLinear":
        return cls(linear.weight, linear.bias, activation, residual)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return ops.dense_nk(x, self.weight, None, self.bias, residual, self.activation, self.out_dtype)

    def extra_repr(self) -> str:
        n, k = self.weight.shape
        epilogue = "+".join(["bias"] * (self.bias is not None) + ["residual"] * self.residual
                            + [self.activation] * (self.activation != "none")) or "none"
        return f"in_features={k}, out_features={n}, epilogue={epilogue}"
