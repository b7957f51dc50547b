"""Shared fixtures and the rule that GPU tests skip, with a reason, where there is no GPU."""
import pytest
import torch

from helpers import env


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU and a CUDA build of torch")
    skip_nvcc = pytest.mark.skip(reason="needs the CUDA compiler nvcc")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and env.nvcc_path() is None:
            item.add_marker(skip_nvcc)


@pytest.fixture
def poisoned():
    """Every tensor allocated during the test starts full of NaN (helpers.check.poisoned_outputs),
    so an element a kernel never writes cannot pass. Kernel tests use it for every test."""
    from helpers import check

    with check.poisoned_outputs():
        yield
