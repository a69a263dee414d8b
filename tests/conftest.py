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

    os.environ["TC_AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tc_autotune_test_cache_")
