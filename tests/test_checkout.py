"""A fresh clone works as the README and docs/ say: ignore rules, temporary files, examples."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_gitignore_matches_nothing_that_is_tracked():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == ""


def test_a_pytest_session_leaves_no_cache_directory_behind(tmp_path):
    # A temporary folder of its own: other pytest sessions on this machine make and remove
    # their caches in the shared one at any time.
    session_tmp = tmp_path / "tmp"
    session_tmp.mkdir()
    (tmp_path / "test_nothing.py").write_text("def test_one():\n    import tempfile\n"
                                              "    assert tempfile.gettempdir() == %r\n" % str(session_tmp))
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    env = dict(os.environ, TMPDIR=str(session_tmp))
    env.pop("TC_AUTOTUNE_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(session_tmp.glob("tc_autotune_test_cache_*"))


def test_paths_in_the_readme_examples_exist_in_a_checkout():
    """Every tuning_logs/... and lab/... log or job a command of the README or of the guides in
    docs/ names is tracked (a fresh clone has it).  Not docs/BENCHMARKS.md: a dated log, its
    commands name the paths of their day."""
    docs = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "BENCHMARKS.md")]
    named = {}
    for doc in docs:
        commands = "\n".join(block for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S))
        named[doc.name] = set(re.findall(r"(?:tuning_logs|lab)/[\w./-]+\.(?:jsonl|toml)", commands))
    assert named["README.md"], "the README's commands name no tuning log"
    for doc, paths in named.items():
        for path in paths:
            assert (REPO / path).is_file(), f"{doc}'s example names {path}, which a fresh clone lacks"


def test_every_test_is_in_exactly_one_group(request):
    """``pytest -m unit``, ``-m golden`` and ``-m gpu`` (tests/conftest.py) together run the whole
    suite: a test in none of them would be run by none of the group commands."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    modules = {path.name for path in (root / "tests").glob("test_*.py")}
    items = request.session.items
    if not request.config.getoption("markexpr") and modules <= {Path(str(item.fspath)).name for item in items}:
        # this session collected the whole suite, unfiltered: its items are the answer (a second
        # collection in a new process would cost as much as every test module's import)
        groups = {item.nodeid: [g for g in ("unit", "golden", "gpu") if g in item.keywords] for item in items}
        wrong = {nodeid: found for nodeid, found in groups.items() if len(found) != 1}
        assert len(groups) > 1000 and not wrong, wrong
        return
    # one collection for both faults: a test in no group, or a unit test also in another group
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "--collect-only", "-p", "no:cacheprovider",
                          "-m", "(not unit and not golden and not gpu) or (unit and (golden or gpu))", "tests"],
                         cwd=root, capture_output=True, text=True)
    assert out.returncode == 5 and "no tests collected" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
