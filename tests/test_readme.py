"""The README and the guides in docs/ against the code: the numbers they state (starting tilings,
knobs added later and their defaults, the space's size, what the shipped logs hold and that
each record is current), every ``scripts/...`` and ``lab/...`` command and flag they show, every
function or module attribute and every repository path they name, the README's length and every
relative link.  (``test_cli`` checks the other way: every flag of a script is documented.)

Each fact is checked where it is written: the README keeps what a user needs (the shipped logs,
the commands, the results), ``docs/usage.md`` the workloads, ``docs/commands.md`` the commands'
flags, ``docs/maintainers.md`` the knobs and the space.  ``docs/BENCHMARKS.md`` is a dated log:
its commands and counts were true when measured, so only its links are checked."""

import builtins
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from command_paths import run_completed

import tc_autotune
from tc_autotune.tuning import jobs
from tc_autotune.templates.tc_gemm import knobs, warp_specialized
from tc_autotune.database import records
from tc_autotune import workloads
from tc_autotune.workloads import conv2d
from tc_autotune.backends.cuda.gpu import gpu_for_arch
from tc_autotune.templates.registry import conv2d_space

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_PATH = ROOT / "README.md"
USAGE, COMMANDS, MAINTAINERS = DOCS / "usage.md", DOCS / "commands.md", DOCS / "maintainers.md"
BENCHMARKS = DOCS / "BENCHMARKS.md"
README = README_PATH.read_text()
# The documents whose every statement must hold today: the README and the guides under docs/.
GUIDES = [README_PATH, *sorted(p for p in DOCS.glob("*.md") if p != BENCHMARKS)]
README_MAX_LINES = 300
NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                       "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}


def _text(path: Path) -> str:
    """A document with its whitespace collapsed: sentences read across line breaks."""
    return re.sub(r"\s+", " ", path.read_text())


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _count(word: str) -> int:
    return int(word.replace(",", "")) if word[0].isdigit() else NUMBERS[word.lower()]


def test_the_guides_are_there():
    assert {USAGE, COMMANDS, MAINTAINERS, DOCS / "architecture.md", DOCS / "extending.md"} <= set(GUIDES)
    assert BENCHMARKS.is_file()


# ---- numbers ----------------------------------------------------------------------------------
def test_the_starting_tilings_are_counted_right():
    found = {}
    for path in GUIDES:
        counts = [w for w in re.findall(r"\b([\w,]+) (?:starting )?tilings", _text(path))
                  if w[0].isdigit() or w.lower() in NUMBERS]
        if counts:
            found[_name(path)] = {_count(c) for c in counts}
    # tc-tune's first batch (commands.md) and the warp_specialized knob (maintainers.md) count them
    assert {_name(COMMANDS), _name(MAINTAINERS)} <= set(found), \
        f"the docs no longer count the starting tilings where they did (update this test): {found}"
    assert all(counts == {len(warp_specialized.STARTING_TILINGS)} for counts in found.values()), found


def test_the_knobs_added_later_and_their_defaults_are_right():
    match = re.search(r"The last (\w+) knobs were added after the first logs were written: a record without them "
                      r"reads back with their first value \(([^)]*)\)", _text(MAINTAINERS))
    assert match, "docs/maintainers.md no longer describes the knobs added later"
    assert _count(match.group(1)) == len(knobs.KNOB_DEFAULTS)
    assert tuple(knobs.KNOB_DEFAULTS) == knobs.KNOB_NAMES[-len(knobs.KNOB_DEFAULTS):]  # they are the last ones
    assert [v.strip() for v in match.group(2).split(",")] == [str(v) for v in knobs.KNOB_DEFAULTS.values()]
    assert [knobs.KNOBS[k][0] for k in knobs.KNOB_DEFAULTS] == list(knobs.KNOB_DEFAULTS.values())  # "first value"


def test_the_spaces_and_layers_are_counted_right():
    (size,) = re.findall(r"The tutorial's space has ([\d,]+) configs", _text(MAINTAINERS))
    assert _count(size) == len(conv2d_space(workloads.get("tutorial"), gpu_for_arch("sm_90")))
    for path in (README_PATH, USAGE):  # the README's presets in brief, usage.md's list of them
        (layers,) = re.findall(r"\bthe (\d+) distinct conv layers of ResNet-50", _text(path), re.I)
        assert _count(layers) == len(conv2d.RESNET50_LAYERS), _name(path)


def test_the_shipped_logs_hold_what_the_readme_says():
    match = re.search(r"all (\d+) workloads of `tuning_logs/nightly.toml`, the (\d+) fused layers of\s+"
                      r"`tuning_logs/resnet50-fused-b32.toml` and the (\d+) LLM dense shapes of\s+"
                      r"`tuning_logs/llm-dense.toml`\s+on each GPU, and on the H100 (\d+) of those shapes fused "
                      r"\([^)]*\), and the (\d+) fp16-output\s+"
                      r"fused layers of ResNet-50 at each of batch 1 and 32 \(`tuning_logs/resnet50-fp16-b1.toml` and\s+"
                      r"`tuning_logs/resnet50-fp16-b32.toml`, written by `tc.extract_workloads`\), and on the H100 every\s+"
                      r"workload of ((?:`tuning_logs/[\w.-]+`(?:,\s+|\s+and\s+))+)`tuning_logs/([\w.-]+)`, and on the\s+"
                      r"H200 the (\d+) fp8 shapes of M <= (\d+) of `tuning_logs/llm-dense-fp8.toml`; every record current "
                      r"\(stamped with the hash of the code it timed, checked by `tc-records --restamp`\)",
                      _text(README_PATH))
    assert match, "the README's sentence on the shipped logs changed (update this test with it)"
    plain, fused, llm, llm_fused, model_layers = map(int, match.groups()[:5])
    more_jobs = re.findall(r"`tuning_logs/([\w.-]+)`", match.group(6)) + [match.group(7)]
    assert len(more_jobs) == 5, more_jobs

    def shapes(job):
        return {e.workload for e in jobs.load_job(ROOT / "tuning_logs" / job).entries}

    nightly, resnet_fused, dense = shapes("nightly.toml"), shapes("resnet50-fused-b32.toml"), shapes("llm-dense.toml")
    fp8_small = {w for w in shapes("llm-dense-fp8.toml") if w.m <= int(match.group(9))}
    assert len(fp8_small) == int(match.group(8))
    model_b1, model_b32 = shapes("resnet50-fp16-b1.toml"), shapes("resnet50-fp16-b32.toml")
    assert (len(nightly), len(resnet_fused), len(dense)) == (plain, fused, llm)
    assert len(model_b1) == len(model_b32) == model_layers
    assert all(w.out_dtype == "float16" and w.epilogue != "none" for w in model_b1 | model_b32)
    for log, expected in (("nvidia-h200.jsonl", nightly | resnet_fused | dense | fp8_small),
                          ("nvidia-h100-80gb-hbm3.jsonl", nightly | resnet_fused | dense | model_b1 | model_b32
                           | set().union(*map(shapes, more_jobs)))):
        held = list(records.load(ROOT / "tuning_logs" / log))
        assert not [str(r.workload) for r in held if r.stale], f"{log}: not every record is current"
        assert all(r.code_hash for r in held), f"{log}: a record without the hash of its code"
        found = {r.workload for r in held}
        assert expected <= found, f"{log} lacks {sorted(map(str, expected - found))[:3]}"
        extra = found - expected
        if "h100" in log:  # the LLM shapes with a fused epilogue
            assert len(extra) == llm_fused and all(w.epilogue != "none" for w in extra), sorted(map(str, extra))
        else:
            assert not extra, sorted(map(str, extra))


def test_the_main_job_is_described_right():
    match = re.search(r"tunes the shipped job's (\d+) workloads within its (\d+)-minute budget", _text(README_PATH))
    assert match, "the README's sentence on the main job changed (update this test with it)"
    job = jobs.load_job(ROOT / "tuning_logs" / "nightly.toml")
    assert (int(match.group(1)), int(match.group(2))) == (len(job.entries), job.budget_s / 60)


def test_every_figure_of_the_readmes_results_is_in_the_benchmarks():
    """The README's results are a summary of docs/BENCHMARKS.md: a figure it quotes is there."""
    section = README.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    figures = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\d.])", section))  # 1.052, 3.11x
    assert len(figures) > 10, "the README's results section lost its figures (update this test)"
    benchmarks = BENCHMARKS.read_text()
    missing = sorted(f for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", benchmarks))
    assert not missing, f"README results quote {missing}, which docs/BENCHMARKS.md does not have"


# ---- scripts and flags ------------------------------------------------------------------------------
def _options(script: str) -> set:
    """The option strings of a command's argparse (its --help: the commands parse before any heavy
    import).  ``script`` is its path in the checkout: ``scripts/tune.py``, ``lab/run_study.py``."""
    proc = run_completed(str(ROOT / script), "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = set()
    for line in proc.stdout.splitlines():
        match = re.match(r"\s+(-\S.*?)(?:\s{2,}|$)", line)
        if match:
            found.update(re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", match.group(1)))
    return found


def _flags(text: str) -> list:
    return re.findall(r"(?<![\w-])(--[a-z][\w-]*|-v)(?![\w-])", text)


SCRIPT = r"((?:scripts|lab)/\w+\.py)"  # a command of the checkout, as the documents write it


def _commands(text: str) -> list[tuple[str, str]]:
    """(script, its arguments) of every ``python scripts/X.py ...`` and ``python lab/X.py ...`` in a
    document (continuations joined; comments, redirections and pipes cut)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for match in re.finditer(rf"python (?:\S*/)?{SCRIPT}([^\n`|]*)", joined):
        found.append((match.group(1), re.split(r"#|2>&1|>>|&&|;", match.group(2))[0]))
    return found


def test_every_script_command_and_flag_in_the_docs_exists():
    options = {}

    def options_of(script):
        if script not in options:
            options[script] = _options(script)
        return options[script]

    shown = {path: _commands(path.read_text()) for path in GUIDES}
    assert len(shown[README_PATH]) > 10 and len(shown[COMMANDS]) > 10
    assert any(script == "lab/run_study.py" for script, _ in shown[MAINTAINERS])
    for path, commands in shown.items():
        for script, args in commands:
            assert (ROOT / script).is_file(), f"{_name(path)} runs {script}, which does not exist"
            unknown = [f for f in _flags(args) if f not in options_of(script)]
            assert not unknown, f"{_name(path)}: `python {script}{args}` uses {unknown}, which {script} does not take"
    # the flag tables: each row's flags belong to a command of its section
    tables = 0
    for path in GUIDES:
        for section in re.split(r"\n(?=#{2,3} )", path.read_text()):
            scripts = sorted(set(re.findall(SCRIPT, section)))
            rows = re.findall(r"^\| `([^`]+)`", section, re.M)
            flags = [f for row in rows for f in _flags(row)]
            if not flags:
                continue
            tables += 1
            allowed = set().union(*(options_of(s) for s in scripts))
            unknown = [f for f in flags if f not in allowed]
            assert not unknown, f"{_name(path)} section {section.splitlines()[0]!r}: {unknown} are no flag of {scripts}"
    assert tables >= 6  # tune, nightly, benchmark, records, benchmark_models, the study


# ---- functions, attributes and paths -----------------------------------------------------------
MODULES = {m.name.split(".", 1)[1] for m in pkgutil.walk_packages(tc_autotune.__path__, "tc_autotune.")}
# the documents may name a module by its own name (`records.load_best`): where it lives in the
# package; some names are two modules' (database.records, cli.records): either may be meant
SHORT: dict[str, list[str]] = {}
for _module in sorted(MODULES):
    SHORT.setdefault(_module.rpartition(".")[2], []).append(_module)
FILES = (".py", ".png", ".jsonl", ".cfg", ".toml", ".md")
# names the documents use for objects rather than modules: `space.why_invalid(config)` is a ConfigSpace's
INSTANCES = {"space": lambda: conv2d_space(workloads.get("tutorial"), gpu_for_arch("sm_90"))}
# modules of the flat layout before the role folders (issue #30): a reference to one is stale
FORMER = {"template", "dense_workloads", "commands", "study", "cuda"}
# optional PyTorch: these references import torch
NEEDS_TORCH = ("pytorch", "tc.optimize", "tc.extract_workloads")


def _resolve_in(parts: list[str]):
    """The object ``tc_autotune.<parts>`` names: the longest module prefix, then attributes."""
    parts = parts if parts[0] == "tc_autotune" else ["tc_autotune", *parts]
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(".".join(parts))


def _resolve(reference: str):
    """The object a dotted reference names, importing modules as needed; AttributeError or
    ImportError where it names nothing."""
    parts = reference.split(".")
    if parts[0] == "tc":
        parts[0] = "tc_autotune"
    if parts[0] in INSTANCES:
        obj = INSTANCES[parts[0]]()
        for name in parts[1:]:
            obj = getattr(obj, name)
        return obj
    if parts[0] in SHORT and parts[0] not in MODULES:
        errors = []
        for module in SHORT[parts[0]]:
            try:
                return _resolve_in([*module.split("."), *parts[1:]])
            except (AttributeError, ImportError) as err:
                errors.append(err)
        raise errors[0]
    return _resolve_in(parts)


def _code_spans(text: str) -> list[str]:
    return [span.strip() for span in re.findall(r"`([^`\n]+)`", text)]


def _references(text: str) -> tuple[set, set, set]:
    """(dotted references into the package, bare function calls, references to former modules)
    of a document's code spans."""
    dotted, calls, former = set(), set(), set()
    for span in _code_spans(text):
        match = re.fullmatch(r"((?:tc_autotune|tc)(?:\.\w+)+|([a-z_]+)(?:\.[A-Za-z_]\w*)+)(\(.*\))?", span)
        if match:
            root = match.group(2)
            if match.group(1).endswith(FILES):
                continue
            if root is None or root in SHORT or root in INSTANCES:
                dotted.add(match.group(1))
            elif root in FORMER:
                former.add(match.group(1))
            continue
        match = re.fullmatch(r"([a-z][a-z0-9]*_\w+)\(.*\)", span)  # snake_case calls: the package's functions
        if match:
            calls.add(match.group(1))
    return dotted, calls, former


def _ffi_names() -> set:
    """Names the package registers with TVM's FFI (module-level string constants such as
    ``tensormap.ENCODE_IM2COL``): the documents name some, as the kernels' host code calls them."""
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


def test_every_function_and_attribute_the_docs_name_exists():
    found = {path: _references(path.read_text()) for path in GUIDES}
    dotted = set().union(*(d for d, _, _ in found.values()))
    calls = set().union(*(c for _, c, _ in found.values()))
    readme_dotted, readme_calls, _ = found[README_PATH]
    # the spans are read: these are named, and a file name is no reference
    assert {"warp_specialized.starting_configs", "tc_autotune.search.zero_shot", "records.py"} - dotted == {"records.py"}
    assert {"tc.optimize", "tc.extract_workloads"} <= readme_dotted
    assert {"apply_history_best", "build_conv2d", "load_best", "pick_best", "merge_best"} <= calls
    assert {"build_conv2d"} <= readme_calls
    stale = {_name(path): sorted(former) for path, (_, _, former) in found.items() if former}
    assert not stale, f"the docs name modules of the layout before the role folders: {stale}"
    missing = []
    for reference in sorted(dotted - _ffi_names()):
        if any(name in reference for name in NEEDS_TORCH):
            pytest.importorskip("torch")  # the optional PyTorch subpackage imports torch
        try:
            _resolve(reference)
        except (AttributeError, ImportError) as err:
            where = [_name(p) for p, (d, _, _) in found.items() if reference in d]
            missing.append(f"{reference} in {where} ({err})")
    missing += [f"{name}()" for name in sorted(calls) if not _defined_anywhere(name)]
    assert not missing, f"the docs name what the code does not have: {missing}"


# a repository path a document names: tracked here, or a folder the runs write (git-ignored); a
# path inside the package may be written from its role folder on (`measure/devices.py`)
PATH_SPAN = re.compile(r"(?:tc_autotune|tests|scripts|lab|tuning_logs|docs|\.ci)/[\w./-]*")
PACKAGE_DIRS = sorted(p.name for p in (ROOT / "tc_autotune").iterdir() if (p / "__init__.py").is_file())
PACKAGE_SPAN = re.compile(rf"(?:{'|'.join(PACKAGE_DIRS)})/[\w./-]*")


def _ignored() -> set:
    return {line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def test_every_path_the_docs_name_exists():
    ignored, missing, named = _ignored(), [], 0
    for path in GUIDES:
        for span in _code_spans(path.read_text()):
            if PATH_SPAN.fullmatch(span):
                where = ROOT / span
            elif PACKAGE_SPAN.fullmatch(span):
                where = ROOT / "tc_autotune" / span
            else:
                continue  # placeholders (<gpu>), globs (*.jsonl), commands with arguments
            named += 1
            if not where.exists() and span.strip("/") not in ignored:
                missing.append(f"{_name(path)}: {span}")
    assert named > 40
    assert not missing, f"the docs name paths that do not exist: {missing}"


# ---- length and links ----------------------------------------------------------------------
def test_the_readme_is_short():
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): it is the user's "
                                       "page; move details to docs/")


def _without_code(text: str) -> str:
    """A markdown document without its fenced code blocks (their # lines are no headings) and
    inline code spans (their brackets are no links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (code spans and links as their text), lower case,
    punctuation other than - and _ dropped, spaces as -."""
    text = re.sub(r"\[([^]]*)]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set:
    """The anchors of a document's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen, found = {}, set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M),
                              re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slugs_are_githubs():
    assert slug("26f. The goals re-measured on the H100") == "26f-the-goals-re-measured-on-the-h100"
    assert slug("`warp_specialized`") == "warp_specialized"
    assert slug("The studies and lab/") == "the-studies-and-lab"
    assert slug("scripts/benchmark_models.py") == "scriptsbenchmark_modelspy"
    assert slug("10b. Never slower than the default: the nightly re-time pass") == \
        "10b-never-slower-than-the-default-the-nightly-re-time-pass"


def test_every_relative_link_points_to_a_file_and_heading_that_exist():
    links, broken = 0, []
    for path in [README_PATH, *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(path.read_text())):
            if re.match(r"[a-z][\w+.-]*:", target):  # https:, mailto: ...
                continue
            links += 1
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{_name(path)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{_name(path)}: {target} (no such heading in {linked.name})")
    assert links > 30
    assert not broken, "broken links:\n" + "\n".join(broken)
