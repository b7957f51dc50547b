"""What the CPU and GPU kernel tests share: the kernels and dtypes they parametrize over,
the operators' entry points for the tests of bad input, and the words of the errors."""
from __future__ import annotations

import pytest
import torch

from helpers import ops

SELU_KERNELS = ("naive", "vectorized")
# (kernel, dtype) for every dtype each kernel accepts: naive is float32 only.
KERNEL_DTYPES = [(kernel, dtype) for kernel in SELU_KERNELS for dtype in ops.DTYPES[f"selu_{kernel}"]]
TAIL_SIZES = tuple(range(1, 18))  # every remainder modulo 8 (the widest vector), and one more
NON_FLOATING_DTYPES = (torch.int64, torch.int32, torch.bool, torch.complex64, torch.float8_e4m3fn, torch.float8_e5m2)
OTHER_FLOATS = (torch.float64, torch.float16, torch.bfloat16)  # what float32-only ops refuse
# The message of kernels/selu_checks.h's check_floating: what went wrong, then what to do.
NOT_FLOATING_ERROR = r"expected a float32, float64, float16 or bfloat16 tensor, got .*x\.float\(\)"


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def case_id(case) -> str:
    kernel, dtype = case
    return f"{kernel}-{dtype_id(dtype)}"


kernel_dtypes = pytest.mark.parametrize("case", KERNEL_DTYPES, ids=[case_id(c) for c in KERNEL_DTYPES])
float32_kernels = pytest.mark.parametrize("kernel", SELU_KERNELS)


def selu(kernel: str):
    """``ops.selu_naive`` or ``ops.selu_vectorized``: y = selu(x) in a new tensor."""
    return getattr(ops, f"selu_{kernel}")


def selu_out(kernel: str):
    """``ops.selu_naive_out`` or ``ops.selu_vectorized_out``: selu(x) into out, returns out."""
    return getattr(ops, f"selu_{kernel}_out")


# Every entry point, called on one tensor, for the tests of bad input.
ENTRY_POINTS = {
    "selu_naive": ops.selu_naive,
    "selu_naive_out": lambda x: ops.selu_naive_out(x, torch.empty_like(x)),
    "selu_naive_unrolled": lambda x: ops.selu_naive_unrolled(x, 4),
    "selu_vectorized": ops.selu_vectorized,
    "selu_vectorized_out": lambda x: ops.selu_vectorized_out(x, torch.empty_like(x)),
    "selu_vectorized_with_config": lambda x: ops.selu_vectorized_with_config(x, 256, 4, 0),
    "mistake_missing_minus_one": ops.mistake_missing_minus_one,
    "mistake_expf_minus_one": ops.mistake_expf_minus_one,
    "mistake_legacy_default_stream": ops.mistake_legacy_default_stream,
    "mistake_int32_count": ops.mistake_int32_count,
    "mistake_int32_index": ops.mistake_int32_index,
}
FLOAT32_ONLY = [name for name in ENTRY_POINTS if not name.startswith("selu_vectorized")]
