"""Shared helpers for the SELU kernel notebooks.

Each notebook calls these in one line:

* :mod:`helpers.env`     what this machine has, and the sizes to use on it
* :mod:`helpers.ops`     the ``selu_course`` operators: schemas, fake kernels, autograd rules
* :mod:`helpers.build`   compile a kernel of ``kernels/`` and register its CPU and CUDA implementations
* :mod:`helpers.check`   correctness against a float64 reference, on inputs that catch bugs
* :mod:`helpers.bench`   medians through a timing library, GB/s, the copy roofline
* :mod:`helpers.plot`    throughput versus size, and % of roofline per variant
* :mod:`helpers.results` benchmark records in ``results/<device>/benchmarks.json``
* :mod:`helpers.nvcc`    compile a ``.cu`` file to PTX and read ptxas's report, no GPU needed
* :mod:`helpers.demos`   notebook 02's live demonstrations (first-draft bugs, races, big tensors)
* :mod:`helpers.report`  notebook 03's tables, measurements and goal report
* :mod:`helpers.backward` notebook 04's derivative, backward checks, speed, memory and training run
* :mod:`helpers.exercises` the check cells of the exercises
"""
from . import env  # noqa: F401  (cheap; the others import torch-heavy pieces lazily)

__all__ = ["env", "ops", "build", "check", "bench", "plot", "results", "nvcc", "demos", "report", "backward", "exercises"]


def __getattr__(name):
    if name in __all__:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
