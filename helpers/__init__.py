"""The shared core of the SELU kernel notebooks.

* :mod:`helpers.env`       what this machine has, and the sizes to use on it
* :mod:`helpers.schemas`   the ``selu_course`` operators' schemas, fake kernels and refusing autograd rules
* :mod:`helpers.build`     compile a kernel of ``kernels/`` and register its CPU and CUDA implementations
* :mod:`helpers.ops`       the operators from Python: autograd switches, the launch of selu_vectorized
* :mod:`helpers.tuning`    measure selu_vectorized's launch on this GPU (``tuning.configure``)
* :mod:`helpers.check`     correctness against a float64 reference, on inputs that catch bugs
* :mod:`helpers.bench`     medians through a timing library, with the copy as the yardstick
* :mod:`helpers.results`   benchmark records in ``results/<device>/``
* :mod:`helpers.plot`      throughput versus size, and % of roofline per variant
* :mod:`helpers.nvcc`      compile a ``.cu`` file to PTX and read ptxas's report, no GPU needed
* :mod:`helpers.evaluate`  the judge of an answer file, which runs in a process of its own
* :mod:`helpers.answer_worker`  that process: functions bound before the answer is imported
"""
from . import env  # noqa: F401  (cheap; the others import torch-heavy pieces lazily)

__all__ = ["env", "schemas", "build", "ops", "tuning", "check", "bench", "results", "plot", "nvcc", "reproduce",
           "evaluate", "answer_worker", "triton_selu"]


def __getattr__(name):
    if name in __all__:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
