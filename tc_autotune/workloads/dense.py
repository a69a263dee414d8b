"""Dense (GEMM) workloads: C = A B with A row-major and B a weight, spec strings and presets.

A dense workload is plain data (a frozen dataclass) like a conv2d one, so it keys caches,
logs and records.  A is (M, K), or (batch, M, K) with one B shared by the batch (a linear
layer on a 3-D activation: the batch folds into M); B is the weight, (K, N) (``b=kn``)
or (N, K) like ``torch.nn.Linear`` (``b=nk``); C is (M, N) or (batch, M, N).  A batch
with one B per item (batched matmul) is not supported.  ``str(workload)`` is a canonical
spec string, "dense:batch=1,m=...,n=...,k=...,b=kn,dtype=float16,out_dtype=float32",
that ``DenseWorkload.parse`` reads back to an equal workload (``,epilogue=...`` at its end
for a fused epilogue, see ``epilogue.py``; a plain workload's string does not mention it).

fp8 (``dtype=float8_e4m3fn``, or the issue's spelling ``float8_e4m3``): e4m3 A and B, or an e5m2 B
(``b_dtype=float8_e5m2``, in the spec only where it differs from ``dtype``), with two fp32
per-tensor scales as kernel inputs after B (``scale_a``, ``scale_b``: 1-element tensors, as
``torch._scaled_mm`` takes them): out = epilogue(scale_a * scale_b * (A @ B)), the scales applied
before the bias and activation, as ``_scaled_mm`` adds its bias after scaling.  The name stored is
``float8_e4m3fn``, what TVM, ml_dtypes and PyTorch call NVIDIA's e4m3 (finite, max 448): their
``float8_e4m3`` is another format (IEEE-like, with infinities), so that spelling is only read.
The spec grammar and the dtype and size rules are those conv2d workloads have too (``spec``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .epilogue import NONE as NO_EPILOGUE
from .epilogue import canonical as canonical_epilogue
from .epilogue import spec_item as epilogue_item
from .spec import DTYPE_ALIASES, E4M3, E5M2, FP8_DTYPES, cached_parse, check_dtypes, check_elements, spec_items

PREFIX = "dense:"
INPUT_DTYPES = ("float16", "bfloat16", E4M3)
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")
B_LAYOUTS = ("kn", "nk")
FP8_K_MULTIPLE = 16  # TMA's 16-byte row strides of 1-byte elements (torch._scaled_mm asks the same)

# spec key -> field
_SPEC_KEYS = {"batch": "batch", "m": "m", "n": "n", "k": "k", "b": "b_layout",
              "dtype": "dtype", "b_dtype": "b_dtype", "out_dtype": "out_dtype", "epilogue": "epilogue"}
_INT_KEYS = ("batch", "m", "n", "k")


def check_fp8(wl) -> None:
    """ValueError (one line) for a dense workload whose fp8 operands the kernels cannot take: B of
    another dtype than fp8 A's; B not K-major (wgmma reads fp8 operands from shared memory K-major
    only: an (N, K) weight, ``b=nk``); K not a multiple of 16 (the TMA maps' row strides are whole
    16-byte units)."""
    if wl.b_dtype is not None and wl.dtype not in FP8_DTYPES:
        raise ValueError(f"b_dtype={wl.b_dtype} needs fp8 operands (dtype={E4M3}), not dtype={wl.dtype}")
    if wl.dtype not in FP8_DTYPES:
        return
    if wl.weight_dtype not in FP8_DTYPES:
        raise ValueError(f"unknown b_dtype {wl.weight_dtype!r}: fp8 A takes a B of {', '.join(FP8_DTYPES)}")
    if wl.b_layout != "nk":
        raise ValueError("fp8 dense needs b=nk, an (N, K) weight: wgmma reads fp8 operands K-major only")
    if wl.k % FP8_K_MULTIPLE:
        raise ValueError(f"fp8 dense needs K a multiple of {FP8_K_MULTIPLE} (16-byte TMA rows), not k={wl.k}")


@dataclass(frozen=True)
class DenseWorkload:
    """One dense layer: fp16 (or bf16) A and B, fp32 accumulation, fp32 or fp16 (bf16) output; or
    fp8 A and B with per-tensor scales (see the module), fp32, fp16 or bf16 output."""

    m: int
    n: int
    k: int
    batch: int = 1  # A and C have a leading batch dim of this size (B is shared) when > 1
    b_layout: str = "kn"  # "kn": B is (K, N); "nk": (N, K), as nn.Linear's weight
    dtype: str = "float16"
    out_dtype: str = "float32"
    epilogue: str = NO_EPILOGUE  # fused epilogue name (``epilogue.py``), canonical
    # B's dtype where it is not ``dtype`` (fp8: an e5m2 B of an e4m3 A), else None
    b_dtype: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "epilogue", canonical_epilogue(self.epilogue))
        for name in ("dtype", "b_dtype"):  # the spelling of e4m3 is stored as TVM's name
            object.__setattr__(self, name, DTYPE_ALIASES.get(getattr(self, name), getattr(self, name)))
        if self.b_dtype == self.dtype:  # one workload, however B's dtype is spelled
            object.__setattr__(self, "b_dtype", None)
        for name in _INT_KEYS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dtype == E5M2:
            raise ValueError(f"dtype={E5M2} (an e5m2 A) is not supported: fp8 A is {E4M3}, e5m2 is B's "
                             f"(b_dtype={E5M2})")
        for name, known in (("b_layout", B_LAYOUTS), ("dtype", INPUT_DTYPES), ("out_dtype", OUTPUT_DTYPES)):
            if getattr(self, name) not in known:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}: expected one of {', '.join(known)}")
        check_dtypes(self.dtype, self.out_dtype)
        check_fp8(self)
        check_elements({"A": self.a_shape, "B": self.b_shape, "C": self.out_shape})

    # ---- dtypes ---------------------------------------------------------------
    @property
    def weight_dtype(self) -> str:
        """B's dtype."""
        return self.b_dtype or self.dtype

    @property
    def scaled(self) -> bool:
        """fp8 operands, whose kernels take the per-tensor scales scale_a and scale_b after B."""
        return self.dtype in FP8_DTYPES

    # ---- shapes -------------------------------------------------------------
    @property
    def _lead(self) -> tuple[int, ...]:
        return (self.batch,) if self.batch > 1 else ()

    @property
    def a_shape(self) -> tuple[int, ...]:
        return (*self._lead, self.m, self.k)

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.b_layout == "kn" else (self.n, self.k)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self._lead, self.m, self.n)

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of the GEMM: the batch folds into M (B is shared)."""
        return self.batch * self.m, self.n, self.k

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_shape
        return 2 * m * n * k

    # ---- spec strings ---------------------------------------------------------
    def __str__(self) -> str:
        b_dtype = f",b_dtype={self.b_dtype}" if self.b_dtype else ""  # absent: every spec before fp8
        return (f"{PREFIX}batch={self.batch},m={self.m},n={self.n},k={self.k},b={self.b_layout},"
                f"dtype={self.dtype}{b_dtype},out_dtype={self.out_dtype}{epilogue_item(self.epilogue)}")

    @classmethod
    def parse(cls, spec: str) -> "DenseWorkload":
        """Parse "dense:m=..,n=..,k=..[,batch=..][,b=kn|nk][,dtype=..][,b_dtype=..][,out_dtype=..][,epilogue=..]"."""
        if not isinstance(spec, str) or not spec.strip().startswith(PREFIX):
            raise ValueError(f"a dense workload spec starts with {PREFIX!r}, got {spec!r}")
        return cached_parse(cls, spec)

    @classmethod
    def _parse(cls, spec: str) -> "DenseWorkload":
        fields: dict[str, object] = {}
        for key, raw in spec_items(spec.strip()[len(PREFIX):], _SPEC_KEYS, "dense spec").items():
            if key in _INT_KEYS:
                try:
                    fields[key] = int(raw)
                except ValueError:
                    raise ValueError(f"{key}={raw!r} is not an integer") from None
            else:
                fields[key] = raw
        missing = [k for k in ("m", "n", "k") if k not in fields]
        if missing:
            raise ValueError(f"dense spec is missing {', '.join(missing)}")
        return cls(**{_SPEC_KEYS[key]: value for key, value in fields.items()})


# ---- presets ------------------------------------------------------------------
# The RFC's dense tables (V100, T4): weight 1024x2048 (OC, IC), as nn.Linear holds it.
RFC_DENSE_BATCHES = (32, 256)
RESNET50_FC_BATCHES = (1, 32, 256)
# Transformer projections (LLaMA-7B-like hidden 4096, MLP 11008): (K, N) of the weight.
LLM_SHAPES = ((4096, 4096), (4096, 11008), (11008, 4096))
LLM_TOKENS = (1, 16, 128, 2048, 8192)

_PRESET = re.compile(r"^(?:dense-rfc|resnet50-fc)-b(?P<batch>\d+)$|^llm-(?P<k>\d+)x(?P<n>\d+)-m(?P<m>\d+)$")


def preset(name: str) -> DenseWorkload | None:
    """The dense preset ``name`` (dense-rfc-b<N>, resnet50-fc-b<N>, llm-<K>x<N>-m<M>), else None."""
    match = _PRESET.match(name)
    if match is None:
        return None
    if match["batch"] is not None:
        batch = int(match["batch"])
        if batch <= 0:
            raise ValueError(f"preset {name!r}: batch must be positive")
        if name.startswith("dense-rfc"):
            return DenseWorkload(m=batch, n=1024, k=2048, b_layout="nk")
        return DenseWorkload(m=batch, n=1000, k=2048, b_layout="nk")  # ResNet-50's fc (nn.Linear)
    k, n, m = int(match["k"]), int(match["n"]), int(match["m"])
    if (k, n) not in LLM_SHAPES or m <= 0:
        raise ValueError(f"unknown dense preset {name!r} (llm shapes: "
                         f"{', '.join(f'{a}x{b}' for a, b in LLM_SHAPES)}; m positive)")
    return DenseWorkload(m=m, n=n, k=k, b_layout="nk")


def preset_names() -> list[str]:
    """The documented dense preset names."""
    return ([f"dense-rfc-b{b}" for b in RFC_DENSE_BATCHES] + [f"resnet50-fc-b{b}" for b in RESNET50_FC_BATCHES]
            + [f"llm-{k}x{n}-m{m}" for k, n in LLM_SHAPES for m in LLM_TOKENS])


def preset_name(workload: DenseWorkload) -> str | None:
    """The preset that names ``workload``, or None."""
    wl = workload
    names = [f"dense-rfc-b{wl.m}", f"resnet50-fc-b{wl.m}"]
    if (wl.k, wl.n) in LLM_SHAPES:
        names.append(f"llm-{wl.k}x{wl.n}-m{wl.m}")
    for name in names:
        if preset(name) == workload:
            return name
    return None
