"""ResNet-50 through TVM's model compiler, with and without the tuned kernels, against PyTorch in
the same process (``scripts/benchmark_relax.py``).

Per batch: the package's fp16 ResNet-50 (``pytorch.models``, batch norms in eval mode) is exported
with ``torch.export`` and imported (``from_torch``), then built twice:

* ``relax``: ``tvm.compile`` as it comes, TVM's default CUDA pipeline (legalization, fusion, dlight's
  default GPU schedules) on the NCHW model;
* ``relax+tc``: ``partition`` (the tuned kernels of the active logs, NHWC once) then ``build``.

Both outputs are checked against the fp32 PyTorch model (the largest error over the output's
largest magnitude, as ``pytorch.bench`` checks: at most max(5e-2, 5 x PyTorch fp16's own)), then
each is timed as a user runs it, one VM call per forward, beside PyTorch eager (fp16,
channels-last): wall time per forward, median of repeats after warm-up, synchronized.
"""

from __future__ import annotations

import datetime
import statistics
import sys
import time

import tvm
from tvm import relax

from . import building as relax_build
from .partition import partition
from .partition_report import report
from .torch_import import from_torch

TARGET_ITER_S = 0.05  # one repeat's calls take about this long
REPEATS = 15


def _median_ms(fn, sync) -> float:
    """Median wall time of one ``fn()`` in ms: warm-up, then REPEATS repeats of as many calls as
    fill TARGET_ITER_S (at least one), each repeat synchronized at its end; a call slower than
    0.2 s gets fewer repeats (about 3 s of them, at least 3), so a slow build cannot eat the run."""
    for _ in range(3):
        fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-6)
    iters = max(1, min(200, int(TARGET_ITER_S / once)))
    samples = []
    for _ in range(REPEATS if once < 0.2 else max(3, int(3.0 / once))):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / iters * 1e3)
    return statistics.median(samples)


def rel_err(out, ref) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6))


def _vm_call(executable, x_tvm, dev):
    vm = relax.VirtualMachine(executable, dev)
    main = vm["main"]
    return lambda: main(x_tvm)


def batch_row(batch: int, say=print) -> dict:
    """Build, check and time ResNet-50 at ``batch`` (see the module); the row of the JSON."""
    import torch

    from ..pytorch import models

    phases, row = {}, {"batch": batch}
    start = time.perf_counter()
    x32 = torch.randn(batch, 3, 224, 224, device="cuda", generator=torch.Generator("cuda").manual_seed(batch))
    reference = models.resnet50().cuda()
    eager = models.resnet50().half().cuda().to(memory_format=torch.channels_last)
    x_cl = x32.half().contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = reference(x32)
        err_torch = rel_err(eager(x_cl), expected)
        mod = from_torch(models.resnet50().half(), (x32.half().cpu(),))
    phases["export_import_s"] = time.perf_counter() - start
    say(f"batch {batch}: exported and imported in {phases['export_import_s']:.1f} s")

    plain, fast, tuned = build_both(mod, phases, lambda text: say(f"batch {batch}: {text}"))
    summary = report(fast)

    dev = tvm.cuda(0)
    x16 = x32.half().contiguous()  # held here: the TVM view shares its memory
    x_tvm = tvm.runtime.from_dlpack(x16)
    runs = {"relax": plain, "relax+tc": tuned}
    errors, failed = {"torch_eager": err_torch}, {}
    for name, executable in runs.items():
        if isinstance(executable, str):
            failed[name], errors[name] = executable, float("nan")
            continue
        try:  # a variant that fails at run time is a result (said, not timed), not the end of the run
            runs[name] = run = _vm_call(executable, x_tvm, dev)
            errors[name] = rel_err(torch.from_dlpack(run()), expected)
        except Exception as err:  # noqa: BLE001
            failed[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300] if str(err) else ''}"
            errors[name] = float("nan")
            say(f"batch {batch}: {name} failed: {failed[name]}")
    row.update(errors={k: round(v, 5) for k, v in errors.items()}, kernels=len(summary.kernels),
               untuned=summary.untuned, left=summary.left, layers=summary.layers,
               layout_conversions=summary.layout_conversions, **({"failed": failed} if failed else {}))
    wrong = [name for name in runs if not errors[name] <= max(5e-2, 5 * err_torch)]
    if wrong:
        row["wrong"] = wrong
    sync = torch.cuda.synchronize
    start = time.perf_counter()
    with torch.no_grad():
        ms = {"torch_eager": _median_ms(lambda: eager(x_cl), sync)}
    for name, run in runs.items():
        if name not in wrong:
            ms[name] = _median_ms(run, sync)
    phases["timing_s"] = time.perf_counter() - start
    row["ms"] = {k: round(v, 4) for k, v in ms.items()}
    row["ratios"] = {
        "relax+tc_vs_relax": _ratio(ms.get("relax"), ms.get("relax+tc")),
        "relax+tc_vs_torch_eager": _ratio(ms.get("torch_eager"), ms.get("relax+tc")),
        "relax_vs_torch_eager": _ratio(ms.get("torch_eager"), ms.get("relax")),
    }
    row["phases_s"] = {k: round(v, 2) for k, v in phases.items()}
    return row


def build_both(mod, phases: dict, say=print) -> tuple:
    """(``relax`` executable, or why it failed to build; the partitioned module; ``relax+tc``
    executable) of ``mod``, each phase's seconds added to ``phases``.  Needs no GPU (the kernels'
    cubins are made here: a GPU loads them)."""
    target = relax_build.target_of(None)
    start = time.perf_counter()
    try:
        with target:  # the package's nvcc callback reads the arch from the current target
            plain = tvm.compile(mod, target)
        say(f"relax (default schedules) built in {time.perf_counter() - start:.1f} s")
    except Exception as err:  # noqa: BLE001 (TVM's own build failing is a result; ours still runs)
        plain = f"build failed: {type(err).__name__}: {str(err).strip().splitlines()[-1][:300] if str(err) else ''}"
        say(f"relax (default schedules): {plain}")
    phases["build_relax_s"] = time.perf_counter() - start
    start = time.perf_counter()
    fast = partition(mod)
    phases["partition_s"] = time.perf_counter() - start
    start = time.perf_counter()
    tuned = relax_build.build(fast)
    phases["build_relax_tc_s"] = time.perf_counter() - start
    phases.update({f"build_relax_tc_{k}_s": v for k, v in relax_build.PHASES.items()})
    say(f"partitioned in {phases['partition_s']:.1f} s ({report(fast).summary()}), built in "
        f"{phases['build_relax_tc_s']:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in relax_build.PHASES.items())})")
    return plain, fast, tuned


def _ratio(slow, fast) -> float | None:
    return round(slow / fast, 3) if slow and fast else None


def run(batches=(1, 32), say=print) -> dict:
    """Every batch's row, with what produced them (the command, GPU, versions, date)."""
    import torch

    relax_build.kernels.prepare_process()
    start = time.perf_counter()
    rows = [batch_row(b, say) for b in batches]
    return {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(0),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "tvm": tvm.__version__, "total_s": round(time.perf_counter() - start, 1),
            "rows": rows}


def table(result: dict) -> str:
    """The rows as a markdown table."""
    lines = ["| batch | PyTorch eager (ms) | relax (ms) | relax+tc (ms) | tc vs relax | tc vs eager | errors |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        ms, ratios = row.get("ms", {}), row.get("ratios", {})
        lines.append(f"| {row['batch']} | {ms.get('torch_eager')} | {ms.get('relax')} | {ms.get('relax+tc')} | "
                     f"{ratios.get('relax+tc_vs_relax')} | {ratios.get('relax+tc_vs_torch_eager')} | "
                     f"{row['errors']}{' WRONG: ' + ', '.join(row['wrong']) if row.get('wrong') else ''} |")
    return "\n".join(lines)
