import pytest


def _has_gpu() -> bool:
    from tc_autotune.gpu import local_gpu

    return local_gpu() is not None


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def pytest_configure(config):
    """A fresh cubin cache per test session: codegen tests must really run nvcc."""
    import os
    import tempfile

    config._tc_autotune_cache = tempfile.mkdtemp(prefix="tc_autotune_test_cache_")
    os.environ["TC_AUTOTUNE_CACHE_DIR"] = config._tc_autotune_cache


def pytest_unconfigure(config):
    """Leave nothing behind in /tmp (the cubin and zero-shot model caches of this session)."""
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
