"""Built kernels on disk, and many kernels built at once: what makes a model's first forward cheap.

Building one kernel costs a config choice (a record lookup, or a zero-shot pick: ~0.3 s), TVM's
lowering (~0.1-1 s) and nvcc (~1-3 s).  A model needs dozens, so:

* ``kernel(workload)`` looks in two caches under ``<cache>/kernels/`` before doing any of it:
  - the *choice* of ``workload`` on this GPU: keyed by the workload, the GPU, the state (path,
    size, mtime) of every log the choice reads (the active logs, the shipped logs and histories
    that train the zero-shot model) and the package's code;
  - the *module* of (workload, config, arch): TVM's exported library (host code + cubin), keyed
    by everything the generated code is a function of -- the workload, the config, the build
    arch, the package's source (the template and generator), TVM's and nvcc's versions.  A hit is
    one ``load_module`` (milliseconds), no lowering and no nvcc.
  Editing any file of the package, or a log, moves the keys: a stale kernel is never loaded.
* ``kernels(workloads)`` builds the misses in parallel worker processes (one per core, forked
  from a server that imported TVM once), each choosing, lowering, compiling and exporting into
  the cache; the caller loads them.

The cache is a plain folder (``TC_AUTOTUNE_CACHE_DIR``, else ``~/.cache/tc-autotune``): entries
are written atomically (the ``.json`` last, as the commit marker), so concurrent processes can
share it and deleting it is always safe.

``pdl``: the kernel launched with Programmatic Dependent Launch (``api.kernel``; sm_90+, ignored
elsewhere), a module of its own in the cache.  Off by default here; what models run asks for it
(``model_pdl``: on unless ``TC_AUTOTUNE_PDL=0``).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import hashlib
import json
import logging
import multiprocessing as mp
import os
import sys
import time
import types
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import tvm

from ..database import journal
from ..database import paths as log_paths
from ..database.record import tvm_version
from . import apply, build_server
from ..core import tasks
from ..search import zero_shot
from ..backends.cuda.toolkit import nvcc_version
from ..backends.cuda.gpu import GpuInfo, default_gpu
from .kernel import Kernel, build_arch, compile_kernel, uses_pdl, verify_record
from ..workloads.names import get as get_workload

log = logging.getLogger(__name__)

FORMAT = 1  # bump when an entry's layout changes
PDL_ENV = "TC_AUTOTUNE_PDL"  # "0": models' kernels are built without PDL (``model_pdl``)


def cache_dir() -> Path:
    root = os.environ.get("TC_AUTOTUNE_CACHE_DIR") or Path.home() / ".cache" / "tc-autotune"
    return Path(root) / "kernels"


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """sha256 of the package's Python source: the generated code is a function of it (and of
    the workload and config), so a kernel built by other code is never reused."""
    root = Path(__file__).resolve().parents[1]  # the whole package, tc_autotune/
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _toolchain() -> tuple[str, str | None]:
    return tvm_version(), nvcc_version()


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _file_states(paths) -> list:
    """(path, size, mtime) of every log file named by ``paths``: what a choice read."""
    return [[str(file), stat.st_size, stat.st_mtime_ns] for file, stat in log_paths.stat_log_files(paths)]


def choice_key(workload, gpu: GpuInfo, logs: tuple) -> str:
    """The key of the config ``apply.choose_config`` gives ``workload`` on ``gpu`` with the
    active log sets ``logs`` (and the shipped logs and their stored zero-shot model)."""
    model = zero_shot.model_path()
    return _digest("choice", FORMAT, tasks.of(workload).name, str(workload), asdict(gpu),
                   [[path, stale, _file_states(path)] for path, stale in logs],
                   _file_states([*log_paths.shipped_log_files(), *([model] if model else [])]), code_fingerprint())


def model_pdl() -> bool:
    """Whether the kernels a PyTorch model runs are built with PDL (``pytorch``, the torch path
    of ``tc.conv2d`` / ``tc.dense``): yes unless the environment sets ``TC_AUTOTUNE_PDL=0``.
    Read when a layer's kernel is bound or built, never per call.

    On by default: on an H100 (2026-11-25) it took 3-4% off ResNet-50's batch-1 forward replayed
    from a CUDA graph and under ``reduce-overhead``, and a PDL launch costs the host no more than a
    plain one (same process, GPU idle or busy: 6.7-9.6 us against 7.9-10.6 us)."""
    return os.environ.get(PDL_ENV, "1").strip() != "0"


def module_key(workload, config, arch: str, pdl: bool = False) -> str:
    """The key of the module the template makes of (workload, config) for ``arch``, launched with
    PDL or not (two modules: never one for the other)."""
    return _digest("module", FORMAT, tasks.of(workload).name, str(workload), asdict(config), arch,
                   {"pdl": bool(pdl)}, code_fingerprint(), *_toolchain())


# ---- the two caches ------------------------------------------------------------------------
def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        log.warning("build cache: ignoring the unreadable entry %s: %s", path.name, err)
        return None


def cached_choice(key: str, workload) -> apply.ConfigChoice | None:
    meta = _read_json(cache_dir() / "choices" / f"{key}.json")
    if meta is None or meta.get("format") != FORMAT:
        return None
    try:
        config = tasks.of(workload).template.config_type(**meta["config"])
        return apply.ConfigChoice(config, meta["source"], meta.get("seconds"),
                                  meta.get("log"))
    except (KeyError, TypeError) as err:
        log.warning("build cache: ignoring the malformed choice %s: %s", key[:12], err)
        return None


def store_choice(key: str, choice: apply.ConfigChoice) -> None:
    meta = {"format": FORMAT, "config": asdict(choice.config), "source": choice.source,
            "seconds": choice.seconds, "log": choice.log}
    _write(cache_dir() / "choices" / f"{key}.json", json.dumps(meta).encode())


def _write(path: Path, data: bytes) -> None:
    try:
        journal.replace_atomic(path, data)
    except OSError as err:  # a read-only cache costs the next process a build, nothing more
        log.warning("build cache: cannot write %s: %s", path, err)


def store_module(key: str, kernel) -> None:
    """Export ``kernel`` (a freshly compiled one) under ``key``: library, CUDA source, cubin,
    then the metadata that commits the entry."""
    folder = cache_dir() / "modules"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f"{key}.{os.getpid()}.part.so"
        kernel.executable.export_library(str(part))
        os.replace(part, folder / f"{key}.so")
    except Exception as err:  # noqa: BLE001 (export needs a host compiler; the kernel still runs)
        log.warning("build cache: cannot export the kernel of %s: %s", kernel.workload, err)
        return
    _write(folder / f"{key}.cu", kernel.cuda_source.encode())
    _write(folder / f"{key}.cubin", kernel.cubin)
    meta = {"format": FORMAT, "workload": str(kernel.workload), "config": asdict(kernel.config),
            "arch": kernel.arch, "pdl": kernel.pdl, "built": time.time()}
    _write(folder / f"{key}.json", json.dumps(meta).encode())


def _load_module(path: str):
    return tvm.runtime.load_module(path)


def cached_module(key: str, workload, config, arch: str, pdl: bool = False):
    """The kernel of a committed entry, or None (a miss, or a library this process cannot load)."""
    folder = cache_dir() / "modules"
    meta = _read_json(folder / f"{key}.json")
    if meta is None or meta.get("format") != FORMAT:
        return None
    try:
        module = _load_module(str(folder / f"{key}.so"))
        cubin = (folder / f"{key}.cubin").read_bytes()
    except Exception as err:  # noqa: BLE001 (no CUDA loader here, a removed file: build instead)
        log.debug("build cache: cannot load %s: %s", key[:12], err)
        return None
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    return Kernel(workload, config, target, module, cubin, source_path=str(folder / f"{key}.cu"), pdl=pdl)


# ---- one kernel, many kernels --------------------------------------------------------------
def choose(workload, gpu: GpuInfo, logs: tuple) -> apply.ConfigChoice:
    """``apply.choose_config`` with the log sets ``logs``, through the choice cache; an unverified
    record is checked against the code its config generates (``api.kernel.verify_record``) before
    it is chosen, once per state of the package and the logs (the choice's key)."""
    key = choice_key(workload, gpu, logs)
    choice = cached_choice(key, workload)
    if choice is None:
        choice = apply.choose_config(workload, gpu, warn=False, logs=logs, verify=verify_record)
        store_choice(key, choice)
    return choice


def _lookup(workload, gpu: GpuInfo, logs: tuple, choice: apply.ConfigChoice | None, pdl: bool = False):
    """(module key, cached kernel or None) of ``workload``'s chosen config (``pdl``: as
    ``uses_pdl`` decided it)."""
    arch = build_arch(workload, choice.config, gpu)
    key = module_key(workload, choice.config, arch, pdl)
    return key, cached_module(key, workload, choice.config, arch, pdl)


def kernel(workload, gpu: GpuInfo | None = None, logs: tuple | None = None, warn: bool = True,
           pdl: bool = False):
    """The kernel ``build`` would make for ``workload`` with no config given (the best record
    of ``logs``, default the active logs; else zero-shot; else the default config), loaded from
    the disk cache when it holds it, else built now and stored.  An untuned workload warns
    (``NoTunedConfigWarning``), cached or not.  ``pdl``: launched with Programmatic Dependent
    Launch where the GPU has it (the same config: records are timed plain, ``api.kernel``)."""
    workload = get_workload(workload)
    gpu = gpu or default_gpu()
    pdl = uses_pdl(pdl, gpu)  # sm_80's "PDL" build is the plain one: one module, one key
    logs = apply.active_logs() if logs is None else logs
    choice = choose(workload, gpu, logs)
    if warn and choice.source != "record":
        warnings.warn(f"no tuning record for workload {workload} on {gpu.arch}: using the {choice.source} "
                      "config (tune it for the best kernel)", apply.NoTunedConfigWarning, stacklevel=2)
    key, found = _lookup(workload, gpu, logs, choice, pdl)
    if found is not None:
        return found
    start = time.time()
    built = compile_kernel(workload, choice.config, gpu, pdl=pdl)
    PHASES["lower+nvcc"] = PHASES.get("lower+nvcc", 0.0) + time.time() - start
    start = time.time()
    store_module(key, built)
    PHASES["export"] = PHASES.get("export", 0.0) + time.time() - start
    return built


PHASES: dict[str, float] = {}  # seconds this process spent in each phase of building (for reports)


def cached_kernel(workload, gpu: GpuInfo, logs: tuple, pdl: bool = False):
    """The kernel of ``workload`` if both caches hold it, else None (nothing is built)."""
    choice = cached_choice(choice_key(workload, gpu, logs), workload)
    return None if choice is None else _lookup(workload, gpu, logs, choice, uses_pdl(pdl, gpu))[1]


def _build_in_worker(spec: str, gpu: GpuInfo, logs: tuple, submitted: float = 0.0,
                     pdl: bool = False) -> dict[str, float]:
    """A worker process: choose, lower, compile and export one workload into the cache; returns
    the seconds of each phase (``waited``: from submission to the start, spawn and imports
    included for a worker's first workload)."""
    PHASES.clear()
    start = time.time()
    workload = get_workload(spec)
    choose(workload, gpu, logs)
    PHASES["choose"] = time.time() - start
    kernel(workload, gpu, logs, warn=False, pdl=pdl)
    return {"waited": start - submitted if submitted else 0.0, **PHASES}


def kernels(workloads, gpu: GpuInfo | None = None, workers: int | None = None, logs: tuple | None = None,
            pdl: bool = False) -> dict:
    """``{workload: kernel}`` for every workload (duplicates built once): cache hits are loaded
    here; the misses are built by ``workers`` spawned processes (default: one per core) in
    parallel, then loaded.  A workload that cannot be built is left out of the result, with a
    warning naming it and why.  No ``NoTunedConfigWarning``s: ``untuned`` tells the caller.
    ``logs``: the active log sets (default: now's); ``pdl``: as ``kernel`` takes it."""
    gpu = gpu or default_gpu()
    logs = apply.active_logs() if logs is None else logs
    wanted = list(dict.fromkeys(get_workload(w) for w in workloads))
    found = {w: k for w in wanted if (k := cached_kernel(w, gpu, logs, pdl)) is not None}
    missing = [w for w in wanted if w not in found]
    if missing:
        start = time.time()
        workers = max(1, min(len(missing), workers or os.cpu_count() or 1))
        log.info("building %d kernels in %d processes", len(missing), workers)
        phases: dict[str, list[float]] = {}
        for workload, error, seconds in _build_all(missing, gpu, logs, workers, pdl):
            for phase, value in seconds.items():
                phases.setdefault(phase, []).append(value)
            if error is not None:
                warnings.warn(f"cannot build the kernel of {workload}: {error}", RuntimeWarning, stacklevel=2)
                continue
            try:
                found[workload] = kernel(workload, gpu, logs, warn=False, pdl=pdl)
            except Exception as err:  # noqa: BLE001 (built in a worker, but not loadable here)
                warnings.warn(f"cannot build the kernel of {workload}: {err}", RuntimeWarning, stacklevel=2)
        log.info("built %d kernels in %.1f s (%s)", len(missing), time.time() - start,
                 ", ".join(f"{phase} max {max(v):.1f} s / mean {sum(v) / len(v):.1f} s" for phase, v in phases.items()))
    return {w: found[w] for w in wanted if w in found}


def _build_all(workloads, gpu: GpuInfo, logs: tuple, workers: int, pdl: bool = False):
    """(workload, None or the error, seconds per phase) of building each into the cache,
    ``workers`` at a time."""
    if workers == 1:
        for workload in workloads:
            yield (workload, *_outcome(lambda: _build_in_worker(str(workload), gpu, logs, pdl=pdl)))
        return
    with cf.ProcessPoolExecutor(workers, mp_context=_worker_context()) as pool, _main_not_rerun():
        futures = [pool.submit(_build_in_worker, str(w), gpu, logs, time.time(), pdl) for w in workloads]
        for workload, future in zip(workloads, futures):
            yield (workload, *_outcome(future.result))


def _worker_context():
    """Workers forked from a server that imported this module (TVM with it) and the templates' TVM
    sides (``tasks.lowering_modules``) once: importing them in each of 16 freshly spawned processes
    at once took ~9 s of a cold build.  The server never touches CUDA, so its forks are safe;
    "spawn" where forkserver is missing."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload([build_server.__name__, __name__, *tasks.lowering_modules()])
    return context


@contextlib.contextmanager
def _main_not_rerun():
    """While the workers start, ``__main__`` is an empty module (multiprocessing would otherwise
    run the caller's script again in each of them (and in the fork server), and a user's script
    that calls ``tc.optimize`` at its top level, with no ``if __name__ == "__main__"`` guard,
    would run the whole program again there; the workers need nothing from it), and a fork
    server started now leaves torch out (``build_server``)."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    os.environ[build_server.SERVER] = "1"  # a fork server started now imports no torch
    try:
        yield
    finally:
        sys.modules["__main__"] = main
        os.environ.pop(build_server.SERVER, None)


def _outcome(func) -> tuple[str | None, dict]:
    """(None, phases) of ``func()``, or (its error, {}) when it raised."""
    try:
        return None, func()
    except Exception as err:  # noqa: BLE001 (one layer that cannot build must not stop the others)
        return f"{type(err).__name__}: {err}", {}


def untuned(workloads, gpu: GpuInfo | None = None) -> list:
    """The workloads whose config is not a tuning record (zero-shot or default), from the choice
    cache where it holds them."""
    gpu = gpu or default_gpu()
    logs = apply.active_logs()
    return [w for w in dict.fromkeys(get_workload(w) for w in workloads)
            if choose(w, gpu, logs).source != "record"]
