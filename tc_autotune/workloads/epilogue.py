"""Fused epilogues: what a kernel does to each accumulator on its way to the output.

An epilogue is part of a workload (``epilogue=bias_relu`` in a spec), so fused and plain
kernels never share a record.  Its name is ``none`` or these parts joined by ``_``, in
this order, each at most once:

    scale     out *= scale[c]        (per output channel, fp32; needs bias: folded batch norm)
    bias      out += bias[c]         (per output channel, fp32)
    residual  out += residual        (the output's shape and dtype, as a ResNet block adds it)
    relu      out = max(out, 0)      or
    gelu      out = gelu(out)        (the tanh approximation, as torch's approximate="tanh")

then the output cast.  ``bias_relu``, ``scale_bias_residual_relu``, ``residual`` and
``gelu`` are names; ``relu_bias`` (order) and ``scale_relu`` (scale without bias) are not.

``Epilogue.apply`` is the one formula: the template calls it on TVM expressions, the host
reference on numpy arrays (``ops`` supplies max, tanh and let), so both compute the same thing.
This module does not import TVM.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

NONE = "none"
ACTIVATIONS = ("relu", "gelu")
GRAMMAR = ("none, or scale, bias, residual, relu|gelu joined by '_' in that order, each optional, scale "
           "only with bias (e.g. bias_relu, scale_bias_residual_relu)")
_ORDER = ("scale", "bias", "residual", "activation")  # the parts' order in a name
GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Epilogue:
    """The parts of one epilogue (see the module's grammar)."""

    scale: bool = False
    bias: bool = False
    residual: bool = False
    activation: str | None = None  # "relu", "gelu" or None

    def __str__(self) -> str:
        parts = [name for name in ("scale", "bias", "residual") if getattr(self, name)]
        return "_".join(parts + [self.activation] * bool(self.activation)) or NONE

    def __bool__(self) -> bool:
        return str(self) != NONE

    @property
    def channel_inputs(self) -> tuple[str, ...]:
        """The per-output-channel fp32 vectors it reads, in kernel argument order."""
        return tuple(name for name in ("scale", "bias") if getattr(self, name))

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of the kernel inputs it adds (after the operands, before the output)."""
        return self.channel_inputs + ("residual",) * self.residual

    def apply(self, acc, ops, scale=None, bias=None, residual=None):
        """The epilogue of fp32 ``acc``; ``scale`` and ``bias`` are the output channel's
        values, ``residual`` the output element's (as fp32); ``ops`` has ``maximum(x, y)``,
        ``tanh(x)`` and ``let(x, f)`` (``f(x)``, with x computed once: in TVM a Let) (``NUMPY``,
        or TVM's in the template)."""
        x = acc
        if self.scale:
            x = x * scale
        if self.bias:
            x = x + bias
        if self.residual:
            x = x + residual
        if self.activation == "relu":
            x = ops.maximum(x, 0.0)
        elif self.activation == "gelu":
            x = ops.let(x, lambda x: 0.5 * x * (1.0 + ops.tanh(GELU_C * (x + 0.044715 * x * x * x))))
        return x


NUMPY = SimpleNamespace(maximum=np.maximum, tanh=np.tanh, let=lambda x, f: f(x))


@functools.lru_cache(maxsize=64)
def parse(name: str) -> Epilogue:
    """The epilogue a name spells; ValueError (one line, with the grammar) otherwise."""
    text = name.strip() if isinstance(name, str) else ""
    if text == NONE:
        return Epilogue()
    parts = text.split("_") if text else []
    keys = ["activation" if part in ACTIVATIONS else part for part in parts]
    ranks = [_ORDER.index(key) if key in _ORDER else -1 for key in keys]
    fields = {key: part if key == "activation" else True for key, part in zip(keys, parts)}
    in_order = bool(parts) and -1 not in ranks and ranks == sorted(set(ranks))  # known, once, in order
    if not in_order or ("scale" in fields and "bias" not in fields):
        raise ValueError(f"unknown epilogue {name!r}: expected {GRAMMAR}")
    return Epilogue(**fields)


def of_inputs(scale=None, bias=None, residual=None, activation=None) -> Epilogue:
    """The epilogue that applies the inputs given (not None) and ``activation``, as
    ``tc.conv2d`` and ``tc.dense`` take them; ValueError for another activation, or a
    name outside the grammar (scale without bias)."""
    if activation not in (None, *ACTIVATIONS):
        raise ValueError(f"activation must be None, 'relu' or 'gelu', got {activation!r}")
    return parse(str(Epilogue(scale is not None, bias is not None, residual is not None, activation)))


def canonical(name) -> str:
    """The canonical name of an epilogue name or ``Epilogue`` (ValueError if unknown)."""
    return str(name if isinstance(name, Epilogue) else parse(name))


def is_name(text: str) -> bool:
    """Whether ``text`` is an epilogue's name (in the grammar)."""
    try:
        parse(text)
    except ValueError:
        return False
    return True


def spec_item(name: str) -> str:
    """A workload spec's ``,epilogue=<name>`` item; empty for none, so a plain workload's
    string is what it was before epilogues existed (its records still match)."""
    return "" if name == NONE else f",epilogue={name}"


def input_specs(epilogue: Epilogue, channels: int, out_shape, out_dtype: str) -> list[tuple]:
    """(name, shape, dtype) of the kernel inputs ``epilogue`` adds, in argument order."""
    specs = [(name, (channels,), "float32") for name in epilogue.channel_inputs]
    return specs + [("residual", tuple(out_shape), out_dtype)] * epilogue.residual


def workload_input_specs(workload) -> list[tuple]:
    """``input_specs`` of a task's workload (its output is channels last: conv2d NHWC, dense)."""
    return input_specs(parse(workload.epilogue), workload.out_shape[-1], workload.out_shape, workload.out_dtype)


def random_inputs(workload, rng) -> list[np.ndarray]:
    """Random inputs of a workload's epilogue (``workload_input_specs`` order), scaled like
    an O(1) output: scales around 1, biases and residuals that move many outputs across
    relu's 0."""
    draw = {"scale": lambda shape: rng.uniform(0.5, 1.5, shape),
            "bias": lambda shape: rng.uniform(-0.5, 0.5, shape),
            "residual": lambda shape: rng.uniform(-1.0, 1.0, shape)}
    return [draw[name](shape).astype(dtype) for name, shape, dtype in workload_input_specs(workload)]


def reference(workload, acc: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """fp32 ``acc`` through a workload's epilogue, in fp32: the host reference's."""
    fused = parse(workload.epilogue)
    values = dict(zip(fused.inputs, (np.asarray(a, dtype=np.float32) for a in inputs)))
    return fused.apply(acc.astype(np.float32, copy=False), NUMPY, **values).astype(np.float32, copy=False)
