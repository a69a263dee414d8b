"""The package's one timer: seconds per launch, from CUDA events around replays of a CUDA graph
of back-to-back launches.

Everything that times goes through ``time_launches``: the tuner's runners (``time_function``
in the runner process; on an RPC server through the global function ``TIME_FUNCTION``),
``Kernel.time`` (``measurer.time_kernel``, the benchmark, nightly's re-times) and the cuDNN and
cuBLAS baselines through PyTorch (``measure.baseline``).  So both sides of every ratio are
timed alike, and every figure made today is a ``core.results.CUDA_TIMER`` figure (the
name lives there, with the other timers' names, so that this backend imports nothing above it).

What it does, given ``launch()`` (one launch of the kernel, or of the baseline's ops):

1. synchronizes the device and makes a stream of its own (a graph cannot be captured on the
   legacy default stream); ``on_stream(stream)`` sends the caller's launches there;
2. runs ``warmup`` launches (clocks, caches, cuDNN's algorithm search);
3. captures ``number`` launches into a graph and replays it once between two events; while a
   replay lasts less than ``min_repeat_ms`` (1% short counts as full: a GPU's jitter must not
   cost a capture), ``number`` is raised to what that replay says fills it (at least x1.618, as
   TVM's time_evaluator raises it; at most ``MAX_NUMBER``) and the graph captured again;
4. times ``repeat + 1`` replays, each between two events, and drops the first: it runs slow
   (clocks, caches), by up to 30% on 5-10 us kernels (H200 nightly, 2026-11-22);
5. returns each kept replay's time divided by ``number``.

Why a graph: replayed launches cost the GPU what the kernel costs, whoever launched them.
TVM's time_evaluator launches eagerly and adds 1.1-2.6 us of host launch cost a call on an
H100, 10-35% of a 3-10 us kernel (docs/BENCHMARKS.md, 'Timing method'), which a baseline timed
from a graph does not pay.

Why the CUDA driver through ctypes: the tuner's runner processes import TVM only (no PyTorch
on the GPU machines' runners), TVM 0.27 has no graph timer, and an RPC server runs whatever
Python registered ``TIME_FUNCTION`` (``measure.rpc_server``).  ``libcuda.so.1`` is in every
process that runs CUDA; TVM and PyTorch both launch into the device's primary context (which
the timer makes current) and on a stream the caller names (``tvm_ffi.use_raw_stream``,
``torch.cuda.ExternalStream``), so the same calls time either.  ``ctypes`` is stdlib: this
module imports neither TVM nor PyTorch at its top, and ``driver`` can be replaced by a
stand-in (the tests' simulated clock).

Errors: whatever stops a timing (a CUDA call's error, a launch that raises, launches that went
to another stream) is one ``TimerError`` naming the step and CUDA's error; what the timer made
is freed first.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import math

from . import driver as cuda_driver

TIME_FUNCTION = "tc_autotune.time_function"  # the global function ``register`` installs
MAX_NUMBER = 4096  # launches in one graph: capture costs host time per launch (tiny kernels)
GROWTH = 1.618  # at least this much more launches per capture (TVM's time_evaluator's factor)
FULL = 0.99  # a replay this much of min_repeat_ms long fills it

_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING: no implicit waits on the legacy default stream
# CU_STREAM_CAPTURE_MODE_RELAXED: an allocation under capture (PyTorch's caching allocator,
# TVM's workspace pool, if they ever miss their caches) does not invalidate the capture
_RELAXED = 2


class TimerError(RuntimeError):
    """The timer could not time: one line, naming the step and the cause."""


def time_launches(launch, *, on_stream, device: int = 0, warmup: int = 10, number: int = 20,
                  repeat: int = 30, min_repeat_ms: float = 0.0) -> list[float]:
    """Seconds per ``launch()``, one figure per kept repeat (``repeat`` of them), measured as
    the module says.  ``on_stream(stream)`` is a context in which ``launch()`` launches on the
    CUDA stream ``stream`` (an int handle; ``tvm_stream``, ``measure.baseline``'s for PyTorch);
    ``device`` is the CUDA device's index.  Raises ``TimerError``; ValueError for bad options."""
    _check_options(warmup, number, repeat, min_repeat_ms)
    cuda = driver()
    with _on_device(cuda, device) as (stream, events), _step("timing"):
        with on_stream(stream):
            with _step("a warm-up launch"):
                for _ in range(warmup):
                    launch()
            graph, number = _fit(cuda, stream, events, launch, number, min_repeat_ms)
            try:
                times = [_replay_ms(cuda, stream, events, graph) for _ in range(repeat + 1)][1:]
            finally:
                _free(cuda.destroy_graph, graph)
    return [ms / 1e3 / number for ms in times]


def time_function(func, dev, args, **options) -> list[float]:
    """``time_launches`` of a TVM function ``func(*args)`` on the CUDA device ``dev``: what the
    runners and ``Kernel.time`` time.  ``options``: ``time_launches``' own."""
    return time_launches(lambda: func(*args), on_stream=tvm_stream(dev), device=dev.index, **options)


def tvm_stream(dev):
    """``on_stream`` for TVM: the functions TVM runs on ``dev`` launch on the given stream."""
    import tvm_ffi

    return lambda stream: tvm_ffi.use_raw_stream(dev, stream)


def _check_options(warmup, number, repeat, min_repeat_ms) -> None:
    for name, value, least in (("warmup", warmup, 0), ("number", number, 1), ("repeat", repeat, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"timer: {name} must be an integer >= {least}, got {value!r}")
    if not isinstance(min_repeat_ms, (int, float)) or isinstance(min_repeat_ms, bool) \
            or not math.isfinite(min_repeat_ms) or min_repeat_ms < 0:
        raise ValueError(f"timer: min_repeat_ms must be a finite number >= 0, got {min_repeat_ms!r}")


@contextlib.contextmanager
def _step(what: str):
    """Any error but a TimerError becomes one, saying during what it happened."""
    try:
        yield
    except TimerError:
        raise
    except Exception as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raise TimerError(f"{what} failed: {type(err).__name__}: {lines[-1] if lines else ''}".rstrip(": ")) from err


@contextlib.contextmanager
def _on_device(cuda, device: int):
    """(stream, (start event, end event)) on device ``device``, whose work so far is finished;
    all freed again on the way out (after an error too, without hiding it)."""
    token = cuda.enter(device)
    made = []
    try:
        cuda.synchronize()  # the inputs, the checked run: whatever any stream has queued
        stream = cuda.create_stream()
        made.append((cuda.destroy_stream, stream))
        events = (cuda.create_event(), cuda.create_event())
        made += [(cuda.destroy_event, e) for e in events]
        yield stream, events
        cuda.synchronize_stream(stream)
    finally:
        for free, handle in reversed(made):
            _free(free, handle)
        _free(cuda.exit, token)


def _free(free, handle) -> None:
    """Free what the timer made; an error here (a sticky CUDA error after a faulting kernel)
    must not hide the one that stopped the timing."""
    with contextlib.suppress(TimerError):
        free(handle)


def _fit(cuda, stream, events, launch, number: int, min_repeat_ms: float):
    """(graph, its launches): a graph of ``number`` launches, more while one replay of it lasts
    less than ``min_repeat_ms``."""
    while True:
        graph = _capture(cuda, stream, launch, number)
        try:
            ms = _replay_ms(cuda, stream, events, graph)
        except BaseException:
            _free(cuda.destroy_graph, graph)
            raise
        if min_repeat_ms <= 0 or ms >= FULL * min_repeat_ms or number >= MAX_NUMBER:
            return graph, number
        _free(cuda.destroy_graph, graph)
        wanted = math.ceil(number * min_repeat_ms / ms) if ms > 0 else MAX_NUMBER
        number = min(MAX_NUMBER, max(wanted, math.ceil(number * GROWTH)))


def _capture(cuda, stream, launch, number: int):
    """A graph of ``number`` launches captured on ``stream``; TimerError when the launches did
    not go there (the graph is empty: they ran eagerly elsewhere and would time nothing)."""
    def launches():
        with _step("a launch under capture"):
            for _ in range(number):
                launch()

    graph = cuda.capture(stream, launches)
    if cuda.graph_launches(graph) == 0:
        _free(cuda.destroy_graph, graph)
        raise TimerError("the captured graph is empty: the launches did not go to the timer's stream "
                         "(launch on the stream on_stream sets)")
    return graph


def _replay_ms(cuda, stream, events, graph) -> float:
    start, end = events
    cuda.record(start, stream)
    cuda.replay(graph, stream)
    cuda.record(end, stream)
    return cuda.elapsed_ms(start, end)


# ---- the CUDA driver ---------------------------------------------------------------------------
class CudaDriver:
    """The driver calls the timer makes, on ``lib`` (``libcuda.so.1`` through ctypes; the tests
    give a stand-in with the same functions).  Each failing call raises ``TimerError`` with
    CUDA's error name and text.  Handles are ints (a stream's is what TVM and PyTorch take)."""

    def __init__(self, lib):
        self._lib = lib
        self._call("cuInit", 0)

    def _call(self, name: str, *args) -> None:
        code = getattr(self._lib, name)(*args)
        if code != 0:
            raise TimerError(f"{name} failed: {cuda_driver.describe(self._lib, code)}")

    def _out(self, name: str, *args, kind=ctypes.c_void_p):
        """The value a call writes through its first argument (a handle, unless ``kind``)."""
        value = kind()
        self._call(name, ctypes.byref(value), *args)
        return value.value

    # the device's primary context (TVM's and PyTorch's) made current for the timing
    def enter(self, index: int) -> int:
        device = self._out("cuDeviceGet", index, kind=ctypes.c_int)
        context = self._out("cuDevicePrimaryCtxRetain", device)
        try:
            self._call("cuCtxPushCurrent_v2", _h(context))
        except TimerError:
            self._call("cuDevicePrimaryCtxRelease_v2", device)
            raise
        return device

    def exit(self, device: int) -> None:
        try:
            self._out("cuCtxPopCurrent_v2")
        finally:
            self._call("cuDevicePrimaryCtxRelease_v2", device)

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    def create_stream(self) -> int:
        return self._out("cuStreamCreate", _NON_BLOCKING)

    def synchronize_stream(self, stream: int) -> None:
        self._call("cuStreamSynchronize", _h(stream))

    def destroy_stream(self, stream: int) -> None:
        self._call("cuStreamDestroy_v2", _h(stream))

    def create_event(self) -> int:
        return self._out("cuEventCreate", 0)

    def destroy_event(self, event: int) -> None:
        self._call("cuEventDestroy_v2", _h(event))

    def record(self, event: int, stream: int) -> None:
        self._call("cuEventRecord", _h(event), _h(stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        self._call("cuEventSynchronize", _h(end))
        return self._out("cuEventElapsedTime", _h(start), _h(end), kind=ctypes.c_float)

    def capture(self, stream: int, launches) -> "_Graph":
        """The launches ``launches()`` makes on ``stream``, as an executable graph."""
        self._call("cuStreamBeginCapture_v2", _h(stream), _RELAXED)
        try:
            launches()
        except BaseException:  # end the capture, so the stream is usable (and freed) after
            with contextlib.suppress(TimerError):
                self._call("cuGraphDestroy", self._end_capture(stream))
            raise
        graph = self._end_capture(stream)
        try:
            nodes = ctypes.c_size_t()
            self._call("cuGraphGetNodes", graph, None, ctypes.byref(nodes))
            executable = self._out("cuGraphInstantiateWithFlags", graph, ctypes.c_ulonglong(0))
        finally:
            self._call("cuGraphDestroy", graph)
        return _Graph(executable, nodes.value)

    def _end_capture(self, stream: int) -> ctypes.c_void_p:
        graph = ctypes.c_void_p()
        self._call("cuStreamEndCapture", _h(stream), ctypes.byref(graph))  # its output comes second
        return graph

    @staticmethod
    def graph_launches(graph: "_Graph") -> int:
        return graph.nodes

    def replay(self, graph: "_Graph", stream: int) -> None:
        self._call("cuGraphLaunch", _h(graph.executable), _h(stream))

    def destroy_graph(self, graph: "_Graph") -> None:
        self._call("cuGraphExecDestroy", _h(graph.executable))


def _h(handle: int | None) -> ctypes.c_void_p:
    """A handle as a C pointer argument (a bare int would be passed as a 32-bit C int)."""
    return ctypes.c_void_p(handle)


class _Graph:
    """An instantiated graph and how many nodes (launches) it holds."""

    def __init__(self, executable: int, nodes: int):
        self.executable, self.nodes = executable, nodes


@functools.cache
def _cuda_driver() -> CudaDriver:
    try:
        lib = cuda_driver.libcuda()
    except cuda_driver.NoDriverError as err:
        raise TimerError(str(err)) from None
    return CudaDriver(lib)


def driver():
    """The driver ``time_launches`` times with: the CUDA driver, loaded once per process
    (replaced by the tests, and by the RPC tests' server, with a simulated one)."""
    return _cuda_driver()


# ---- on an RPC server ------------------------------------------------------------------------
def register() -> None:
    """Install ``TIME_FUNCTION`` in this process's TVM: ``(module, function name, device,
    warmup, number, repeat, min_repeat_ms, *args) -> JSON list of seconds``, ``time_function``
    of ``module[name](*args)`` where the module and tensors are (an RPC server's process:
    ``measure.rpc_server``; ``rpc_runner`` calls it through its session)."""
    import tvm_ffi

    tvm_ffi.register_global_func(TIME_FUNCTION, _time_function, override=True)


def _time_function(module, name, dev, warmup, number, repeat, min_repeat_ms, *args) -> str:
    options = dict(warmup=int(warmup), number=int(number), repeat=int(repeat), min_repeat_ms=float(min_repeat_ms))
    return json.dumps(time_function(module[name], dev, args, **options))


def time_remote(function, module, name: str, dev, args, *, warmup: int = 10, number: int = 20, repeat: int = 30,
                min_repeat_ms: float = 0.0) -> list[float]:
    """``time_function`` of ``module[name](*args)`` where they are, through ``function`` (an RPC
    session's ``TIME_FUNCTION``): the figures an RPC runner records."""
    _check_options(warmup, number, repeat, min_repeat_ms)
    return [float(s) for s in json.loads(function(module, name, dev, warmup, number, repeat, float(min_repeat_ms),
                                                  *args))]


__all__ = ["TIME_FUNCTION", "MAX_NUMBER", "TimerError", "time_launches", "time_function", "tvm_stream",
           "CudaDriver", "driver", "register", "time_remote"]
