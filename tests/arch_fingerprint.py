"""The architecture fingerprint: what a refactor of space, rules and cost model must leave
unchanged, hashed.  (The generated code of ~100 sampled configs was hashed here too, to remind
a maintainer to bump the template version; records are keyed by their code's hash now, so a
code change reaches no record unnoticed: ``database.record``, ``tc-records --restamp``.)

* ``masks``: per (workload, GPU arch, knob table), sha256 of ``cost_model.valid_mask`` over a
  large deterministic sample of config indices, of ``space.why_invalid``'s reasons over a
  smaller one, and the count of valid configs.
* ``defaults``: ``space.default_config()`` per (workload, arch).
* ``features``: sha256 of ``features_from_positions`` (the prior is its last column) on a
  sample of the tutorial's space.

Knobs and features added after the data file was first written (``LATER_KNOBS``,
``LATER_FEATURES``) leave the entries above as they were: those spaces pin the knobs to the
default that reproduces the old kernels, and that hash leaves the features out.  Entries of
their own cover them (``LATER_VARIANTS``, "<workload>/<arch>/full+<knob>", the later
``FEATURE_ENTRIES``).

    python tests/arch_fingerprint.py --write    # record today's values in tests/data/

``tests/test_arch_fingerprint.py`` recomputes everything and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from tc_autotune.search import cost_model  # noqa: E402
from tc_autotune import workloads
from tc_autotune.backends.cuda.gpu import gpu_for_arch  # noqa: E402
from tc_autotune.templates.tc_gemm.knobs import KNOB_DEFAULTS, KNOBS, Conv2dConfig  # noqa: E402
from tc_autotune.templates.registry import ConfigSpace  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "arch_fingerprint.json"
SEED = 20261123

WORKLOADS = {
    "tutorial": "tutorial",
    "c3-7x7-s2": "n=1,h=224,w=224,c=3,k=64,r=7,stride=2,pad=3",
    "1x1": "rfc-1x1-b32",
    "odd-channels": "n=3,h=17,w=15,c=20,k=40,r=3,pad=1x2x0x1",
    "dilation2": "n=2,h=20,c=32,k=64,r=3,dilation=2,pad=2",
    "fp32-in": "n=8,h=14,c=256,k=256,r=3,pad=1,dtype=float32",
    "fp16-out-strided": "n=3,h=17,w=23,c=40,k=72,r=5,s=3,stride=2x1,pad=2x1,dilation=2,out_dtype=float16",
    "small-grid": "resnet50-res5-3x3-512-512-s2-b1",
}
# Pinned knobs of each intrinsic path (what its rules require, written out here so the
# fingerprint does not depend on the code under test).
_SWIZZLED = {"wmma": ("m16n16k16",), "offset_a": (0,), "offset_b": (0,)}
VARIANTS = {
    "wmma-m16n16k16": {"intrinsic": ("wmma",), "wmma": ("m16n16k16",)},
    "wmma-m8n32k16": {"intrinsic": ("wmma",), "wmma": ("m8n32k16",)},
    "wmma-m32n8k16": {"intrinsic": ("wmma",), "wmma": ("m32n8k16",)},
    "mma": {"intrinsic": ("mma",), **_SWIZZLED},
    "wgmma": {"intrinsic": ("wgmma",), **_SWIZZLED, "block_row_warps": (4,), "chunk": (4,),
              "frag_buffers": (1,)},
}
# Knobs appended since the data file was first written, pinned to their default in the spaces
# above; variants that use them.
LATER_KNOBS = {knob: (KNOB_DEFAULTS[knob],) for knob in (
    "wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong", "tma_im2col",
    "tma_store", "setmaxnreg", "group_pack", "swap_ab", "consumer_n", "deep_ring")}
LATER_VARIANTS = {
    "wgmma-in-flight": {**VARIANTS["wgmma"], "wgmma_in_flight": (1,)},
    "warp-specialized": {**VARIANTS["wgmma"], "warp_specialized": (1,)},
    "consumers-along-m": {**VARIANTS["wgmma"], "warp_specialized": (1, 2), "consumers_along_m": (1,)},
    "multicast-b": {**VARIANTS["wgmma"], "warp_specialized": (1,), "multicast_b": (1,)},
    "ping-pong": {**VARIANTS["wgmma"], "warp_specialized": (2,), "ping_pong": (1,)},
    "tma-im2col": {**VARIANTS["wgmma"], "warp_specialized": (1, 2), "tma_im2col": (1,)},
    "tma-store": {**VARIANTS["wgmma"], "warp_specialized": (1, 2), "tma_im2col": (0, 1), "tma_store": (1,)},
    "setmaxnreg": {**VARIANTS["wgmma"], "warp_specialized": (1, 2), "ping_pong": (0, 1), "tma_store": (0, 1),
                   "setmaxnreg": (1,)},
}
LATER_FEATURES = ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b",
                  "ping_pong", "tma_im2col", "tma_store", "setmaxnreg",
                  "log2_group_pack", "log2_gemm_groups", "swap_ab")  # later knobs' features
# Feature hashes: entry -> the later knobs free in its space, whose features it keeps (the others
# pinned to their default and left out), as each entry was first written.
FEATURE_ENTRIES = {
    "features": (),
    "features+later": ("wgmma_in_flight",),
    "features+warp_specialized": ("wgmma_in_flight", "warp_specialized"),
    "features+multicast_b": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b"),
    "features+ping_pong": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong"),
    "features+tma_im2col": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
                            "tma_im2col"),
    "features+tma_store": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
                           "tma_im2col", "tma_store"),
    "features+setmaxnreg": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
                            "tma_im2col", "tma_store", "setmaxnreg"),
    # group_pack's features (the tutorial is ungrouped: every valid row has group_pack=1)
    "features+group_pack": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
                            "tma_im2col", "tma_store", "setmaxnreg", "group_pack", "log2_group_pack",
                            "log2_gemm_groups"),
    "features+swap_ab": ("wgmma_in_flight", "warp_specialized", "consumers_along_m", "multicast_b", "ping_pong",
                         "tma_im2col", "tma_store", "setmaxnreg", "group_pack", "log2_group_pack",
                         "log2_gemm_groups", "swap_ab"),
}
ARCHS = ("sm_90", "sm_80", "sm_75")
MASK_SAMPLE = 50_000  # indices per full space (200,000 until 2026-11-25: CI time)
VARIANT_MASK_SAMPLE = 10_000  # indices per pinned-variant space (40,000 until 2026-11-25)
REASON_SAMPLE = 300  # (1,500 until 2026-11-25: CI time)
FEATURE_SAMPLE = 20_000  # (50,000 until 2026-11-25: CI time)
DEFAULTS = (("tutorial", "sm_90"), ("1x1", "sm_90"), ("c3-7x7-s2", "sm_90"), ("odd-channels", "sm_90"),
            ("fp32-in", "sm_90"), ("small-grid", "sm_90"), ("tutorial", "sm_80"), ("dilation2", "sm_75"))


def _space(name: str, arch: str, variant: str | None = None, extra: dict | None = None) -> ConfigSpace:
    knobs = {**KNOBS, **LATER_KNOBS, **{**VARIANTS, **LATER_VARIANTS}.get(variant, {}), **(extra or {})}
    return ConfigSpace(workloads.get(WORKLOADS[name]), gpu_for_arch(arch), knobs=knobs)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- computing --------------------------------------------------------------------------------
def mask_spaces():
    """(key, space, sample size) of every space whose validity is fingerprinted."""
    for name in WORKLOADS:
        for arch in ARCHS:
            yield f"{name}/{arch}/full", _space(name, arch), MASK_SAMPLE
            for variant in VARIANTS:
                yield f"{name}/{arch}/{variant}", _space(name, arch, variant), VARIANT_MASK_SAMPLE
            for knob in LATER_KNOBS:
                yield f"{name}/{arch}/full+{knob}", _space(name, arch, extra={knob: KNOBS[knob]}), MASK_SAMPLE
            for variant in LATER_VARIANTS:
                yield f"{name}/{arch}/{variant}", _space(name, arch, variant), VARIANT_MASK_SAMPLE


def mask_fingerprint(key: str, space: ConfigSpace, n: int) -> dict:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little"))
    idx = rng.integers(0, len(space), size=n)
    mask = cost_model.valid_mask(space, cost_model.positions_from_indices(space, idx))
    reasons = [space.why_invalid(space.get(int(i))) or "" for i in idx[:REASON_SAMPLE]]
    return {"valid": int(mask.sum()), "mask": _sha(np.packbits(mask).tobytes()),
            "reasons": _sha("\n".join(reasons).encode())}


def features_hash(free: tuple = ()) -> str:
    """The features of the tutorial's space with the later knobs ``free`` (a ``FEATURE_ENTRIES``
    value) and their features; the other later knobs pinned, their features left out."""
    space = _space("tutorial", "sm_90", extra={knob: KNOBS[knob] for knob in free if knob in KNOBS})
    idx = np.random.default_rng(SEED).integers(0, len(space), size=FEATURE_SAMPLE)
    pos = cost_model.positions_from_indices(space, idx)
    pos = pos[cost_model.valid_mask(space, pos)]
    features = cost_model.features_from_positions(space, pos)
    kept = [i for i, f in enumerate(space.template.feature_names) if f not in LATER_FEATURES or f in free]
    return _sha(np.ascontiguousarray(features[:, kept]).tobytes())


def default_index(name: str, arch: str) -> int:
    space = _space(name, arch)
    return space.index(space.default_config())


def compute() -> dict:
    return {
        "masks": {key: mask_fingerprint(key, space, n) for key, space, n in mask_spaces()},
        "defaults": {f"{name}/{arch}": default_index(name, arch) for name, arch in DEFAULTS},
        **{key: features_hash(free) for key, free in FEATURE_ENTRIES.items()},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write the fingerprint to {DATA}")
    args = p.parse_args(argv)
    data = compute()
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.write:
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
