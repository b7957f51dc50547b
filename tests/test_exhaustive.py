"""Every input, not a sample: the forward operator against torch eager on all 65,536 fp16 and
bf16 values (CPU and GPU), on all 2^32 fp32 bit patterns (GPU, about a second) and on a fixed
sample of four million of them (CPU). Also the misaligned views that the vectorized kernel
peels (x[k:] in place or into y[k:]) or reads element by element (x[k:] into a fresh tensor).

fp16 and bf16 take the economical path of kernels/selu_math.cuh, made only of operations that
IEEE rounds alike on every machine: the CPU test is the proof, on a machine without a GPU,
that its results are torch's, and the GPU test shows the GPU computes the same.
"""
from __future__ import annotations

import pytest
import torch

from helpers import bench, build, check, ops

HALF_TYPES = (torch.float16, torch.bfloat16)
CPU_FP32_STRIDE = 1021  # a prime: 4.2 million patterns spread over every exponent and both signs


@pytest.fixture(scope="module", autouse=True)
def registered():
    return build.load("selu_vectorized")


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=bench.dtype_name)
def test_every_16_bit_input_on_cpu(dtype):
    result = check.exhaustive(ops.selu_vectorized, dtype, "cpu")
    assert result.inputs == 65536
    assert result.identical, result
    assert result.max_ulp_vs_float64 <= 1, result  # measured: 0, every result correctly rounded


def test_fp32_sample_on_cpu():
    result = check.exhaustive(ops.selu_vectorized, torch.float32, "cpu", fp32_stride=CPU_FP32_STRIDE)
    assert result.inputs == len(range(0, 2**32, CPU_FP32_STRIDE))
    # On a CPU both sides are fp32 expm1 from different libraries (the C library's and
    # torch's vectorized one): each within an ulp or two, not always the same ulp.
    assert result.nan_match and result.max_ulp_vs_torch <= 2, result
    assert result.max_ulp_vs_float64 <= 2, result


def test_the_fp32_sample_covers_both_signs_and_every_exponent():
    x = check.fp32_bit_patterns(0, 2**32, CPU_FP32_STRIDE)
    finite = x[x.isfinite()]
    exponents = torch.frexp(finite[finite != 0]).exponent
    assert (finite < 0).any() and (finite > 0).any() and x.isnan().any()  # ±inf: one pattern each, in the harness
    assert int(exponents.min()) < -126 and int(exponents.max()) == 128  # subnormals to the largest binade


def test_16_bit_values_are_every_pattern():
    for dtype in HALF_TYPES:
        bits = check.every_16_bit_value(dtype).view(torch.int16)
        assert bits.unique().numel() == 65536


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (*HALF_TYPES, torch.float32), ids=bench.dtype_name)
def test_every_input_on_the_gpu(dtype):
    result = check.exhaustive(ops.selu_vectorized, dtype, "cuda")
    assert result.inputs == (2**32 if dtype == torch.float32 else 2**16)
    assert result.identical, result


# ---- misaligned views ------------------------------------------------------------------------

OFFSETS = (1, 2, 3, 5, 7)
NUMEL = 3 * 2**16 + 13  # odd: a head, whole tiles and a tail


def _identical(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    return check.agreement(ours, theirs).identical == ours.numel()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=bench.dtype_name)
@pytest.mark.parametrize("offset", OFFSETS)
def test_misaligned_views_on_the_gpu(dtype, offset, poisoned):
    x = check.harness_input(NUMEL + 8, dtype=dtype, device="cuda")
    view = x[offset:]
    expected = torch.selu(view)
    # a fresh, aligned result: x read in narrower loads
    assert _identical(ops.selu_vectorized(view), expected)
    # into y[offset:]: both misaligned alike, so the head is peeled and the rest is vectors
    y = torch.empty_like(x)
    ops.selu_vectorized_out(view, y[offset:])
    assert _identical(y[offset:], expected)
    # into y[other:] of another misalignment: peeled to y's boundary, x read in narrower loads
    other = (offset + 1) % 8
    out = torch.empty(NUMEL + 16, dtype=dtype, device="cuda")[other:other + view.numel()]
    ops.selu_vectorized_out(view, out)
    assert _identical(out, expected)
    # in place
    inplace = x.clone()
    ops.selu_vectorized_(inplace[offset:])
    assert _identical(inplace[offset:], expected) and _identical(inplace[:offset], x[:offset])


@pytest.mark.gpu
@pytest.mark.parametrize("numel", (1, 2, 3, 7, 8, 9, 17))
def test_views_shorter_than_the_head(numel):
    x = check.harness_input(32, dtype=torch.bfloat16, device="cuda")
    for offset in OFFSETS:
        view = x[offset:offset + numel]
        assert _identical(ops.selu_vectorized(view), torch.selu(view))
