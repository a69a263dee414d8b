"""The config each way of picking gives every workload of a job, for a GPU by name: a JSON file
that ``pick_ab.py`` builds and times on that GPU.  Runs anywhere (no GPU: the picks read only the
shipped logs and the stored zero-shot model), so an A/B of two code versions is two runs of this,
one per checkout, and one GPU run of ``pick_ab.py`` on both files.

    python lab/probes/picks.py lab/validation.toml --gpu "NVIDIA H200" --way choice --out a.json

Ways:
  choice          what a build picks today (``apply.choose_config`` on the shipped logs as that GPU
                  reads them: its own log first, then all)
  zero-shot-arch  the zero-shot pick of the arch's model (trained on every GPU of the arch) in
                  place of the GPU's own; for a dense GEMM, the pick near its nearest tuned GEMMs
  neighbour       a dense GEMM: the nearest tuned GEMM's best record (``apply.neighbour_config``)
  default         the space's default config
  fp16-twin       an fp32-input conv: what a build picks for the same conv with fp16 input, with the
                  knobs an fp32 kernel cannot take (TMA loads of an operand, setmaxnreg) switched off
"""
import argparse
import json
import subprocess
from dataclasses import replace
from pathlib import Path

from tc_autotune.api import apply
from tc_autotune.backends.cuda.gpu import GpuInfo, gpu_log_name
from tc_autotune.database.paths import shipped_logs_dir
from tc_autotune.core import tasks
from tc_autotune.search import zero_shot
from tc_autotune.templates.tc_gemm.knobs import CONVERT_REFUSED
from tc_autotune.tuning.jobs import load_job

# Hopper GPUs the shipped logs name: 132 SMs, 227 KB of opt-in shared memory a block (driver facts)
GPUS = {name: GpuInfo(name=name, arch="sm_90", sm_count=132, max_smem_per_block=227 * 1024)
        for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3")}
WAYS = ("choice", "zero-shot-arch", "neighbour", "default", "fp16-twin")
# fp16-twin: the knobs of a twin's config that fp32 input refuses (the warp-specialized kernel's
# producer converts both operands with its threads' loads) go to 0 (a conv's swap_ab is 0 already)
FP32_REFUSED = dict.fromkeys(CONVERT_REFUSED, 0)


def shipped_logs(gpu: GpuInfo) -> tuple:
    """The log sets a build on ``gpu`` reads (``apply.active_logs`` there, no user logs)."""
    shipped = Path(shipped_logs_dir())
    own = shipped / gpu_log_name(gpu.name)
    return (((str(own), False),) if own.exists() else ()) + ((str(shipped), False),)


def arch_model(gpu: GpuInfo):
    models, why = zero_shot.stored_models()
    found = [m for m in models if m.scope == "arch" and m.gpu.arch == gpu.arch]
    if not found:
        raise SystemExit(f"no arch model: {why}")
    return found[0]


def pick(workload, gpu: GpuInfo, way: str, logs: tuple):
    """(config, source) of ``workload`` by ``way``; (None, why) where the way has no pick."""
    if way == "fp16-twin":
        choice = apply.choose_config(workload.replace(dtype="float16"), gpu, warn=False, logs=logs)
        config = replace(choice.config, **{k: v for k, v in FP32_REFUSED.items() if getattr(choice.config, k)})
        why = tasks.of(workload).space(workload, gpu).why_invalid(config)
        return (None, f"twin invalid: {why}") if why else (config, f"fp16 twin's {choice.source}")
    if way == "default":
        return tasks.of(workload).space(workload, gpu).default_config(), "default"
    if way == "neighbour":
        found = apply.neighbour_config(workload, gpu, logs)
        return (found[0], f"neighbour {found[2]}") if found else (None, "no tuned GEMM of its kind")
    if way == "zero-shot-arch":
        model = arch_model(gpu)
        own = zero_shot.stored_model
        zero_shot.stored_model = lambda g, folder=None: (model, None)  # dense picks ask for it
        try:
            choice = apply.choose_config(workload, gpu, warn=False, logs=logs)
        finally:
            zero_shot.stored_model = own
        return choice.config, f"{choice.source} (arch model)"
    choice = apply.choose_config(workload, gpu, warn=False, logs=logs)
    return choice.config, choice.source + (f" {choice.log}" if choice.log and choice.source != "record" else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", help="a job file (its workloads)")
    parser.add_argument("--gpu", choices=sorted(GPUS), default="NVIDIA H200")
    parser.add_argument("--way", choices=WAYS, default="choice")
    parser.add_argument("--label", help="the side's name in pick_ab's tables (default: the way and commit)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    gpu, logs = GPUS[args.gpu], shipped_logs(GPUS[args.gpu])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    picks = {}
    for entry in load_job(args.job).entries:
        config, source = pick(entry.workload, gpu, args.way, logs)
        picks[str(entry.workload)] = {"config": None if config is None else config.as_dict(), "source": source}
        print(f"{str(entry.workload):70s} {source}")
    label = args.label or f"{args.way}@{commit}"
    Path(args.out).write_text(json.dumps({"label": label, "gpu": args.gpu, "way": args.way, "commit": commit,
                                          "job": args.job, "picks": picks}, indent=1))


if __name__ == "__main__":
    main()
