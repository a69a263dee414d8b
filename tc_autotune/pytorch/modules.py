"""The layers ``optimize`` puts into a model: a conv2d or linear with its fused epilogue.

Each holds its parameters in a layout the kernels read, prepared once when it is made: a conv's
own weight in place (OIHW, or OHWI where the model is channels_last: ``fusion.weight_layout``),
a new HWIO weight where a batch norm's scale is folded in, fp32 biases.  It takes the tensors a
PyTorch model passes it: a conv's input and residual in NCHW shape, channels-last in memory
(``x.permute(0, 2, 3, 1)`` is then the NHWC tensor the kernel reads, no copy), and gives its
output the same way.  Under ``torch.compile`` they call the ``tc_autotune`` ops.
"""

from __future__ import annotations

import torch
from torch import nn

from ..workloads.conv_weights import TO_HWIO
from . import ops
from .fusion import same_padding, weight_layout
from .launch import dtype_name


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _bias(conv: nn.Conv2d) -> torch.Tensor | None:
    return conv.bias.detach().float() if conv.bias is not None else None


class FusedConv2d(nn.Module):
    """``act(conv2d(x, weight) + bias [+ residual])`` on a tuned kernel (``ops.conv2d_nhwc``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, stride, padding, dilation,
                 activation: str = "none", residual: bool = False, out_dtype: torch.dtype | str = torch.float16,
                 groups: int = 1, weight_layout: str = "HWIO"):
        """``weight``: HWIO [R, S, C/G, K] (its earlier only layout), or as ``weight_layout``
        says (OIHW [K, C/G, R, S], OHWI [K, R, S, C/G]), held as it is."""
        super().__init__()
        # HWIO as before (a view made contiguous); OIHW / OHWI are a conv's own weight, read in place
        self.register_buffer("weight", weight.contiguous() if weight_layout == "HWIO" else weight)
        self.register_buffer("bias", None if bias is None else bias.float().contiguous())
        # Plain immutable values (ints, tuples, strings: the dtype by name), so that under
        # torch.compile dynamo's guards skip an unchanged layer whole (a list or a torch.dtype
        # would have every one of them checked on every call).
        self.stride, self.padding, self.dilation = _ints(stride), _ints(padding), _ints(dilation)
        self.activation, self.residual, self.out_dtype = activation, residual, dtype_name(out_dtype)
        self.groups, self.weight_layout = int(groups), weight_layout
        self._key = ops.conv2d_key(self.stride, self.padding, self.dilation, activation, out_dtype, groups,
                                   weight_layout)

    @classmethod
    def of(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, activation: str = "none",
           residual: bool = False) -> "FusedConv2d":
        """From a (zero-padded, not depthwise) ``nn.Conv2d`` and the eval-mode batch norm after it,
        folded in: weight * gamma / sqrt(var + eps) per output channel, bias likewise.  Without a
        batch norm the conv's own weight is held, no copy (``fusion.weight_layout``)."""
        padding = conv.padding if not isinstance(conv.padding, str) else same_padding(conv)
        args = (conv.stride, padding, conv.dilation, activation, residual, conv.weight.dtype, conv.groups)
        layout = weight_layout(conv, bn)
        if layout == "OIHW":
            return cls(conv.weight.detach(), _bias(conv), *args, weight_layout="OIHW")
        if layout == "OHWI":  # channels_last memory: the permuted view is the contiguous OHWI tensor
            return cls(conv.weight.detach().permute(0, 2, 3, 1), _bias(conv), *args, weight_layout="OHWI")
        if bn is None:  # neither contiguous nor channels_last: no kernel reads it in place
            ops.copied_weight("a conv weight neither contiguous (OIHW) nor channels_last (OHWI): the layer "
                              "holds an HWIO copy")
        weight = conv.weight.detach().float()
        bias = _bias(conv)
        if bn is not None:
            scale = bn.weight.detach().float() if bn.affine else torch.ones_like(bn.running_var, dtype=torch.float32)
            shift = bn.bias.detach().float() if bn.affine else torch.zeros_like(scale)
            scale = scale / torch.sqrt(bn.running_var.float() + bn.eps)
            weight = weight * scale.view(-1, 1, 1, 1)
            base = bias if bias is not None else torch.zeros_like(scale)
            bias = (base - bn.running_mean.float()) * scale + shift
        # a new tensor either way: HWIO, the layout the shipped records were tuned with
        return cls(weight.to(conv.weight.dtype).permute(2, 3, 1, 0).contiguous(), bias, *args)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        res = residual.permute(0, 2, 3, 1) if residual is not None else None
        y = ops.conv2d_nhwc(x.permute(0, 2, 3, 1), self.weight, None, self.bias, res, self.stride, self.padding,
                            self.dilation, self.activation, self.out_dtype, static_key=self._key, groups=self.groups,
                            weight_layout=self.weight_layout)
        return y.permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        r, s, c, k = (self.weight.shape[axis] for axis in TO_HWIO[self.weight_layout])
        c *= self.groups
        epilogue = "+".join(["bias"] * (self.bias is not None) + ["residual"] * self.residual
                            + [self.activation] * (self.activation != "none")) or "none"
        grouped = f", groups={self.groups}" if self.groups != 1 else ""
        return (f"{c}, {k}, kernel_size=({r}, {s}), stride={self.stride}, padding={self.padding}"
                f"{grouped}, weight={self.weight_layout}, epilogue={epilogue}")


class FusedLinear(nn.Module):
    """``act(x @ weight.T + bias [+ residual])`` on a tuned kernel (``ops.dense_nk``): an
    nn.Linear's (N, K) weight is used as it is."""

    def __init__(self, weight_nk: torch.Tensor, bias: torch.Tensor | None, activation: str = "none",
                 residual: bool = False):
        super().__init__()
        self.register_buffer("weight", weight_nk.detach().contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous())
        self.activation, self.residual, self.out_dtype = activation, residual, dtype_name(weight_nk.dtype)

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
