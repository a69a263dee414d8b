"""A stand-in for the GPU measurer: smooth synthetic times, a few synthetic crashes."""

import math

from tc_autotune.measure.measurer import MeasureErrorNo, MeasureResult


class SyntheticMeasurer:
    """Times from a smooth function of the tile shape; a few configs 'crash'."""

    calls: list = []

    def __init__(self, space, options=None):
        self.space = space

    def use_space(self, space):
        self.space = space

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def __call__(self, configs):
        out = []
        for c in configs:
            SyntheticMeasurer.calls.append((self.space.workload, self.space.index(c)))
            if c.chunk == 8 and c.wmma == "m32n8k16":
                out.append(MeasureResult((), MeasureErrorNo.RUN_ERROR, "synthetic crash"))
                continue
            reuse = c.block_m * c.block_n / (c.block_m + c.block_n)
            t = 1e-4 * (1 + 64 / reuse) * (1 + abs(math.log2(c.chunk) - 1)) * (1.2 if c.vec_a < 8 else 1)
            out.append(MeasureResult((t, t * 1.01, t * 0.99)))
        return out
