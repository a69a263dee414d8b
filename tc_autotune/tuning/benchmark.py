"""Side-by-side timings: default config, applied config and the task's baseline (cuDNN for
conv2d, cuBLAS for dense: the ``baseline_*`` fields, ``baseline`` naming which), in one process.

The applied config is what ``build_conv2d`` would use (``apply.choose_config``): the best
record of the given and shipped logs, else a zero-shot prediction, else the default; the
table says which.  Every kernel that is timed is first checked against the fp32 reference,
and every one, ours and the baseline, is timed by the package's one timer
(``backends.cuda.timer``, ``TIMER``).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..measure import baseline
from ..database.logs import load
from ..core import tasks
from ..api.apply import apply_history_best, best_or_default_config, choose_config
from ..backends.cuda.gpu import default_gpu
from ..api.build import build
from ..api.kernel import compile_kernel
from ..measure.checked_timing import checked_kernel_time, task_arrays
from ..measure.profiler import kernel_seconds
from ..core.results import TIMER, TOLERANCE, relative_l2_error
from ..workloads.names import get

log = logging.getLogger(__name__)


@dataclass
class BenchRow:
    """One workload's medians (seconds) and correctness errors; None where not measured."""

    workload: str
    flops: int
    default_s: float | None = None
    default_err: float | None = None
    tuned_s: float | None = None
    tuned_err: float | None = None
    tuned_config: dict | None = None
    tuned_source: str | None = None  # record, zero-shot or default (apply.choose_config)
    baseline_s: float | None = None  # the task's baseline: cuDNN for conv2d, cuBLAS for dense
    baseline_err: float | None = None
    baseline: str = "cuDNN"  # what the baseline_* fields timed (tasks.Task.baseline_of)
    timer: str | None = TIMER  # what timed every figure of the row (results.TIMERS)
    # the other view, with ``profile``: each side's CUDA kernels per call from the profiler
    tuned_device_s: float | None = None
    baseline_device_s: float | None = None
    pdl: bool = False  # ours timed as PDL builds (``benchmark(pdl=True)``)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "BenchRow":
        """A row of ``as_dict``, or of a JSON file written before the baseline fields were
        renamed (``cudnn_s``, ``cudnn_err``) or rows named their timer (``timer`` None: unknown)."""
        raw = {"timer": None, **renamed(raw)}
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

    @property
    def slower_than_default(self) -> bool:
        """The applied kernel loses to the untuned default by more than 3% (timing noise)."""
        return bool(self.tuned_s and self.default_s and self.tuned_s > 1.03 * self.default_s)


# The baseline's fields before they were named for what they hold (cuDNN or cuBLAS): the
# benchmark's JSON rows and nightly's reports of earlier runs still have these keys.
OLD_KEYS = {"cudnn_s": "baseline_s", "cudnn_err": "baseline_err", "cudnn_ratio": "baseline_ratio",
            "cudnn_seconds": "baseline_seconds"}


def renamed(raw: dict) -> dict:
    """``raw`` (a row of a JSON report) with its old baseline keys renamed (``OLD_KEYS``); a
    key given both ways keeps the new one's value."""
    out = {OLD_KEYS.get(key, key): value for key, value in raw.items() if key in OLD_KEYS}
    out.update({key: value for key, value in raw.items() if key not in OLD_KEYS})
    return out


def device_times(kernel, workload, arrays) -> tuple[float | None, float | None]:
    """(ours, the baseline's) kernel device seconds per call from the profiler, on torch
    tensors of ``arrays`` (the task's inputs, then the reference): our kernel is checked again
    on this launch path first (None, None where it is wrong)."""
    import torch

    *inputs, reference = arrays
    # ml_dtypes' arrays (bf16, fp8: user-defined numpy dtypes) go through fp32, which torch.from_numpy takes
    tensors = [baseline.device_tensor(a, getattr(torch, a.dtype.name)) if a.dtype.isbuiltin == 2
               else torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in inputs]
    out = torch.full(workload.out_shape, float("nan"), dtype=getattr(torch, workload.out_dtype), device="cuda")
    kernel(*tensors, out)
    torch.cuda.synchronize()
    err = relative_l2_error(out.float().cpu().numpy(), reference)
    if not err < TOLERANCE:
        log.error("%s: kernel %s is WRONG on torch tensors (relative error %.3g); not profiled",
                  workload, kernel.config, err)
        return None, None
    ours = kernel_seconds(lambda: kernel(*tensors, out))
    if baseline.scaled_mm_refusal(workload):
        return ours, None  # the baseline's timing said why, once
    run, _ = baseline.runner(workload, *inputs)
    return ours, kernel_seconds(run)


def benchmark(names, logs=None, number: int = 20, repeat: int = 50,
              min_repeat_ms: float = 10, profile: bool = False, pdl: bool = False) -> list[BenchRow]:
    """Time the default config, the applied config (best record of ``logs`` and the shipped
    logs, else zero-shot, else default) and the task's baseline (cuDNN, cuBLAS) for each
    workload, on the same inputs; with ``profile``, also the applied kernel's and the
    baseline's kernel device time (``device_times``, needs PyTorch).

    ``pdl``: our kernels are built with Programmatic Dependent Launch, as torch calls and
    optimized models launch them (``build_cache.model_pdl``), so in the back-to-back replays
    each may start while the one before finishes, as cuBLAS's kernels may.  The kernel view
    then profiles the plain build: a PDL kernel's device time counts its wait for the one before."""
    gpu = default_gpu()
    rows = []
    for name in names:
        wl = get(name)
        task = tasks.of(wl)
        row = BenchRow(workload=name, flops=wl.flops, baseline=task.baseline_of(wl), pdl=pdl)
        t0 = time.time()
        arrays = task_arrays(wl)
        log.info("%s: reference in %.1f s", name, time.time() - t0)
        timing = dict(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        default_config = task.space(wl, gpu).default_config()
        default = build(wl, default_config, pdl=pdl)
        row.default_s, row.default_err = checked_kernel_time(default, wl, *arrays, **timing)
        with apply_history_best(logs or []):
            choice = choose_config(wl, gpu, warn=False)
        row.tuned_config, row.tuned_source = choice.config.as_dict(), choice.source
        if choice.config == default_config:
            tuned = default
            row.tuned_s, row.tuned_err = row.default_s, row.default_err
        else:
            tuned = build(wl, choice.config, pdl=pdl)
            row.tuned_s, row.tuned_err = checked_kernel_time(tuned, wl, *arrays, **timing)
        if profile and row.tuned_s is not None:
            plain = build(wl, choice.config) if pdl else tuned
            row.tuned_device_s, row.baseline_device_s = device_times(plain, wl, arrays)
        if baseline.available() and task.baseline is not None:
            row.baseline_s, row.baseline_err = task.baseline(wl, *arrays, **timing)
        log.info("%s: %s", name, row)
        rows.append(row)
    return rows


@dataclass
class SweepRow:
    """One variant of a workload's base config (best logged, else default) with some knobs changed."""

    workload: str
    flops: int
    changes: dict
    config: dict
    seconds: float | None = None
    err: float | None = None
    baseline_s: float | None = None  # the task's baseline (cuDNN, cuBLAS: ``baseline``)
    invalid: str | None = None
    baseline: str = "cuDNN"
    timer: str = TIMER

    def as_dict(self) -> dict:
        return asdict(self)


def sweep(names, knobs: dict[str, list], logs=None, number: int = 20, repeat: int = 50,
          min_repeat_ms: float = 10) -> list[SweepRow]:
    """Ablation: each workload's base config with every combination of ``knobs`` values,
    each checked and timed, with the task's baseline (cuDNN, cuBLAS) from the same process
    beside them.  Kernels are compiled in parallel (nvcc runs as subprocesses) before any is
    timed."""
    gpu = default_gpu()
    timing = dict(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    rows = []
    for name in names:
        wl = get(name)
        task = tasks.of(wl)
        space = task.space(wl, gpu)
        with apply_history_best(logs or []):
            base = best_or_default_config(wl, gpu)
        arrays = task_arrays(wl)
        baseline_s = None
        if baseline.available() and task.baseline is not None:
            baseline_s, _ = task.baseline(wl, *arrays, **timing)
        variants = []  # (row, config)
        for combo in itertools.product(*knobs.values()):
            changes = dict(zip(knobs, combo))
            config = replace(base, **changes)
            variants.append((SweepRow(name, wl.flops, changes, config.as_dict(), baseline_s=baseline_s,
                                      invalid=space.why_invalid(config),
                                      baseline=tasks.of(wl).baseline_of(wl)), config))
        valid = [(row, config) for row, config in variants if row.invalid is None]
        with ThreadPoolExecutor(max_workers=8) as pool:
            kernels = list(pool.map(lambda v: compile_kernel(wl, v[1], gpu), valid))
        for (row, _), kernel in zip(valid, kernels):
            row.seconds, row.err = checked_kernel_time(kernel, wl, *arrays, **timing)
            log.info("%s %s: %s ms", name, row.changes, ms_cell(row.seconds))
        rows += [row for row, _ in variants]
    return rows


def sweep_table(rows: list[SweepRow]) -> str:
    base = baseline_label(rows)
    lines = [f"| workload | changed knobs | ms | TFLOP/s | {base} ms | {base} / ours |", "|---|---|---|---|---|---|"]
    for r in rows:
        changes = ", ".join(f"{k}={v}" for k, v in r.changes.items())
        if r.invalid:
            lines.append(f"| {r.workload} | {changes} | invalid: {r.invalid} | | | |")
            continue
        lines.append(f"| {r.workload} | {changes} | {ms_cell(r.seconds)} | {_tf(r.flops, r.seconds)} |"
                     f" {ms_cell(r.baseline_s)} | {ratio_cell(r.baseline_s, r.seconds)} |")
    return "\n".join(lines)


def ms_cell(seconds) -> str:
    """Milliseconds for a table cell; "-" where not measured."""
    return f"{seconds * 1e3:.4f}" if seconds else "-"


def _tf(flops, seconds):
    return f"{flops / seconds / 1e12:.1f}" if seconds else "-"


def ratio_cell(baseline_s, ours_s) -> str:
    """Baseline time / ours for a table cell; "-" where either is missing."""
    return f"{baseline_s / ours_s:.2f}" if (baseline_s and ours_s) else "-"


def geomean(values) -> float | None:
    """Geometric mean of the values that were measured (None and 0 skipped)."""
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def baseline_label(rows) -> str:
    """What the baseline columns timed: "cuDNN", "cuBLAS", or both names for a mixed table."""
    return "/".join(sorted({getattr(r, "baseline", "cuDNN") for r in rows})) or "cuDNN"


def markdown_table(rows: list[BenchRow]) -> str:
    """One line per workload, then the geomeans of baseline (cuDNN, cuBLAS) time / ours and
    the losses to the default (the applied kernel slower than the untuned default by more
    than 3%)."""
    base = baseline_label(rows)
    head = ("| workload | default ms | default TFLOP/s | applied ms | applied TFLOP/s | applied from "
            f"| {base} ms | {base} TFLOP/s | {base} / default | {base} / applied |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    if any(r.pdl for r in rows):
        lines.insert(0, "Ours built with PDL (as torch calls and optimized models launch them); "
                        "the kernel device times are the plain builds'.\n")
    for r in rows:
        mark = " (slower than default)" if r.slower_than_default else ""
        lines.append(f"| {r.workload} | {ms_cell(r.default_s)} | {_tf(r.flops, r.default_s)} | {ms_cell(r.tuned_s)} | "
                     f"{_tf(r.flops, r.tuned_s)} | {r.tuned_source or '-'}{mark} | {ms_cell(r.baseline_s)} | "
                     f"{_tf(r.flops, r.baseline_s)} | {ratio_cell(r.baseline_s, r.default_s)} | "
                     f"{ratio_cell(r.baseline_s, r.tuned_s)} |")
    timed = [r for r in rows if r.baseline_s and r.tuned_s and r.default_s]
    if timed:
        applied = geomean(r.baseline_s / r.tuned_s for r in timed)
        default = geomean(r.baseline_s / r.default_s for r in timed)
        lines += ["", f"Geomean {base} / ours over {len(timed)} workloads: applied {applied:.3f}, "
                      f"default {default:.3f}. Applied slower than default (>3%): "
                      f"{sum(r.slower_than_default for r in timed)} of {len(timed)}."]
    profiled = [r for r in rows if r.tuned_device_s and r.baseline_device_s]
    if profiled:
        lines += ["", f"Kernel device time per call (profiler, CUPTI): | workload | applied ms | {base} ms "
                      f"| {base} / applied |", "|---|---|---|---|"]
        lines += [f"| {r.workload} | {ms_cell(r.tuned_device_s)} | {ms_cell(r.baseline_device_s)} | "
                  f"{ratio_cell(r.baseline_device_s, r.tuned_device_s)} |" for r in profiled]
        lines += ["", f"Geomean {base} / applied by kernel device time over {len(profiled)} workloads: "
                      f"{geomean(r.baseline_device_s / r.tuned_device_s for r in profiled):.3f}."]
    return "\n".join(lines)


def tuning_curve(log, workload) -> list[float]:
    """Best-so-far TFLOP/s after each measurement of ``workload`` in ``log`` (file order)."""
    workload, best, curve = get(workload), 0.0, []
    for record in load(log):
        if record.workload == workload:
            best = max(best, record.tflops)
            curve.append(best)
    return curve


def write_plots(rows: list[BenchRow], out_dir, curve_logs=()) -> list[str]:
    """PNG plots: the baseline's time / tuned (else default) per workload, and tuning curves
    from logs.
    Returns the files written; empty (with a log line) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: plots skipped (the table is complete)")
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
    ratios = [(r.baseline_s / (r.tuned_s or r.default_s)) if r.baseline_s and (r.tuned_s or r.default_s) else 0
              for r in rows]
    ax.bar([r.workload for r in rows], ratios, color="tab:green")
    ax.axhline(1.0, color="black", linewidth=0.8)
    base = baseline_label(rows)
    ax.set_ylabel(f"{base} time / our time (1 = parity)")
    ax.set_title(f"Tuned kernels against {base}")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(out_dir / "ratio_vs_baseline.png", dpi=120)
    plt.close(fig)
    written.append(str(out_dir / "ratio_vs_baseline.png"))
    curves = [(name, tuning_curve(path, name)) for path in curve_logs for name in (r.workload for r in rows)]
    curves = [(name, c) for name, c in curves if c]
    if curves:
        fig, ax = plt.subplots(figsize=(11, 5))
        for name, curve in curves:
            ax.plot(range(1, len(curve) + 1), curve, label=name)
        ax.set_xlabel("trials")
        ax.set_ylabel("best TFLOP/s so far")
        ax.set_yscale("log")
        ax.set_title("Tuning curves")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + len(curves) // 16)
        fig.tight_layout()
        fig.savefig(out_dir / "tuning_curves.png", dpi=120)
        plt.close(fig)
        written.append(str(out_dir / "tuning_curves.png"))
    return written
