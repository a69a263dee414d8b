"""The README against the code: the numbers it states (starting tilings, knobs added later and their
defaults, the space's size, what the shipped logs hold and their template versions), every
``scripts/...`` command and flag it shows, and every function or module attribute it names.
(``test_cli`` checks the other way: every flag of a script is in the README.)"""

import builtins
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tc_autotune
from tc_autotune.tuning import jobs
from tc_autotune.templates.tc_gemm import knobs, warp_specialized
from tc_autotune.database import records
from tc_autotune.core import tasks
from tc_autotune.workloads import conv2d as workloads
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.core.space import conv2d_space

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TEXT = re.sub(r"\s+", " ", README)  # sentences across line breaks
NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                       "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}


def _count(word: str) -> int:
    return int(word.replace(",", "")) if word[0].isdigit() else NUMBERS[word.lower()]


# ---- numbers ----------------------------------------------------------------------------------
def test_the_starting_tilings_are_counted_right():
    counts = [w for w in re.findall(r"\b([\w,]+) (?:starting )?tilings", TEXT) if w[0].isdigit() or w.lower() in NUMBERS]
    assert counts, "the README no longer counts the starting tilings (update this test)"
    assert {_count(c) for c in counts} == {len(warp_specialized.STARTING_TILINGS)}, counts


def test_the_knobs_added_later_and_their_defaults_are_right():
    match = re.search(r"The last (\w+) knobs were added after the first logs were written: a record without them "
                      r"reads back with their first value \(([^)]*)\)", TEXT)
    assert match, "the README no longer describes the knobs added later"
    assert _count(match.group(1)) == len(knobs.KNOB_DEFAULTS)
    assert tuple(knobs.KNOB_DEFAULTS) == knobs.KNOB_NAMES[-len(knobs.KNOB_DEFAULTS):]  # they are the last ones
    assert [v.strip() for v in match.group(2).split(",")] == [str(v) for v in knobs.KNOB_DEFAULTS.values()]
    assert [knobs.KNOBS[k][0] for k in knobs.KNOB_DEFAULTS] == list(knobs.KNOB_DEFAULTS.values())  # "first value"


def test_the_spaces_and_layers_are_counted_right():
    (size,) = re.findall(r"The tutorial's space has ([\d,]+) configs", TEXT)
    assert _count(size) == len(conv2d_space(workloads.get("tutorial"), gpu_for_arch("sm_90")))
    (layers,) = re.findall(r"the (\d+) distinct conv layers of ResNet-50", TEXT)
    assert _count(layers) == len(workloads.RESNET50_LAYERS)


def test_the_shipped_logs_hold_what_the_readme_says():
    match = re.search(r"all (\d+) workloads of `tuning_logs/nightly.toml` and the (\d+) fused layers of "
                      r"`tuning_logs/resnet50-fused-b32.toml` on each GPU, and on the H100 the (\d+) LLM dense shapes "
                      r"of `tuning_logs/llm-dense.toml` and (\d+) of them fused \([^)]*\), and the (\d+) fp16-output\s+"
                      r"fused layers of ResNet-50 at each of batch 1 and 32 \(`tuning_logs/resnet50-fp16-b1.toml` and\s+"
                      r"`tuning_logs/resnet50-fp16-b32.toml`, written by `tc.extract_workloads`\); every record current "
                      r"\(conv2d template version (\d+), dense template version (\d+)\)", TEXT)
    assert match, "the README's sentence on the shipped logs changed (update this test with it)"
    plain, fused, llm, llm_fused, model_layers, conv_version, dense_version = map(int, match.groups())
    assert (conv_version, dense_version) == (tasks.CONV2D.template_version, tasks.DENSE.template_version)

    def shapes(job):
        return {e.workload for e in jobs.load_job(ROOT / "tuning_logs" / job).entries}

    nightly, resnet_fused, dense = shapes("nightly.toml"), shapes("resnet50-fused-b32.toml"), shapes("llm-dense.toml")
    model_b1, model_b32 = shapes("resnet50-fp16-b1.toml"), shapes("resnet50-fp16-b32.toml")
    assert (len(nightly), len(resnet_fused), len(dense)) == (plain, fused, llm)
    assert len(model_b1) == len(model_b32) == model_layers
    assert all(w.out_dtype == "float16" and w.epilogue != "none" for w in model_b1 | model_b32)
    for log, expected in (("nvidia-h200.jsonl", nightly | resnet_fused),
                          ("nvidia-h100-80gb-hbm3.jsonl", nightly | resnet_fused | dense | model_b1 | model_b32)):
        held = list(records.load(ROOT / "tuning_logs" / log))
        assert not [str(r.workload) for r in held if r.stale], f"{log}: not every record is current"
        found = {r.workload for r in held}
        assert expected <= found, f"{log} lacks {sorted(map(str, expected - found))[:3]}"
        extra = found - expected
        if "h100" in log:  # the LLM shapes with a fused epilogue
            assert len(extra) == llm_fused and all(w.epilogue != "none" for w in extra), sorted(map(str, extra))
        else:
            assert not extra, sorted(map(str, extra))


# ---- scripts and flags ------------------------------------------------------------------------------
def _options(script: str) -> set:
    """The option strings of a script's argparse (its --help: the scripts parse before any heavy import)."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = set()
    for line in proc.stdout.splitlines():
        match = re.match(r"\s+(-\S.*?)(?:\s{2,}|$)", line)
        if match:
            found.update(re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", match.group(1)))
    return found


def _flags(text: str) -> list:
    return re.findall(r"(?<![\w-])(--[a-z][\w-]*|-v)(?![\w-])", text)


def _commands() -> list[tuple[str, str]]:
    """(script, its arguments) of every ``python scripts/X.py ...`` in the README (continuations
    joined; comments, redirections and pipes cut)."""
    joined = re.sub(r"\\\n\s*", " ", README)
    found = []
    for match in re.finditer(r"python (?:\S*/)?scripts/(\w+\.py)([^\n`|]*)", joined):
        found.append((match.group(1), re.split(r"#|2>&1|>>|&&|;", match.group(2))[0]))
    return found


def test_every_script_command_and_flag_in_the_readme_exists():
    commands = _commands()
    assert len(commands) > 10
    options = {}
    for script, args in commands:
        assert (ROOT / "scripts" / script).is_file(), f"the README runs scripts/{script}, which does not exist"
        if script not in options:
            options[script] = _options(script)
        unknown = [f for f in _flags(args) if f not in options[script]]
        assert not unknown, f"README: `python scripts/{script}{args}` uses {unknown}, which {script} does not take"
    # the flag tables: each row's flags belong to a script of its section
    for section in re.split(r"\n(?=#{2,3} )", README):
        scripts = sorted({s for s in re.findall(r"scripts/(\w+\.py)", section)})
        rows = re.findall(r"^\| `([^`]+)`", section, re.M)
        flags = [f for row in rows for f in _flags(row)]
        if not flags:
            continue
        allowed = set().union(*(options.get(s) or _options(s) for s in scripts))
        unknown = [f for f in flags if f not in allowed]
        assert not unknown, f"README section {section.splitlines()[0]!r}: {unknown} are no flag of {scripts}"


# ---- functions and attributes -----------------------------------------------------------------------
MODULES = {m.name.split(".", 1)[1] for m in pkgutil.walk_packages(tc_autotune.__path__, "tc_autotune.")}
# the README may name a module by its own name (`records.load_best`): where it lives in the package
SHORT = {name.rpartition(".")[2]: name for name in MODULES}
FILES = (".py", ".png", ".jsonl", ".cfg", ".toml", ".md")
# names the README uses for objects rather than modules: `space.why_invalid(config)` is a ConfigSpace's
INSTANCES = {"space": lambda: conv2d_space(workloads.get("tutorial"), gpu_for_arch("sm_90"))}


def _resolve(reference: str):
    """The object a dotted README reference names, importing modules as needed; AttributeError
    or ImportError where it names nothing."""
    parts = reference.split(".")
    if parts[0] == "tc":
        parts[0] = "tc_autotune"
    if parts[0] in INSTANCES:
        obj, rest = INSTANCES[parts[0]](), parts[1:]
    else:
        if parts[0] in SHORT and parts[0] not in MODULES:
            parts[:1] = SHORT[parts[0]].split(".")
        if parts[0] != "tc_autotune":
            parts.insert(0, "tc_autotune")
        # the longest module prefix, then attributes
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            rest = parts[cut:]
            break
    for name in rest:
        obj = getattr(obj, name)
    return obj


def _references() -> tuple[set, set]:
    """(dotted references into the package, bare function calls) of the README's code spans."""
    dotted, calls = set(), set()
    for span in re.findall(r"`([^`\n]+)`", README):
        span = span.strip()
        match = re.fullmatch(r"((?:tc_autotune|tc)(?:\.\w+)+|([a-z_]+)(?:\.[A-Za-z_]\w*)+)(\(.*\))?", span)
        if match:
            root = match.group(2)
            if not match.group(1).endswith(FILES) and (root is None or root in SHORT or root in INSTANCES):
                dotted.add(match.group(1))
            continue
        match = re.fullmatch(r"([a-z][a-z0-9]*_\w+)\(.*\)", span)  # snake_case calls: the package's functions
        if match:
            calls.add(match.group(1))
    return dotted, calls


def _ffi_names() -> set:
    """Names the package registers with TVM's FFI (module-level string constants such as
    ``tensormap.ENCODE_IM2COL``): the README names some, as the kernels' host code calls them."""
    found = set()
    for module in MODULES:
        if not module.startswith("pytorch"):
            found |= {v for v in vars(importlib.import_module(f"tc_autotune.{module}")).values()
                      if isinstance(v, str) and v.startswith("tc_autotune.")}
    return found


def _defined_anywhere(name: str) -> bool:
    for module in MODULES:
        if module.startswith("pytorch"):
            continue  # optional (torch)
        mod = importlib.import_module(f"tc_autotune.{module}")
        if hasattr(mod, name) or any(hasattr(cls, name) for _, cls in inspect.getmembers(mod, inspect.isclass)):
            return True
    return hasattr(builtins, name)


def test_every_function_and_attribute_the_readme_names_exists():
    dotted, calls = _references()
    assert {"warp_specialized.starting_configs", "tc_autotune.search.zero_shot", "records.py"} - dotted == {"records.py"}
    missing = []
    for reference in sorted(dotted - _ffi_names()):
        if "pytorch" in reference or reference in ("tc.optimize",):
            pytest.importorskip("torch")  # the optional PyTorch subpackage imports torch
        try:
            _resolve(reference)
        except (AttributeError, ImportError) as err:
            missing.append(f"{reference} ({err})")
    missing += [f"{name}()" for name in sorted(calls) if not _defined_anywhere(name)]
    assert calls >= {"apply_history_best", "build_conv2d", "load_best", "pick_best", "merge_best"}
    assert not missing, f"the README names what the code does not have: {missing}"
