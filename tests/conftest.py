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
