import pytest


def _gpu_probe():
    from tc_autotune.backends.cuda.gpu import probe_local_gpu

    return probe_local_gpu()


def gpu_suite_requested(markexpr: str) -> bool:
    """Whether ``-m markexpr`` selects the GPU tests: a test marked only ``gpu`` matches it
    ("gpu", "gpu and not slow"; not "not gpu", nor no -m at all)."""
    if not markexpr.strip():
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m evaluator (private)
    except ImportError:  # should pytest move it: the plain reading of the expression
        return "gpu" in markexpr.split() and "not gpu" not in " ".join(markexpr.split())
    return Expression.compile(markexpr).evaluate(lambda name, **kwargs: name == "gpu")


# Test groups (``pytest -m unit``, ``-m golden``, ``-m gpu``): every test is in exactly one.
# golden: checks against stored expectations (the architecture fingerprint's data, a code hash
# that must not move between processes), so a failure there first asks whether the change was
# meant; gpu: needs a CUDA GPU (marked in its file); unit: the rest.
GOLDEN_MODULES = ("test_arch_fingerprint",)


def _group(item) -> None:
    if "gpu" in item.keywords:
        return
    if item.module.__name__.rpartition(".")[2] in GOLDEN_MODULES:
        item.add_marker(pytest.mark.golden)
    if "golden" not in item.keywords:
        item.add_marker(pytest.mark.unit)


def pytest_collection_modifyitems(config, items):
    """Each test joins its group (``_group``).  A plain run skips the GPU tests where no GPU can
    be used, saying why when a GPU is here but fails (``pytest -m gpu`` does not get this far:
    ``pytest_configure`` fails it)."""
    for item in items:
        _group(item)
    if any("gpu" in item.keywords for item in items):
        probe = _gpu_probe()
        if probe.gpu is None:
            reason = f"needs a CUDA GPU ({probe.problem})" if probe.problem else "needs a CUDA GPU"
            skip = pytest.mark.skip(reason=reason)
            for item in items:
                if "gpu" in item.keywords:
                    item.add_marker(skip)


def _require_gpu_for_the_gpu_suite(config) -> None:
    """``pytest -m gpu`` asks for the GPU suite: without a usable GPU it fails with one line
    (a UsageError, exit 4) instead of skipping every test and exiting 0, which would pass a GPU
    host whose driver or TVM CUDA runtime is broken."""
    markexpr = config.getoption("markexpr", "") or ""
    if gpu_suite_requested(markexpr):
        probe = _gpu_probe()
        if probe.gpu is None:
            raise pytest.UsageError(f"pytest -m {markexpr!r} runs the GPU tests, but {probe.no_gpu_message()}")


def pytest_configure(config):
    """A fresh cubin cache per test session: codegen tests must really run nvcc.  The session's
    pytest-xdist workers share it (as the tests of a session in one process do): a kernel is
    made once per session, whichever worker needs it first (the cache publishes its files
    atomically).  ``pytest -m gpu`` without a usable GPU fails here, in
    the controller, before any worker starts."""
    import os
    import tempfile

    shared = getattr(config, "workerinput", {}).get("tc_autotune_cache")
    if shared:  # an xdist worker: the controller made the cache and removes it
        os.environ["TC_AUTOTUNE_CACHE_DIR"] = shared
        return
    if not hasattr(config, "workerinput"):
        _require_gpu_for_the_gpu_suite(config)
    config._tc_autotune_cache = tempfile.mkdtemp(prefix="tc_autotune_test_cache_")
    os.environ["TC_AUTOTUNE_CACHE_DIR"] = config._tc_autotune_cache


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(pytest-xdist, in the controller) Hand each worker the session's cache."""
    node.workerinput["tc_autotune_cache"] = node.config._tc_autotune_cache


def pytest_unconfigure(config):
    """Leave nothing behind in /tmp (the cubin and kernel caches of this session)."""
    import shutil

    cache = getattr(config, "_tc_autotune_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def cuda_torch():
    """torch, for the GPU tests that need PyTorch with CUDA (skipped without either)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    return torch
