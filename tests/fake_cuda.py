"""Stand-ins for the CUDA driver under the timer (``backends.cuda.timer``), for the timing code
without a GPU.

``FakeLibcuda`` is ``libcuda.so.1`` as the timer's ``CudaDriver`` calls it through ctypes (the
same function names, handles as ``c_void_p``, results written through ``byref``, CUresult
codes), on a simulated GPU clock: a kernel's ``launch(ms)`` advances the clock by its duration
or, while a stream is being captured, becomes a node of the graph, whose replay advances the
clock by what it holds.  Events read the clock, so ``elapsed`` is exactly the launches between
them: the timer's arithmetic (launch counts, per-launch division, repeats) is checked against
known kernel times, and its error handling against CUDA's error codes (``fail``).  It keeps
what is alive, so a test sees that the timer freed everything it made.

``FakeGpus`` is ``libcuda.so.1`` as ``backends.cuda.driver`` reads a GPU's facts through it, on
simulated GPUs (``H100_PCIE``, ...), or a driver that finds none or fails.

``fake_torch`` is the ``torch`` the baseline's code sees (tensors are numpy arrays in a
wrapper).  ``HostClock`` is a driver (the level above ctypes) that times real host calls with
``time.perf_counter``: the RPC tests' server (``rpc_host_server.py``) times CPU kernels with it.
"""

import contextlib
import time
import types
from collections import Counter

import numpy as np

from tc_autotune.backends.cuda import driver

NAMES = {1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
         100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
         101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
         803: ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"),
         400: ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
         700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
         901: ("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
               "operation failed due to a previous error during capture")}


class FakeLibcuda:
    """The driver functions the timer calls, on a simulated clock (see the module).

    ``fail``: {function name: CUresult it returns instead of working}; ``misroute``: launches
    never reach the capturing stream (as launches on another stream would not);
    ``invalidate_capture``: ending a capture fails as CUDA fails a capture something broke;
    ``slow_replays``: {n: factor}, the n-th graph replay (from 1) takes factor times as long."""

    def __init__(self, fail=None, misroute: bool = False, invalidate_capture: bool = False, slow_replays=None):
        self.clock_ms = 0.0
        self.fail = dict(fail or {})
        self.misroute = misroute
        self.invalidate_capture = invalidate_capture
        self.slow_replays = dict(slow_replays or {})
        self.captured: list[int] = []  # the launches each graph captured, in order
        self.stream_flags: dict[int, int] = {}
        self.calls = Counter()
        self.live: dict[int, str] = {}  # handle -> what it is
        self.capturing: dict[int, list] = {}  # stream -> the launches (ms) captured on it
        self.graphs: dict[int, list] = {}  # graph or executable graph -> its launches (ms)
        self.events: dict[int, float] = {}
        self.contexts: list[int] = []  # the context stack
        self.retained = 0
        self.captures = self.replays = 0
        self._next = 0x1000

    def __getattribute__(self, name):
        if name.startswith("cu") and name not in ("cuGetErrorName", "cuGetErrorString"):
            object.__getattribute__(self, "calls")[name] += 1
            code = object.__getattribute__(self, "fail").get(name)
            if code is not None:
                return lambda *args: code
        return object.__getattribute__(self, name)

    # ---- what a test's "kernel" calls ----
    def launch(self, ms: float) -> None:
        """A kernel of ``ms`` milliseconds is launched (on the stream the timer captures)."""
        if self.capturing and not self.misroute:
            next(iter(self.capturing.values())).append(ms)
        else:
            self.clock_ms += ms

    def alive(self) -> list[str]:
        return sorted(self.live.values())

    # ---- helpers ----
    def _new(self, kind: str) -> int:
        self._next += 16
        self.live[self._next] = kind
        return self._next

    def _free(self, handle, kind: str) -> int:
        if self.live.get(handle.value) != kind:
            return 400
        del self.live[handle.value]
        return 0

    @staticmethod
    def _set(out, value) -> None:
        out._obj.value = value  # what ctypes.byref(x) points at

    # ---- libcuda's functions ----
    def cuInit(self, flags):  # noqa: N802 (CUDA's names)
        return 0

    def cuGetErrorName(self, code, out):  # noqa: N802
        self._set(out, NAMES.get(code, ("", ""))[0].encode() or None)
        return 0 if code in NAMES else 1

    def cuGetErrorString(self, code, out):  # noqa: N802
        self._set(out, NAMES.get(code, ("", ""))[1].encode() or None)
        return 0 if code in NAMES else 1

    def cuDeviceGet(self, out, ordinal):  # noqa: N802
        self._set(out, ordinal)
        return 0

    def cuDevicePrimaryCtxRetain(self, out, device):  # noqa: N802
        self.retained += 1
        self._set(out, 0xC0 + device)
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, device):  # noqa: N802
        self.retained -= 1
        return 0

    def cuCtxPushCurrent_v2(self, context):  # noqa: N802
        self.contexts.append(context.value)
        return 0

    def cuCtxPopCurrent_v2(self, out):  # noqa: N802
        self._set(out, self.contexts.pop())
        return 0

    def cuCtxSynchronize(self):  # noqa: N802
        return 0

    def cuStreamCreate(self, out, flags):  # noqa: N802
        stream = self._new("stream")
        self.stream_flags[stream] = flags
        self._set(out, stream)
        return 0

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return 0 if self.live.get(stream.value) == "stream" else 400

    def cuStreamDestroy_v2(self, stream):  # noqa: N802
        return self._free(stream, "stream")

    def cuEventCreate(self, out, flags):  # noqa: N802
        self._set(out, self._new("event"))
        return 0

    def cuEventDestroy_v2(self, event):  # noqa: N802
        return self._free(event, "event")

    def cuEventRecord(self, event, stream):  # noqa: N802
        self.events[event.value] = self.clock_ms
        return 0

    def cuEventSynchronize(self, event):  # noqa: N802
        return 0

    def cuEventElapsedTime(self, out, start, end):  # noqa: N802
        self._set(out, self.events[end.value] - self.events[start.value])
        return 0

    def cuStreamBeginCapture_v2(self, stream, mode):  # noqa: N802
        assert mode == 2  # relaxed: see timer._RELAXED
        self.capturing[stream.value] = []
        return 0

    def cuStreamEndCapture(self, stream, out):  # noqa: N802
        launches = self.capturing.pop(stream.value)
        if self.invalidate_capture:
            self._set(out, None)
            return 901
        self.captures += 1
        self.captured.append(len(launches))
        graph = self._new("graph")
        self.graphs[graph] = launches
        self._set(out, graph)
        return 0

    def cuGraphGetNodes(self, graph, nodes, count):  # noqa: N802
        assert nodes is None
        count._obj.value = len(self.graphs[graph.value])
        return 0

    def cuGraphInstantiateWithFlags(self, out, graph, flags):  # noqa: N802
        executable = self._new("executable graph")
        self.graphs[executable] = list(self.graphs[graph.value])
        self._set(out, executable)
        return 0

    def cuGraphDestroy(self, graph):  # noqa: N802
        return self._free(graph, "graph")

    def cuGraphExecDestroy(self, executable):  # noqa: N802
        return self._free(executable, "executable graph")

    def cuGraphLaunch(self, executable, stream):  # noqa: N802
        self.replays += 1
        self.clock_ms += sum(self.graphs[executable.value]) * self.slow_replays.get(self.replays, 1.0)
        return 0


def gpu(name: str, cc: tuple[int, int], sm_count: int, smem_optin: int, smem_per_sm: int, registers: int = 65536,
        threads: int = 1024) -> dict:
    """A simulated GPU for ``FakeGpus``: its name and its attributes by CUdevice_attribute number."""
    return {"name": name, driver.COMPUTE_CAPABILITY_MAJOR: cc[0], driver.COMPUTE_CAPABILITY_MINOR: cc[1],
            driver.MULTIPROCESSOR_COUNT: sm_count, driver.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: smem_optin,
            driver.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: smem_per_sm, driver.MAX_REGISTERS_PER_BLOCK: registers,
            driver.MAX_THREADS_PER_BLOCK: threads}


H100_SXM = gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 227 * 1024, 228 * 1024)
H100_PCIE = gpu("NVIDIA H100 PCIe", (9, 0), 114, 227 * 1024, 228 * 1024)
A100 = gpu("NVIDIA A100-SXM4-80GB", (8, 0), 108, 163 * 1024, 164 * 1024)


class FakeGpus:
    """``libcuda.so.1``'s device queries, as ``backends.cuda.driver`` calls them through ctypes,
    on simulated GPUs (``gpu(...)``, in ordinal order).  ``init``: the CUresult cuInit returns
    (100, CUDA_ERROR_NO_DEVICE: a driver that finds no GPU; 803: a broken one).  A device's
    handle is not its ordinal, so a query given the ordinal fails as CUDA would."""

    HANDLE = 0x100

    def __init__(self, *gpus: dict, init: int = 0):
        self.gpus, self.init = list(gpus), init

    def _gpu(self, device) -> dict | None:
        index = device - self.HANDLE
        return self.gpus[index] if 0 <= index < len(self.gpus) else None

    cuGetErrorName = FakeLibcuda.cuGetErrorName  # noqa: N815 (CUDA's names)
    cuGetErrorString = FakeLibcuda.cuGetErrorString  # noqa: N815
    _set = staticmethod(FakeLibcuda._set)

    def cuInit(self, flags):  # noqa: N802
        return self.init

    def cuDeviceGetCount(self, out):  # noqa: N802
        self._set(out, len(self.gpus))
        return 0

    def cuDeviceGet(self, out, ordinal):  # noqa: N802
        if not 0 <= ordinal < len(self.gpus):
            return 101
        self._set(out, self.HANDLE + ordinal)
        return 0

    def cuDeviceGetName(self, buffer, length, device):  # noqa: N802
        if self._gpu(device) is None:
            return 101
        buffer.value = self._gpu(device)["name"].encode()[:length - 1]
        return 0

    def cuDeviceGetAttribute(self, out, attribute, device):  # noqa: N802
        if self._gpu(device) is None:
            return 101
        if attribute not in self._gpu(device):
            return 1
        self._set(out, self._gpu(device)[attribute])
        return 0


class HostClock:
    """The timer's driver interface (``timer.CudaDriver``'s methods) on the host: a "graph"
    is the captured ``launches`` callable, run again at each replay; events read
    ``time.perf_counter``.  Times real host work (CPU kernels)."""

    def __init__(self):
        self.events = {}
        self._next = 0

    def _new(self) -> int:
        self._next += 1
        return self._next

    def enter(self, index):
        return index

    def exit(self, token):
        pass

    def synchronize(self):
        pass

    def create_stream(self):
        return self._new()

    def synchronize_stream(self, stream):
        pass

    def destroy_stream(self, stream):
        pass

    def create_event(self):
        return self._new()

    def destroy_event(self, event):
        pass

    def record(self, event, stream):
        self.events[event] = time.perf_counter()

    def elapsed_ms(self, start, end):
        return (self.events[end] - self.events[start]) * 1e3

    def capture(self, stream, launches):
        return launches  # captured, not run: a replay runs them

    def graph_launches(self, graph):
        return 1

    def replay(self, graph, stream):
        graph()

    def destroy_graph(self, graph):
        pass


class FakeTensor:
    def __init__(self, array):
        self.array = np.asarray(array)

    def cuda(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


def fake_torch(lib: FakeLibcuda) -> types.ModuleType:
    """A module to put in ``sys.modules["torch"]``: the torch.cuda calls the baseline's code
    makes; its "streams" are the handles the timer passes (``streams`` lists them)."""
    module = types.ModuleType("torch")
    streams = []

    def stream(s):
        streams.append(s.cuda_stream)
        return contextlib.nullcontext()

    module.cuda = types.SimpleNamespace(
        is_available=lambda: True, synchronize=lambda: None, current_device=lambda: 0,
        ExternalStream=lambda handle: types.SimpleNamespace(cuda_stream=handle), stream=stream, streams=streams)
    module.float16, module.float32 = np.float16, np.float32
    module.from_numpy = FakeTensor
    module.full = lambda shape, value, dtype, device: FakeTensor(np.full(shape, value, dtype))
    return module


def install(monkeypatch, **options) -> FakeLibcuda:
    """A ``FakeLibcuda`` (``options``: its own) under the timer for the rest of the test: the
    real ``CudaDriver`` calls it."""
    from tc_autotune.backends.cuda import timer

    lib = FakeLibcuda(**options)
    cuda = timer.CudaDriver(lib)
    monkeypatch.setattr(timer, "driver", lambda: cuda)
    return lib
