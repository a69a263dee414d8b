"""The knob space of the Tensor Core conv2d template.

AutoTVM-style: every knob has an explicit candidate list, a config is one
choice per knob, and its index is the mixed-radix number of those choices (the
first knob varies fastest), so index <-> config is a bijection that is stable as
long as the candidate lists are.  A validity filter knows the hardware and the
template's constraints and says *why* a config is rejected.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import asdict, dataclass, fields
from typing import Iterator

from .gpu import GpuInfo, default_gpu
from .workloads import Conv2dWorkload

WMMA_SHAPES = {"m16n16k16": (16, 16, 16), "m8n32k16": (8, 32, 16), "m32n8k16": (32, 8, 16)}

# knob -> candidates, in index order.  Offsets are in elements of the tile's dtype
# (fp16 for A and B, fp32 for the C staging tile); vector widths in elements.
KNOBS: dict[str, tuple] = {
    "block_row_warps": (1, 2, 4),
    "block_col_warps": (1, 2, 4),
    "warp_row_tiles": (1, 2, 4, 8),
    "warp_col_tiles": (1, 2, 4, 8),
    "chunk": (1, 2, 4, 8),
    "wmma": tuple(WMMA_SHAPES),
    "offset_a": (0, 8, 16),
    "offset_b": (0, 8, 16),
    "offset_c": (0, 4, 8),
    "vec_a": (1, 2, 4, 8),
    "vec_b": (1, 2, 4, 8),
    "vec_c": (1, 2, 4),
    # Appended knobs start with the value that reproduces the kernel before they existed,
    # so the indices of older records stay valid and their configs read back unchanged.
    "stages": (1, 2, 3, 4),  # shared-memory buffers of the k-loop; >= 2: cp.async pipeline
    "frag_buffers": (1, 2),  # 2: load the next k-slice's fragments during the MMAs
    "split_k": (1, 2, 4, 8, 16),  # K slices in parallel blocks, summed by a second kernel
    # mma: ldmatrix + mma.sync on XOR-swizzled shared tiles instead of WMMA on padded ones;
    # wgmma: Hopper warpgroup MMA reading 128-byte-swizzled shared tiles (sm_90 only)
    "intrinsic": ("wmma", "mma", "wgmma"),
}

# Knobs a record may lack (written before the knob existed), with the value it implies.
KNOB_DEFAULTS = {"stages": 1, "frag_buffers": 1, "split_k": 1, "intrinsic": "wmma"}

MAX_ACCUMULATOR_FRAGMENTS = 16  # per warp: 16 x 8 fp32 registers per thread


@dataclass(frozen=True)
class Conv2dConfig:
    """One point of the space: a value for every knob."""

    block_row_warps: int
    block_col_warps: int
    warp_row_tiles: int
    warp_col_tiles: int
    chunk: int
    wmma: str
    offset_a: int
    offset_b: int
    offset_c: int
    vec_a: int
    vec_b: int
    vec_c: int
    stages: int = 1
    frag_buffers: int = 1
    split_k: int = 1
    intrinsic: str = "wmma"

    @property
    def wmma_mnk(self) -> tuple[int, int, int]:
        return WMMA_SHAPES[self.wmma]

    @property
    def block_m(self) -> int:
        return self.block_row_warps * self.warp_row_tiles * self.wmma_mnk[0]

    @property
    def block_n(self) -> int:
        return self.block_col_warps * self.warp_col_tiles * self.wmma_mnk[1]

    @property
    def block_k(self) -> int:
        return self.chunk * self.wmma_mnk[2]

    @property
    def threads(self) -> int:
        return self.block_row_warps * self.block_col_warps * 32

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the A/B tiles and the C staging tile share one pool."""
        a = self.block_m * (self.block_k + self.offset_a) * 2
        b = self.block_k * (self.block_n + self.offset_b) * 2
        c = self.block_m * (self.block_n + self.offset_c) * 4
        return max(self.stages * (a + b), c)

    def as_dict(self) -> dict:
        return asdict(self)


KNOB_NAMES = tuple(f.name for f in fields(Conv2dConfig))
assert KNOB_NAMES == tuple(KNOBS), "knob table and Conv2dConfig fields must agree"


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# What the mma and wgmma paths require of other knobs (the tuner's moves into them set these).
MMA_REQUIRES = {"wmma": "m16n16k16", "offset_a": 0, "offset_b": 0}
# wgmma: the four warps along M are one warpgroup; a k-step is one 128-byte swizzled row of
# 64 fp16 (chunk 4); the operands stay in shared memory (no fragments to double-buffer).
WGMMA_REQUIRES = {**MMA_REQUIRES, "block_row_warps": 4, "chunk": 4, "frag_buffers": 1}
INTRINSIC_REQUIRES = {"mma": MMA_REQUIRES, "wgmma": WGMMA_REQUIRES}


def _why_not_mma(config: Conv2dConfig, gpu: GpuInfo) -> str | None:
    """The mma path: 16x16x16 tiles, sm_80's m16n8k16, and shared tiles whose rows the
    XOR swizzle can permute (multiples of 32 fp16; it replaces the padding offsets)."""
    if config.wmma != "m16n16k16":
        return f"intrinsic=mma computes 16x16x16 tiles, not wmma={config.wmma}"
    if int(gpu.arch[3:]) < 80:
        return f"intrinsic=mma needs mma.sync.m16n8k16 (sm_80 or newer), not {gpu.arch}"
    if config.offset_a or config.offset_b:
        return "intrinsic=mma swizzles the A and B tiles: offset_a and offset_b must be 0"
    if config.block_k % 32 or config.block_n % 32:
        return (f"intrinsic=mma: block_k={config.block_k} and block_n={config.block_n} "
                "must be multiples of 32 (swizzled rows)")
    return None


def _why_not_wgmma(config: Conv2dConfig, gpu: GpuInfo) -> str | None:
    """The wgmma path: Hopper only, a warpgroup of four warps along M, 64-deep k-steps, and
    warpgroup tiles of whole 64-column swizzle atoms (warp_col_tiles 4 or 8)."""
    if gpu.arch != "sm_90":
        return f"intrinsic=wgmma is a Hopper instruction (sm_90), not {gpu.arch}"
    for knob, value in WGMMA_REQUIRES.items():
        if getattr(config, knob) != value:
            return f"intrinsic=wgmma needs {knob}={value!r}, not {getattr(config, knob)!r}"
    if config.warp_col_tiles * 16 % 64:
        return (f"intrinsic=wgmma: warp_col_tiles={config.warp_col_tiles} gives a warpgroup "
                f"{config.warp_col_tiles * 16} columns, not a multiple of the 64-column swizzle atom")
    return None


class ConfigSpace:
    """All configs of the template for one workload on one GPU."""

    def __init__(self, workload: Conv2dWorkload, gpu: GpuInfo | None = None, knobs: dict | None = None):
        self.workload = workload
        self.gpu = gpu or default_gpu()
        # A narrower table pins knobs; a knob it lacks is pinned to its KNOB_DEFAULTS value.
        self.knobs = {name: (knobs or KNOBS).get(name, (KNOB_DEFAULTS.get(name),)) for name in KNOBS}
        self._radices = [len(c) for c in self.knobs.values()]

    def __len__(self) -> int:
        return math.prod(self._radices)

    def __iter__(self) -> Iterator[Conv2dConfig]:
        return (self.get(i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"ConfigSpace({self.workload}, {self.gpu.arch}, {len(self)} configs)"

    # ---- index <-> config ------------------------------------------------
    def get(self, index: int) -> Conv2dConfig:
        if not 0 <= index < len(self):
            raise ValueError(f"config index {index} is outside the space (0..{len(self) - 1})")
        values = {}
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            index, pos = divmod(index, radix)
            values[name] = candidates[pos]
        return Conv2dConfig(**values)

    def index(self, config: Conv2dConfig) -> int:
        index, scale = 0, 1
        for (name, candidates), radix in zip(self.knobs.items(), self._radices):
            value = getattr(config, name)
            # by type too: True == 1 and 2.0 == 2 in Python, but neither is a knob value
            if not any(type(value) is type(c) and value == c for c in candidates):
                raise ValueError(f"{name}={value!r} is not in the space (candidates: {list(candidates)})")
            index += candidates.index(value) * scale
            scale *= radix
        return index

    def sample(self, n: int, seed: int | None = None, valid_only: bool = True) -> list[Conv2dConfig]:
        """``n`` distinct configs drawn uniformly (valid ones only, by default)."""
        rng = random.Random(seed)
        chosen: dict[int, Conv2dConfig] = {}
        tries = 0
        while len(chosen) < n and tries < 200 * n + 1000:
            tries += 1
            i = rng.randrange(len(self))
            if i in chosen:
                continue
            config = self.get(i)
            if not valid_only or self.why_invalid(config) is None:
                chosen[i] = config
        return list(chosen.values())

    # ---- log form -----------------------------------------------------------
    def to_entity(self, config: Conv2dConfig) -> dict:
        """AutoTVM-like plain dict: {"index": i, "entity": [[knob, "ot", value], ...]}."""
        return {"index": self.index(config), "entity": [[k, "ot", getattr(config, k)] for k in KNOB_NAMES]}

    def from_entity(self, entity: dict) -> Conv2dConfig:
        try:
            values = {name: value for name, _kind, value in entity["entity"]}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"malformed config entity: {entity!r}") from None
        return self.from_dict(values)

    def from_dict(self, values: dict) -> Conv2dConfig:
        values = {**KNOB_DEFAULTS, **values}
        unknown = set(values) - set(KNOB_NAMES)
        missing = set(KNOB_NAMES) - set(values)
        if unknown or missing:
            raise ValueError(f"config does not match the space: unknown {sorted(unknown)}, missing {sorted(missing)}")
        config = Conv2dConfig(**values)
        self.index(config)  # raises for values outside the candidate lists
        return config

    # ---- validity -----------------------------------------------------------
    def why_invalid(self, config: Conv2dConfig) -> str | None:
        """None for a config that builds and runs on this workload and GPU, else the reason."""
        wl, gpu = self.workload, self.gpu
        m, n, k = wl.gemm_shape
        if config.threads > gpu.max_threads_per_block:
            return f"{config.threads} threads per block exceed the GPU's {gpu.max_threads_per_block}"
        if config.smem_bytes > gpu.max_smem_per_block:
            return f"{config.smem_bytes} bytes of shared memory exceed the GPU's {gpu.max_smem_per_block} per block"
        frags = config.warp_row_tiles * config.warp_col_tiles
        if frags > MAX_ACCUMULATOR_FRAGMENTS:
            return f"{frags} accumulator fragments per warp exceed {MAX_ACCUMULATOR_FRAGMENTS} (register spills)"
        # Tiles far larger than the problem are pure padding: the kernel computes zeros.
        if config.block_m > 2 * _round_up(m, 16):
            return f"block_m={config.block_m} is more than twice the padded M={_round_up(m, 16)}"
        if config.block_n > 2 * _round_up(n, 16):
            return f"block_n={config.block_n} is more than twice the padded N={_round_up(n, 16)}"
        if config.block_k > 2 * _round_up(k, 16):
            return f"block_k={config.block_k} is more than twice the padded reduction K={_round_up(k, 16)}"
        if config.stages > 1 and int(gpu.arch[3:]) < 80:
            return f"stages={config.stages} needs cp.async (sm_80 or newer), not {gpu.arch}"
        k_steps = -(-k // (config.block_k * config.split_k))  # per K slice
        if config.stages > k_steps:
            return f"stages={config.stages} exceed the {k_steps} k-steps of block_k={config.block_k}"
        if config.split_k > 1:
            if (config.split_k - 1) * k_steps * config.block_k >= k:
                return f"split_k={config.split_k} leaves a K slice empty (K={k}, block_k={config.block_k})"
            blocks = -(-m // config.block_m) * -(-n // config.block_n)
            if blocks >= 2 * gpu.sm_count:
                return f"split_k={config.split_k}: {blocks} blocks already fill the GPU twice over"
        if config.intrinsic != "wmma":
            reason = (_why_not_mma if config.intrinsic == "mma" else _why_not_wgmma)(config, gpu)
            if reason:
                return reason
        if config.frag_buffers > config.chunk:
            return f"frag_buffers={config.frag_buffers} exceed chunk={config.chunk} (nothing to overlap)"
        # Vector loads/stores: aligned in global memory and evenly shared by the block's threads.
        copies = {
            "vec_a": (config.vec_a, wl.in_channels, "input channels", config.block_m * config.block_k),
            "vec_b": (config.vec_b, wl.out_channels, "output channels", config.block_k * config.block_n),
            "vec_c": (config.vec_c, wl.out_channels, "output channels", config.block_m * config.block_n),
        }
        for knob, (vec, channels, what, tile) in copies.items():
            if channels % vec:
                return f"{knob}={vec} does not divide the {channels} {what} (misaligned vector access)"
            if tile % (config.threads * vec):
                return f"{knob}={vec}: the {tile}-element tile does not split evenly over {config.threads} threads"
        for knob, offset, vec in (("offset_a", config.offset_a, config.vec_a),
                                  ("offset_b", config.offset_b, config.vec_b),
                                  ("offset_c", config.offset_c, config.vec_c)):
            if offset % vec:
                return f"{knob}={offset} is not a multiple of its vector width {vec}"
        return None

    def is_valid(self, config: Conv2dConfig) -> bool:
        return self.why_invalid(config) is None

    # ---- a config that needs no tuning -------------------------------------
    def default_config(self) -> Conv2dConfig:
        """The valid config the analytic prior (``cost_model.prior_score``) rates highest,
        among those with the usual shared-memory offsets: good enough to run untuned.
        Ties go to the lowest index.  Memoised per (workload, GPU, knob table)."""
        return _default_config(self.workload, self.gpu, tuple(self.knobs.items()))


@functools.lru_cache(maxsize=256)
def _default_config(workload: Conv2dWorkload, gpu: GpuInfo, knobs: tuple) -> Conv2dConfig:
    """``ConfigSpace.default_config`` without enumerating the ~10M offset-fixed configs.

    The vector-width rules are per knob (each vec knob's alignment and thread-split
    rules involve only itself and the tile) and the prior grows with each width, so
    the best config of every other-knob combination uses, per vec knob, its widest
    width that is valid with the other two at 1.  That leaves ~200k rows to score.
    """
    import numpy as np

    from .cost_model import prior_score, valid_mask

    space = ConfigSpace(workload, gpu, dict(knobs))
    names = list(space.knobs)
    fixed = {"offset_a": 8, "offset_b": 8, "offset_c": 4}
    vecs = [name for name in ("vec_a", "vec_b", "vec_c") if len(space.knobs[name]) > 1]
    grid = [[c.index(fixed[name])] if fixed.get(name) in c else
            [0] if name in vecs else range(len(c)) for name, c in space.knobs.items()]
    pos = np.stack(np.meshgrid(*grid, indexing="ij"), axis=-1).reshape(-1, len(names))
    chosen = np.zeros((len(pos), len(vecs)), dtype=np.int64)
    for j, name in enumerate(vecs):  # widest valid width of this knob, the others at their first
        col, best = names.index(name), np.full(len(pos), -1, dtype=np.int64)
        for p in range(len(space.knobs[name])):
            trial = pos.copy()
            trial[:, col] = p
            width = np.asarray(space.knobs[name][p])
            better = valid_mask(space, trial) & ((best < 0) | (width > np.asarray(space.knobs[name])[best]))
            best[better] = p
        chosen[:, j] = best
    pos = pos[(chosen >= 0).all(axis=1)]
    for j, name in enumerate(vecs):
        pos[:, names.index(name)] = chosen[(chosen >= 0).all(axis=1)][:, j]
    pos = pos[valid_mask(space, pos)]
    if len(pos) == 0:  # tiny or odd shapes: any valid config
        return next(c for c in space if space.is_valid(c))
    scales = np.cumprod([1] + space._radices[:-1])
    order = np.lexsort((pos @ scales, -prior_score(space, pos)))
    for i in pos[order][:64] @ scales:
        config = space.get(int(i))
        if space.is_valid(config):
            return config
    return next(c for c in space if space.is_valid(c))


def conv2d_space(workload: Conv2dWorkload, gpu: GpuInfo | None = None) -> ConfigSpace:
    """The knob space of ``build_conv2d`` for one workload (on ``gpu``, default: local or sm_90)."""
    return ConfigSpace(workload, gpu)
