"""Shared helpers for the SELU kernel notebooks.

Each notebook calls these in one line:

* :mod:`helpers.env`     what this machine has, and the sizes to use on it
* :mod:`helpers.build`   compile a kernel from ``kernels/`` (CUDA or its CPU implementation)
* :mod:`helpers.check`   correctness against a float64 reference, on inputs that catch bugs
* :mod:`helpers.bench`   medians through a timing library, GB/s, the copy roofline
* :mod:`helpers.plot`    throughput versus size, and % of roofline per variant
* :mod:`helpers.results` benchmark records in ``results/<device>/benchmarks.json``
* :mod:`helpers.nvcc`    compile a ``.cu`` file to PTX and read ptxas's report, no GPU needed
"""
from . import env  # noqa: F401  (cheap; the others import torch-heavy pieces lazily)

__all__ = ["env", "build", "check", "bench", "plot", "results", "nvcc"]


def __getattr__(name):
    if name in __all__:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
