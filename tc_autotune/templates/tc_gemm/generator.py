"""Which kernel generator made a record: the template version and its code fingerprint.

A record's time describes the kernel that the template generated for its config
*then*.  When the template, the intrinsics, the build arch or the nvcc flags change,
the same config can become a different (faster or slower) kernel, and an old record
would mislead ``apply`` into picking it.  So every record carries ``TEMPLATE_VERSION``,
and records of another version are *stale*: skipped by apply-best unless asked for,
used by the tuner only as training data.

Forgetting to bump the version is caught by a test: ``fingerprint()`` hashes the CUDA
source (plus build arch and nvcc flags) generated for ``PROBES``, a fixed set of
(workload, config) pairs covering every intrinsic and knob path, and the test compares
it with ``FINGERPRINTS[TEMPLATE_VERSION]``.  When the generated code changes on
purpose: bump the task's version (``TC_GEMM.versions``, which records read
without importing TVM), add its fingerprint here (``python -m tc_autotune.templates.tc_gemm.generator``
prints it), never edit an older entry.  Dense (``tasks.DENSE``) shares the generator but
has its own version, probes and fingerprints (``DENSE_PROBES``: both weight layouts,
batched A, tiny M), so the conv2d ones stay as they were.  Fused epilogues are made by the
same generator (same versions) but probed apart (``FUSED_PROBES``, ``DENSE_FUSED_PROBES``),
so adding them changed no plain fingerprint; a change of their code bumps the task's version
like any other.  So are the knobs appended since (``LATER_KNOBS``: ``IN_FLIGHT_PROBES``,
``DENSE_IN_FLIGHT_PROBES``; ``ws_probes``' sets for the kernels the ``warp_specialized`` module
writes); at their default a config's code and hash are what they were.
``COVER_PROBES`` and ``COVER_WS_PROBES`` (``probe_cover``) cover every pair of knob values, so a
change that only some knob value's kernels see changes a fingerprint too.
"""

from __future__ import annotations

import hashlib
import json

import tvm

from ...backends.cuda import nvcc
from ...core import tasks
from . import ws_probes
from .cover_probes import COVER_PROBES, COVER_WS_PROBES
from ...backends.cuda.gpu import gpu_for_arch
from . import schedule  # noqa: F401 (registers TC_GEMM's lowering of each task: the code hashed here)
from .knobs import KNOB_DEFAULTS, TcGemmConfig
from .template import TC_GEMM
from ...workloads.conv2d import get

# The versions of TC_GEMM's code for each task (``Template.versions``; records stamp them).
TEMPLATE_VERSION = TC_GEMM.versions[tasks.CONV2D.name]

# version -> fingerprint of PROBES' generated code (never edit an entry; add one per bump).
FINGERPRINTS = {
    1: "42ded4591a970d12687f1a4dd30126bfac7822db815fca869699a479ef08d6cb",
}

_BASE = dict(block_row_warps=2, block_col_warps=2, warp_row_tiles=2, warp_col_tiles=2, chunk=2,
             wmma="m16n16k16", offset_a=8, offset_b=8, offset_c=4, vec_a=8, vec_b=8, vec_c=4)
_SWIZZLED = dict(offset_a=0, offset_b=0)
_WGMMA = dict(_SWIZZLED, intrinsic="wgmma", block_row_warps=4, chunk=4)

# (workload, knob changes from _BASE): every intrinsic, WMMA shape, pipeline, split-K,
# strided/dilated/odd shapes, fp16 output and fp32 input, all valid on sm_90.
PROBES: tuple[tuple[str, dict], ...] = (
    ("tutorial", {}),
    ("rfc-3x3-b32", dict(wmma="m8n32k16", warp_row_tiles=4, stages=2)),
    ("rfc-1x1-b32", dict(wmma="m32n8k16", warp_col_tiles=4, chunk=4, stages=3, frag_buffers=2)),
    ("resnet50-res5-3x3-512-512-s2-b1", dict(split_k=4, stages=2)),
    ("rfc-3x3-b256", dict(_SWIZZLED, intrinsic="mma", warp_col_tiles=4, stages=3, frag_buffers=2)),
    ("rfc-3x3-b1", dict(_SWIZZLED, intrinsic="mma", stages=2, split_k=8, warp_row_tiles=1)),
    ("tutorial", dict(_WGMMA, warp_col_tiles=8, block_col_warps=1, stages=3)),
    ("rfc-1x1-b256", dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("resnet50-conv1-b1", dict(vec_a=1, chunk=4)),
    ("n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2,out_dtype=float16", dict(offset_c=8)),
    ("n=8,h=14,c=256,k=256,r=3,pad=1,dtype=float32", dict(stages=2)),
)
PROBE_ARCH = "sm_90"

DENSE_TEMPLATE_VERSION = TC_GEMM.versions[tasks.DENSE.name]
DENSE_FINGERPRINTS = {
    1: "fd5b6b730ab87edfe512b0160ff2df2f58ffaffaee90576a0462d91318d4a1b7",
    # 2: an (N, K) weight is copied along K with vector loads / cp.async and stored [n][k]
    # (col_major matrix_b, ldmatrix without .trans, K-major wgmma B); (K, N) code unchanged.
    2: "0d7db00ea509df8b7e216ee0898b40fa2b6ea0fd2c791e4219a660118b0a5fde",
}
# Dense: both weight layouts, every WMMA shape and intrinsic path on the (N, K) weight
# (vector loads along K of 16, 8 and 2 bytes: K = 264, 100, 9), batched A, M=16 with
# split-K, fp16 output.
DENSE_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=200,n=136,k=264", {}),
    ("dense:m=200,n=136,k=264,b=nk,out_dtype=float16", dict(stages=2)),
    ("dense:batch=2,m=100,n=136,k=264,b=nk", dict(_SWIZZLED, intrinsic="mma", stages=3, frag_buffers=2)),
    ("dense:m=16,n=4096,k=4096,b=nk", dict(wmma="m8n32k16", block_row_warps=1, warp_row_tiles=2, split_k=8,
                                           stages=2)),
    ("dense:m=256,n=256,k=512", dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("dense:m=256,n=256,k=512,b=nk", dict(_WGMMA, warp_col_tiles=4, stages=2)),
    ("dense:m=96,n=72,k=100,b=nk", dict(wmma="m32n8k16", warp_row_tiles=1, warp_col_tiles=4, vec_a=4, vec_b=4)),
    ("dense:m=40,n=24,k=9,b=nk", dict(vec_a=1, vec_b=1, block_row_warps=1, block_col_warps=1, chunk=1)),
)


# Fused epilogues (``epilogue``): every part, on every path, split-K (the sum kernel applies
# it), fp16 output and fp32 input.  version -> fingerprint, as FINGERPRINTS.
FUSED_FINGERPRINTS = {
    1: "7909955fcc1fffbbede29fd4a2953781bcd273d09c27468928ee5f495363fc99",
}
FUSED_PROBES: tuple[tuple[str, dict], ...] = (
    ("tutorial-bias_relu", {}),
    ("rfc-3x3-b32-scale_bias", dict(wmma="m8n32k16", warp_row_tiles=4, stages=2)),
    ("rfc-3x3-b256-bias_residual_relu", dict(_SWIZZLED, intrinsic="mma", warp_col_tiles=4, stages=3,
                                             frag_buffers=2)),
    ("tutorial-bias_gelu", dict(_WGMMA, warp_col_tiles=8, block_col_warps=1, stages=3)),
    ("resnet50-res5-3x3-512-512-s2-b1-scale_bias_residual_relu", dict(split_k=4, stages=2)),
    ("rfc-3x3-b1-bias_residual_relu", dict(_SWIZZLED, intrinsic="mma", stages=2, split_k=8, warp_row_tiles=1)),
    ("n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2,out_dtype=float16,"
     "epilogue=scale_bias_residual_relu", dict(offset_c=8)),
    ("n=8,h=14,c=256,k=256,r=3,pad=1,dtype=float32,epilogue=bias", dict(stages=2)),
)
DENSE_FUSED_FINGERPRINTS = {
    1: "1b73267b9ca843cc2facf677c5b71951e900290e692f1e476675cba39c48d5cb",
    # 2: the (N, K) weight's K-major path (see DENSE_FINGERPRINTS[2]).
    2: "9e41ec8a4a35671c998297d5a9514c3f43dbc6fd46384fb92850153a05003e0a",
}
DENSE_FUSED_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=200,n=136,k=264,epilogue=bias_gelu", {}),
    ("dense:m=200,n=136,k=264,b=nk,out_dtype=float16,epilogue=bias_residual_relu", dict(vec_b=1, stages=2)),
    ("dense:batch=2,m=100,n=136,k=264,epilogue=scale_bias_relu",
     dict(_SWIZZLED, intrinsic="mma", stages=3, frag_buffers=2)),
    ("dense:m=16,n=4096,k=4096,b=nk,epilogue=bias_gelu",
     dict(vec_b=1, block_row_warps=1, warp_row_tiles=1, split_k=8, stages=2)),
    ("dense:m=256,n=256,k=512,out_dtype=float16,epilogue=scale_bias_residual_relu",
     dict(_WGMMA, warp_col_tiles=4, stages=2)),
)


# Knobs appended after the fingerprints above were first recorded: a config that leaves them
# at their default generates the code it did before them, and hashes without them.
LATER_KNOBS = ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
               "tma_im2col", "tma_store", "setmaxnreg")

# wgmma groups in flight across k-steps (wgmma_in_flight=1): 2-4 stages, split-K, both
# warpgroup widths, fp16 output, fp32 input, a fused epilogue; each task's apart, keyed by its
# version as above.
_IN_FLIGHT = dict(_WGMMA, wgmma_in_flight=1)
IN_FLIGHT_FINGERPRINTS = {
    1: "509dc5452a5ba3ca4c8416a0758aafc15483edf7f71d1ab88fcbdee640ba331f",
}
IN_FLIGHT_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b256", dict(_IN_FLIGHT, warp_col_tiles=8, block_col_warps=1, stages=3)),
    ("tutorial", dict(_IN_FLIGHT, warp_col_tiles=4, stages=2)),
    ("resnet50-res5-3x3-512-512-s2-b1", dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=1, split_k=4, stages=4)),
    ("n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2,out_dtype=float16",
     dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=1, block_col_warps=1, stages=2)),
    ("n=8,h=14,c=256,k=256,r=3,pad=1,dtype=float32", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("rfc-3x3-b256-bias_residual_relu", dict(_IN_FLIGHT, warp_col_tiles=4, warp_row_tiles=4, stages=3)),
)
DENSE_IN_FLIGHT_FINGERPRINTS = {
    2: "94b4f92a512e47fd1dffc9c396c3a7e4a2c14db9c3a594c17ada2ce1212c6169",
}
DENSE_IN_FLIGHT_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=256,n=256,k=512", dict(_IN_FLIGHT, warp_col_tiles=4, stages=3)),
    ("dense:m=256,n=256,k=512,b=nk,out_dtype=float16", dict(_IN_FLIGHT, warp_col_tiles=4, stages=2)),
    ("dense:m=64,n=1024,k=4096,b=nk", dict(_IN_FLIGHT, warp_row_tiles=1, warp_col_tiles=8, block_col_warps=1,
                                           split_k=4, stages=3)),
)


# Pairwise covers of the knob values (``probe_cover``): every two knobs' values that valid configs
# of a path combine meet in some probe, so a change conditional on one knob value changes a
# fingerprint (the hand-picked sets above missed the fragment pipeline at stages=4, frag_buffers=2).
# COVER_PROBES: the template's kernels (wmma, mma, wgmma); COVER_WS_PROBES: the warp-specialized one.
COVER_FINGERPRINTS = {
    1: "907c29aedea0184b5d9e2dc07f79ed5ae18a3fbfb35c2063569dcd0a67524b65",
}
COVER_WS_FINGERPRINTS = {
    1: "edb3fe0ca3b3df2672a307e7c584f7c072c293ce9f91bd1e168628398f0d1900",
}

# The warp-specialized kernel's probe sets: "<name>_PROBES" and "<name>_FINGERPRINTS" of ``ws_probes``
# (COVER_WS: above), keyed by the conv2d task's version, or the dense task's for the DENSE_ ones.
WARP_SPECIALIZED_PROBE_SETS = ("WS", "DENSE_WS", "WS_SPLIT", "DENSE_WS_SPLIT", "WS_ALONG_M", "DENSE_WS_ALONG_M",
                               "WS_MULTICAST", "DENSE_WS_MULTICAST", "WS_PING_PONG", "DENSE_WS_PING_PONG",
                               "WS_IM2COL", "WS_TMA_STORE", "DENSE_WS_TMA_STORE", "WS_FUSED", "DENSE_WS_FUSED",
                               "WS_SETMAXNREG", "DENSE_WS_SETMAXNREG", "COVER_WS")


def probe_set(name: str) -> tuple[tuple, dict, int]:
    """(probes, fingerprints, the task version they are keyed by) of a warp-specialized probe set
    (``ws_probes``'s, or the pairwise cover's)."""
    version = DENSE_TEMPLATE_VERSION if name.startswith("DENSE_") else TEMPLATE_VERSION
    sets = vars(ws_probes) if hasattr(ws_probes, f"{name}_PROBES") else globals()
    return sets[f"{name}_PROBES"], sets[f"{name}_FINGERPRINTS"], version


def probe_kernels(probes=PROBES):
    """The probes as (workload, config) pairs."""
    return [(get(name), TcGemmConfig(**{**_BASE, **changes})) for name, changes in probes]


def generated_code(workload, config, arch: str = PROBE_ARCH) -> dict:
    """What the generator makes of one config: build arch, nvcc flags and CUDA source."""
    build = TC_GEMM.build_arch(config, gpu_for_arch(arch).arch)
    target = tvm.target.Target({"kind": "cuda", "arch": build})
    executable = TC_GEMM.lower(tasks.of(workload).name, workload, config, target)
    return {"workload": str(workload), "config": hashed_config(config), "arch": build,
            "nvcc_flags": list(nvcc.NVCC_FLAGS), "source": executable.mod.imports[0].inspect_source()}


def hashed_config(config) -> dict:
    """The config as ``generated_code`` records it: without the later knobs at their default."""
    return {knob: value for knob, value in config.as_dict().items()
            if knob not in LATER_KNOBS or value != KNOB_DEFAULTS[knob]}


def fingerprint(probes=PROBES) -> str:
    """sha256 of the code generated for every probe (deterministic for one TVM version)."""
    digest = hashlib.sha256()
    for workload, config in probe_kernels(probes):
        digest.update(json.dumps(generated_code(workload, config), sort_keys=True).encode())
    return digest.hexdigest()


def version_check(found: str | None = None) -> str | None:
    """None when today's generated code is the one ``TEMPLATE_VERSION`` names, else what to do."""
    found = found or fingerprint()
    known = FINGERPRINTS.get(TEMPLATE_VERSION)
    if found == known:
        return None
    return (f"the code generated for the probe configs changed (fingerprint {found}, version "
            f"{TEMPLATE_VERSION} is {known!r}): records measured before are stale now, so bump "
            f"TEMPLATE_VERSION to {TEMPLATE_VERSION + 1} (TC_GEMM's versions, in "
            f"tc_autotune/templates/tc_gemm/template.py) and add FINGERPRINTS[{TEMPLATE_VERSION + 1}] = "
            f"{found!r} in tc_autotune/templates/tc_gemm/generator.py")


if __name__ == "__main__":
    print(f"TEMPLATE_VERSION {TEMPLATE_VERSION}: fingerprint {fingerprint()}")
    print(f"DENSE_TEMPLATE_VERSION {DENSE_TEMPLATE_VERSION}: fingerprint {fingerprint(DENSE_PROBES)}")
    print(f"fused, version {TEMPLATE_VERSION}: fingerprint {fingerprint(FUSED_PROBES)}")
    print(f"dense fused, version {DENSE_TEMPLATE_VERSION}: fingerprint {fingerprint(DENSE_FUSED_PROBES)}")
    print(f"wgmma in flight, version {TEMPLATE_VERSION}: fingerprint {fingerprint(IN_FLIGHT_PROBES)}")
    print(f"pairwise cover, version {TEMPLATE_VERSION}: fingerprint {fingerprint(COVER_PROBES)}")
    print(f"dense wgmma in flight, version {DENSE_TEMPLATE_VERSION}: fingerprint "
          f"{fingerprint(DENSE_IN_FLIGHT_PROBES)}")
    for which in WARP_SPECIALIZED_PROBE_SETS:
        probes, _, version = probe_set(which)
        print(f"{which}_PROBES, version {version}: fingerprint {fingerprint(probes)}")
