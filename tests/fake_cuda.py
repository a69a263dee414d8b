"""A stand-in ``torch`` with a simulated GPU clock, for the timing code without a GPU.

Launches are synchronous here: a kernel's ``launch(ms)`` advances the clock by its duration, or,
while a CUDA graph is being captured, is recorded into the graph, whose ``replay`` advances the
clock by what it holds.  Events read the clock, so ``elapsed_time`` is exactly the launches
between them: a timing function's arithmetic (launch counts, per-launch division, repeats) is
checked against known kernel times.  Tensors are numpy arrays in a wrapper (``.cuda()``,
``.cpu()``, ``.numpy()``)."""

import contextlib
import types

import numpy as np


class FakeTensor:
    def __init__(self, array):
        self.array = np.asarray(array)

    def cuda(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


class FakeCuda:
    def __init__(self, fail_capture: bool = False):
        self.clock_ms = 0.0
        self.capturing: list | None = None
        self.fail_capture = fail_capture
        self.captures = 0  # graphs captured
        self.replays = 0

    def launch(self, ms: float) -> None:
        """A kernel of ``ms`` milliseconds is launched (what a timed ``run()`` calls)."""
        if self.capturing is not None:
            self.capturing.append(ms)
        else:
            self.clock_ms += ms

    # ---- the torch.cuda API the timing code uses ----
    def is_available(self):
        return True

    def synchronize(self):
        pass

    def Stream(self):  # noqa: N802 (torch's name)
        return types.SimpleNamespace(wait_stream=lambda other: None)

    def current_stream(self):
        return self.Stream()

    def stream(self, stream):
        return contextlib.nullcontext()

    def Event(self, enable_timing=False):  # noqa: N802
        cuda = self

        class Event:
            def record(self):
                self.at = cuda.clock_ms

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.at - self.at

        return Event()

    def CUDAGraph(self):  # noqa: N802
        cuda = self

        class Graph:
            def __init__(self):
                self.launches = []

            def replay(self):
                cuda.replays += 1
                cuda.clock_ms += sum(self.launches)

        return Graph()

    @contextlib.contextmanager
    def graph(self, graph):
        if self.fail_capture:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        self.capturing = graph.launches
        try:
            yield
        finally:
            self.capturing = None
            self.captures += 1


def fake_torch(cuda: FakeCuda) -> types.ModuleType:
    """A module to put in ``sys.modules["torch"]``."""
    module = types.ModuleType("torch")
    module.cuda = cuda
    module.float16, module.float32 = np.float16, np.float32
    module.from_numpy = FakeTensor
    module.full = lambda shape, value, dtype, device: FakeTensor(np.full(shape, value, dtype))
    return module
