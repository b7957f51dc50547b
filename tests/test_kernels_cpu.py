"""The CPU implementation (kernels/selu_cpu.cpp) against a float64 reference.

It stands in for the CUDA kernels on machines without a GPU and calls the same
scalar math (selu_math.cuh), so these tests also check the math the kernels run.
"""
from __future__ import annotations

import pytest
import torch
from selu_cases import (
    ALPHA,
    DTYPES,
    MAX_ULPS,
    SCALE,
    TAIL_SIZES,
    assert_close_ulps,
    assert_selu,
    make_input,
    selu_reference,
)

from helpers import build


@pytest.fixture(scope="module")
def ext():
    # One build (about a minute), cached in .build/ per source hash.
    return build.build("selu_naive", backend="cpu")


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)


@dtypes
def test_selu_matches_reference(ext, dtype):
    # Both signs, +-0, +-inf, NaN, subnormals, values below -88 (where expf
    # underflows), the largest finite values, and 4000 more spread over 10 decades.
    x = make_input(dtype)
    assert_selu(ext.selu(x), x)


@dtypes
def test_selu_out_writes_every_element(ext, dtype):
    x = make_input(dtype)
    out = torch.full_like(x, float("nan"))  # poisoned: an element left unwritten stays NaN
    result = ext.selu_out(x, out)
    assert result.data_ptr() == out.data_ptr()
    assert_selu(out, x)


@dtypes
def test_selu_is_within_two_ulps_of_torch(ext, dtype):
    # torch's CPU kernel uses a vectorized expm1 (SLEEF), this one the C library's:
    # both are within an ulp of the truth, so within two of each other.
    x = make_input(dtype)
    assert_close_ulps(ext.selu(x), torch.selu(x), x, max_ulps=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_large_input_split_across_threads(ext, dtype):
    # Past at::internal::GRAIN_SIZE (32768) elements, at::parallel_for splits the loop.
    x = make_input(dtype, 1_000_003)
    assert_selu(ext.selu(x), x)


@dtypes
@pytest.mark.parametrize("numel", TAIL_SIZES)
def test_tail_sizes(ext, dtype, numel):
    x = make_input(dtype, numel, seed=numel)
    assert_selu(ext.selu(x), x)


@dtypes
def test_misaligned_views(ext, dtype):
    base = make_input(dtype, 1001)
    x = base[1:]  # contiguous, but starts one element into the allocation
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    assert_selu(ext.selu(x), x)
    out = torch.full((1001,), float("nan"), dtype=dtype)[1:]
    ext.selu_out(x, out)
    assert_selu(out, x)


@dtypes
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_non_contiguous_input(ext, dtype, layout):
    base = make_input(dtype, 64 * 48).reshape(64, 48)
    x = base.t() if layout == "transposed" else base[:, ::3]
    assert not x.is_contiguous()
    y = ext.selu(x)
    assert y.shape == x.shape
    assert_selu(y, x)  # compared element by element, whatever y's strides


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5, 2)])
def test_empty_tensors(ext, shape):
    x = torch.empty(shape)
    assert ext.selu(x).shape == shape
    assert ext.selu_out(x, torch.empty(shape)).shape == shape


def test_zero_keeps_its_sign(ext):
    x = torch.tensor([0.0, -0.0])
    assert ext.selu(x).signbit().tolist() == [False, True]


@pytest.mark.parametrize(
    "x",
    [torch.arange(4), torch.ones(4, dtype=torch.int32), torch.ones(4, dtype=torch.bool),
     torch.ones(4, dtype=torch.complex64)],
    ids=["int64", "int32", "bool", "complex64"],
)
@pytest.mark.parametrize("fn", ["selu", "selu_missing_minus_one", "selu_expf_minus_one"])
def test_non_floating_input_is_an_error(ext, fn, x):
    with pytest.raises(RuntimeError, match=r"expected a floating-point tensor.*x\.float\(\)"):
        getattr(ext, fn)(x)


def test_non_floating_input_to_selu_out_is_an_error(ext):
    with pytest.raises(RuntimeError, match="expected a floating-point tensor"):
        ext.selu_out(torch.arange(4), torch.empty(4, dtype=torch.int64))


def test_wrong_device_is_an_error(ext):
    # A meta tensor stands in for a CUDA one, which this machine may not have.
    with pytest.raises(RuntimeError, match=r"expected a CPU tensor.*x\.to\('cpu'\)"):
        ext.selu(torch.empty(4, device="meta"))


@pytest.mark.parametrize(
    "out, message",
    [
        (torch.empty(5), "out has shape"),
        (torch.empty(2, 2), "out has shape"),
        (torch.empty(4, dtype=torch.float64), "out is Double but x is Float"),
        (torch.empty(8)[::2], "out must be contiguous"),
    ],
    ids=["longer", "reshaped", "dtype", "non-contiguous"],
)
def test_bad_out_is_an_error(ext, out, message):
    with pytest.raises(RuntimeError, match=message):
        ext.selu_out(torch.randn(4), out)


@pytest.mark.parametrize("fn", ["selu_missing_minus_one", "selu_expf_minus_one"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=dtype_id)
def test_first_drafts_are_float32_only(ext, fn, dtype):
    with pytest.raises(RuntimeError, match="float32 only"):
        getattr(ext, fn)(torch.randn(4).to(dtype))


def test_missing_minus_one_is_wrong_for_every_negative_input(ext):
    negative = -torch.logspace(-6, 1, 200)
    positive = torch.logspace(-6, 1, 200)
    error = ext.selu_missing_minus_one(negative).double() - selu_reference(negative)
    # exp(x) instead of exp(x) - 1: off by exactly lambda * alpha.
    torch.testing.assert_close(error, torch.full_like(error, SCALE * ALPHA), rtol=0, atol=1e-6)
    assert_selu(ext.selu_missing_minus_one(positive), positive)


def test_expf_minus_one_loses_precision_near_zero(ext):
    x = torch.tensor([-1e-6, -2e-6, -1e-7])
    relative_error = (ext.selu_expf_minus_one(x).double() / selu_reference(x) - 1).abs()
    # exp(x) rounds to within half an ulp of 1 (6e-8), and subtracting 1 keeps
    # that rounding error whole: percents at -1e-6, and worse closer to 0.
    assert (relative_error > 1e-3).all(), relative_error
    assert (ext.selu(x).double() / selu_reference(x) - 1).abs().max() < 2e-7


def test_expf_minus_one_is_right_far_from_zero(ext):
    # Where |exp(x) - 1| is not small, the subtraction loses nothing: the bug
    # hides from tests that only use values like randn().
    x = -torch.linspace(1, 20, 100)
    assert_close_ulps(ext.selu_expf_minus_one(x), selu_reference(x).float(), x, max_ulps=MAX_ULPS[torch.float32])


@pytest.mark.parametrize(
    "fn, dtype, passes",
    [("selu", dtype, True) for dtype in DTYPES]
    + [("selu_missing_minus_one", torch.float32, False), ("selu_expf_minus_one", torch.float32, False)],
    ids=lambda value: dtype_id(value) if isinstance(value, torch.dtype) else str(value),
)
def test_course_correctness_check(ext, fn, dtype, passes):
    # The check the notebooks run (helpers.check) agrees: selu passes, the first drafts fail.
    from helpers import check

    report = check.check_unary(getattr(ext, fn), check.selu_reference, dtype=dtype, device="cpu", seed=0)
    if passes:
        report.assert_ok()
    else:
        assert not report.passed, report
