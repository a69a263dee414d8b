"""Conv2d workloads: the shape a kernel is tuned for, spec strings and named presets.

A workload is plain data (a frozen dataclass) so it can key caches, logs and
records.  Data is NHWC, weights are HWIO unless ``weight_layout`` says otherwise, and a grouped
conv has ``groups`` (both in ``conv_weights``).  ``str(workload)`` is a canonical spec
string that ``Conv2dWorkload.parse`` reads back to an equal workload.  A fused epilogue
(``epilogue.py``: bias, folded batch norm, residual add, relu/gelu) is part of the
workload; a plain one's spec does not mention it, so its string is what it always was.
Dense workloads are their own kind (``dense.py``), which this module does not know: both read
their specs by ``spec.py``'s grammar, and a name of either kind is read by ``names.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import replace as _replace

from . import conv_weights
from .epilogue import NONE as NO_EPILOGUE
from .epilogue import canonical as canonical_epilogue
from .epilogue import spec_item as epilogue_item
from .spec import DTYPE_ALIASES, FP8_DTYPES, cached_parse, check_dtypes, check_elements, spec_items

INPUT_DTYPES = ("float16", "float32", "bfloat16")
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")

# spec key -> (field, arity of the tuple it expands to, 0 for a scalar)
_SPEC_KEYS = {
    "n": ("batch", 0),
    "h": ("in_height", 0),
    "w": ("in_width", 0),
    "c": ("in_channels", 0),
    "k": ("out_channels", 0),
    "r": ("kernel_h", 0),
    "s": ("kernel_w", 0),
    "stride": ("stride", 2),
    "pad": ("padding", 4),
    "dilation": ("dilation", 2),
    "dtype": ("dtype", 0),
    "out_dtype": ("out_dtype", 0),
    "epilogue": ("epilogue", 0),
    "groups": ("groups", 0),
    "weight_layout": ("weight_layout", 0),
}
_TEXT_KEYS = ("dtype", "out_dtype", "epilogue", "weight_layout")
_REQUIRED_KEYS = ("n", "h", "c", "k", "r")


def _expand(value, arity: int, name: str) -> tuple[int, ...]:
    """An int or a shorter tuple expands to ``arity`` ints (pad: (t, l) -> (t, l, t, l))."""
    if isinstance(value, int):
        values = (value,)
    else:
        values = tuple(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{name} must be integers, got {value!r}")
    if len(values) == arity:
        return values
    if len(values) == 1:
        return values * arity
    if arity == 4 and len(values) == 2:
        return values * 2
    raise ValueError(f"{name} takes 1{', 2' if arity == 4 else ''} or {arity} values, got {value!r}")


@dataclass(frozen=True)
class Conv2dWorkload:
    """One conv2d: NHWC data, HWIO (OIHW, OHWI) weights, fp16 (or bf16) Tensor Core math with fp32
    accumulation; grouped with ``groups`` > 1 (one implicit GEMM per group, ``conv_weights``)."""

    batch: int
    in_height: int
    in_width: int
    in_channels: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    dtype: str = "float16"
    out_dtype: str = "float32"
    epilogue: str = NO_EPILOGUE  # fused epilogue name (``epilogue.py``), canonical
    groups: int = 1  # C and K channels in this many groups, each its own GEMM (``conv_weights``)
    weight_layout: str = conv_weights.DEFAULT_LAYOUT  # the weight tensor's dims: HWIO, OIHW or OHWI

    def __post_init__(self):
        object.__setattr__(self, "epilogue", canonical_epilogue(self.epilogue))
        object.__setattr__(self, "weight_layout", conv_weights.canonical_layout(self.weight_layout))
        object.__setattr__(self, "stride", _expand(self.stride, 2, "stride"))
        object.__setattr__(self, "padding", _expand(self.padding, 4, "padding"))
        object.__setattr__(self, "dilation", _expand(self.dilation, 2, "dilation"))
        sizes = {
            "batch": self.batch,
            "in_height": self.in_height,
            "in_width": self.in_width,
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "kernel_h": self.kernel_h,
            "kernel_w": self.kernel_w,
        }
        for name, value in sizes.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        conv_weights.check_groups(self.groups, self.in_channels, self.out_channels)
        for name in ("stride", "dilation"):
            if min(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if min(self.padding) < 0:
            raise ValueError(f"padding must not be negative, got {self.padding}")
        if self.dtype in (*FP8_DTYPES, *DTYPE_ALIASES):  # scaled wgmma: dense only
            raise ValueError(f"conv2d takes no fp8 operands (dtype={self.dtype} is dense only): "
                             f"dtype {', '.join(INPUT_DTYPES)}")
        if self.dtype not in INPUT_DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}: expected one of {', '.join(INPUT_DTYPES)}")
        if self.out_dtype not in OUTPUT_DTYPES:
            raise ValueError(
                f"unknown out_dtype {self.out_dtype!r}: expected one of {', '.join(OUTPUT_DTYPES)}"
            )
        check_dtypes(self.dtype, self.out_dtype)
        top, left, bottom, right = self.padding
        eff_h = (self.kernel_h - 1) * self.dilation[0] + 1
        eff_w = (self.kernel_w - 1) * self.dilation[1] + 1
        if eff_h > self.in_height + top + bottom or eff_w > self.in_width + left + right:
            raise ValueError(
                f"kernel {eff_h}x{eff_w} (dilated) is larger than the padded input "
                f"{self.in_height + top + bottom}x{self.in_width + left + right}"
            )
        check_elements({"data": self.data_shape, "weight": self.weight_shape,
                                        "output": self.out_shape})

    # ---- derived shapes -------------------------------------------------
    @property
    def out_height(self) -> int:
        top, _, bottom, _ = self.padding
        eff = (self.kernel_h - 1) * self.dilation[0] + 1
        return (self.in_height + top + bottom - eff) // self.stride[0] + 1

    @property
    def out_width(self) -> int:
        _, left, _, right = self.padding
        eff = (self.kernel_w - 1) * self.dilation[1] + 1
        return (self.in_width + left + right - eff) // self.stride[1] + 1

    @property
    def data_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_height, self.in_width, self.in_channels)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        """HWIO [R, S, C/G, K], or the same dims in ``weight_layout``'s order."""
        return conv_weights.weight_shape(self.weight_layout, self.kernel_h, self.kernel_w,
                                         self.in_channels // self.groups, self.out_channels)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_height, self.out_width, self.out_channels)

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM (of each group's: ``groups`` of them): output pixels x
        output channels x reduction."""
        m = self.batch * self.out_height * self.out_width
        g = self.groups
        return m, self.out_channels // g, self.kernel_h * self.kernel_w * self.in_channels // g

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_shape
        return 2 * m * n * k * self.groups

    # ---- spec strings ---------------------------------------------------
    def __str__(self) -> str:
        def compact(values):
            return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))

        return (
            f"n={self.batch},h={self.in_height},w={self.in_width},c={self.in_channels},"
            f"k={self.out_channels},r={self.kernel_h},s={self.kernel_w},"
            f"stride={compact(self.stride)},pad={compact(self.padding)},"
            f"dilation={compact(self.dilation)},dtype={self.dtype},out_dtype={self.out_dtype}"
            + conv_weights.spec_items(self.groups, self.weight_layout) + epilogue_item(self.epilogue)
        )

    @classmethod
    def parse(cls, spec: str) -> "Conv2dWorkload":
        """Parse ``key=value,...``; pairs/quads inside a value are joined by 'x' (pad=1x2)."""
        if not isinstance(spec, str) or not spec.strip():
            raise ValueError("empty workload spec")
        return cached_parse(cls, spec)

    @classmethod
    def _parse(cls, spec: str) -> "Conv2dWorkload":
        fields: dict[str, object] = {}
        for key, raw in spec_items(spec, _SPEC_KEYS, "workload spec").items():
            field_name, arity = _SPEC_KEYS[key]
            if key in _TEXT_KEYS:
                fields[key] = raw
                continue
            try:
                numbers = tuple(int(v) for v in raw.split("x"))
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer{' tuple' if arity else ''}") from None
            if arity == 0 and len(numbers) != 1:
                raise ValueError(f"{key}={raw!r} must be a single integer")
            fields[key] = numbers[0] if arity == 0 else numbers
        missing = [k for k in _REQUIRED_KEYS if k not in fields]
        if missing:
            raise ValueError(f"workload spec is missing {', '.join(missing)}")
        return cls(
            batch=fields["n"],
            in_height=fields["h"],
            in_width=fields.get("w", fields["h"]),
            in_channels=fields["c"],
            out_channels=fields["k"],
            kernel_h=fields["r"],
            kernel_w=fields.get("s", fields["r"]),
            stride=fields.get("stride", 1),
            padding=fields.get("pad", 0),
            dilation=fields.get("dilation", 1),
            dtype=fields.get("dtype", "float16"),
            out_dtype=fields.get("out_dtype", "float32"),
            epilogue=fields.get("epilogue", NO_EPILOGUE),
            groups=fields.get("groups", 1),
            weight_layout=fields.get("weight_layout", conv_weights.DEFAULT_LAYOUT),
        )

    def replace(self, **changes) -> "Conv2dWorkload":
        return _replace(self, **changes)


# ---- presets ------------------------------------------------------------
RFC_BATCHES = (1, 32, 64, 256, 512)

# ResNet-50 (v1.5: stride on the 3x3) distinct conv layers:
# name -> (input size, in channels, out channels, kernel, stride)
RESNET50_LAYERS = {
    "conv1": (224, 3, 64, 7, 2),
    "res2-1x1-64-64": (56, 64, 64, 1, 1),
    "res2-3x3-64-64": (56, 64, 64, 3, 1),
    "res2-1x1-64-256": (56, 64, 256, 1, 1),
    "res2-1x1-256-64": (56, 256, 64, 1, 1),
    "res3-1x1-256-128": (56, 256, 128, 1, 1),
    "res3-3x3-128-128-s2": (56, 128, 128, 3, 2),
    "res3-1x1-256-512-s2": (56, 256, 512, 1, 2),
    "res3-1x1-128-512": (28, 128, 512, 1, 1),
    "res3-1x1-512-128": (28, 512, 128, 1, 1),
    "res3-3x3-128-128": (28, 128, 128, 3, 1),
    "res4-1x1-512-256": (28, 512, 256, 1, 1),
    "res4-3x3-256-256-s2": (28, 256, 256, 3, 2),
    "res4-1x1-512-1024-s2": (28, 512, 1024, 1, 2),
    "res4-1x1-256-1024": (14, 256, 1024, 1, 1),
    "res4-1x1-1024-256": (14, 1024, 256, 1, 1),
    "res4-3x3-256-256": (14, 256, 256, 3, 1),
    "res5-1x1-1024-512": (14, 1024, 512, 1, 1),
    "res5-3x3-512-512-s2": (14, 512, 512, 3, 2),
    "res5-1x1-1024-2048-s2": (14, 1024, 2048, 1, 2),
    "res5-1x1-512-2048": (7, 512, 2048, 1, 1),
    "res5-1x1-2048-512": (7, 2048, 512, 1, 1),
    "res5-3x3-512-512": (7, 512, 512, 3, 1),
}


def resnet50_layer(layer: str, batch: int) -> Conv2dWorkload:
    size, c, k, r, stride = RESNET50_LAYERS[layer]
    return Conv2dWorkload(batch, size, size, c, k, r, r, stride=stride, padding=r // 2)


def resnet50_layers(batch: int = 1) -> dict[str, Conv2dWorkload]:
    """All distinct ResNet-50 conv layers at one batch size, keyed by preset name."""
    return {f"resnet50-{name}-b{batch}": resnet50_layer(name, batch) for name in RESNET50_LAYERS}


# The epilogue each layer has in the network (BN folded into the weights and a bias):
# bottleneck convs bias_relu, the expanding 1x1 that ends a block adds the shortcut
# (bias_residual_relu), projection shortcuts (the strided 1x1s) only bias.  res2's expand
# and projection have one shape (1x1 64 -> 256): it is listed as the expand.
RESNET50_EPILOGUES = {name: ("bias_residual_relu" if name in ("res2-1x1-64-256", "res3-1x1-128-512",
                                                              "res4-1x1-256-1024", "res5-1x1-512-2048")
                             else "bias" if name.endswith("-s2") and "-1x1-" in name else "bias_relu")
                      for name in RESNET50_LAYERS}


def resnet50_fused_layers(batch: int = 32) -> dict[str, Conv2dWorkload]:
    """Every distinct ResNet-50 conv layer with the epilogue it has in the network, keyed by
    preset name (``resnet50-<layer>-b<N>-<epilogue>``)."""
    return {f"resnet50-{layer}-b{batch}-{epilogue}": resnet50_layer(layer, batch).replace(epilogue=epilogue)
            for layer, epilogue in RESNET50_EPILOGUES.items()}


def rfc_workload(kind: str, batch: int) -> Conv2dWorkload:
    if kind == "1x1":
        return Conv2dWorkload(batch, 14, 14, 1024, 256, 1, 1)
    return Conv2dWorkload(batch, 14, 14, 256, 256, 3, 3, padding=1)


TUTORIAL = Conv2dWorkload(256, 14, 14, 256, 512, 3, 3, padding=1)

_FAMILY = re.compile(r"^(rfc-1x1|rfc-3x3|resnet50-(?P<layer>.+))-b(?P<batch>\d+)$")


def preset(name: str) -> Conv2dWorkload | None:
    """The conv2d preset ``name`` (tutorial, rfc-{1x1,3x3}-b<N>, resnet50-<layer>-b<N>), else None;
    ``names.preset`` reads every kind's, with an epilogue appended."""
    if name == "tutorial":
        return TUTORIAL
    match = _FAMILY.match(name)
    if match:
        batch = int(match["batch"])
        if batch <= 0:
            raise ValueError(f"preset {name!r}: batch must be positive")
        if name.startswith("rfc-"):
            return rfc_workload(name[4:7], batch)
        if match["layer"] in RESNET50_LAYERS:
            return resnet50_layer(match["layer"], batch)
    return None


def preset_names(batch_sizes=RFC_BATCHES) -> list[str]:
    """The documented preset names (ResNet-50 layers listed at batch 1, and fused with their
    network's epilogues at batch 32)."""
    names = ["tutorial"]
    names += [f"rfc-{kind}-b{b}" for kind in ("1x1", "3x3") for b in batch_sizes]
    names += list(resnet50_layers(1))
    names += list(resnet50_fused_layers(32))
    return names


def preset_name(workload: Conv2dWorkload) -> str | None:
    """The conv2d preset that names ``workload`` (one without an epilogue), or None."""
    if workload == TUTORIAL:
        return "tutorial"
    batch = workload.batch
    for kind in ("1x1", "3x3"):
        if rfc_workload(kind, batch) == workload:
            return f"rfc-{kind}-b{batch}"
    for layer in RESNET50_LAYERS:
        if resnet50_layer(layer, batch) == workload:
            return f"resnet50-{layer}-b{batch}"
    return None
