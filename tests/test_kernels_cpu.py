"""The course's operators on the CPU (kernels/selu_cpu.cpp, kernels/mistakes_cpu.cpp): what only
the CPU shows; tests/test_kernels.py holds what every device must do alike.

The CPU implementations stand in for the CUDA kernels on machines without a GPU
and call the same scalar math (selu_math.cuh, mistakes_math.cuh), so these tests
also check the math the kernels run, and the layout and out= rules that both
devices share (elementwise.h). Every test calls through :mod:`helpers.ops`, the
way the notebooks do, and compares with :mod:`helpers.check`'s reference and
tolerances. Every new tensor starts full of NaN (:func:`helpers.check.poisoned_outputs`),
the operators' own allocations included, so an element a kernel never writes
cannot pass by accident.
"""
from __future__ import annotations

import pytest
import torch

from kernel_cases import (
    KERNEL_DTYPES,
    NOT_FLOATING_ERROR,
    case_id,
    dtype_id,
    float32_kernels,
    kernel_dtypes,
    selu,
    selu_out,
)

from helpers import build, check, ops

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("poisoned")  # tests/conftest.py

@pytest.fixture(scope="module", autouse=True)
def registered():
    """The CPU libraries of every kernel, built once (about 8 s each, cached in .build/)."""
    return [build.load(kernel, backend="cpu") for kernel in build.KERNELS]



# ---- selu_naive and selu_vectorized -----------------------------------------------------


@kernel_dtypes
def test_selu_matches_reference(case):
    # Special values (±0, ±inf, NaN, subnormals, exp underflow, ±max) and every
    # distribution of helpers.check.make_input.
    kernel, dtype = case
    x = check.harness_input(dtype=dtype, device=CPU)
    y = selu(kernel)(x)
    assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device)
    check.assert_selu(y, x)


@kernel_dtypes
def test_selu_is_within_two_ulps_of_torch(case):
    # torch's CPU kernel uses a vectorized expm1 (SLEEF), these the C library's:
    # each within an ulp of the truth, so within two of each other.
    kernel, dtype = case
    x = check.harness_input(dtype=dtype, device=CPU)
    check.assert_close_ulps(selu(kernel)(x), torch.selu(x), x, max_ulp=2)


@pytest.mark.parametrize("case", [("naive", torch.float32), ("vectorized", torch.bfloat16)], ids=case_id)
def test_large_input_split_across_threads(case):
    # Past at::internal::GRAIN_SIZE (32768) elements, at::parallel_for splits the loop.
    kernel, dtype = case
    x = check.harness_input(1_000_003, dtype=dtype, device=CPU)
    check.assert_selu(selu(kernel)(x), x)


@kernel_dtypes
def test_misaligned_views(case):
    kernel, dtype = case
    base = check.harness_input(1001, dtype=dtype, device=CPU)
    x = base[1:]  # contiguous, but starts one element into the allocation
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    check.assert_selu(selu(kernel)(x), x)
    out = torch.empty(1001, dtype=dtype)[1:]
    selu_out(kernel)(x, out)
    check.assert_selu(out, x)


@kernel_dtypes
def test_in_place_with_gaps_leaves_the_gaps_alone(case):
    kernel, dtype = case
    base = check.harness_input(64 * 48, dtype=dtype, device=CPU).reshape(64, 48)
    before = base.clone()
    x = base[:, ::3]
    selu_out(kernel)(x, x)
    check.assert_selu(x, before[:, ::3])
    gaps = torch.ones_like(base, dtype=torch.bool)
    gaps[:, ::3] = False
    assert base[gaps].view(torch.uint8).equal(before[gaps].view(torch.uint8))


@kernel_dtypes
def test_zero_keeps_its_sign(case):
    kernel, dtype = case
    x = torch.tensor([0.0, -0.0], dtype=dtype)
    assert selu(kernel)(x).signbit().tolist() == [False, True]


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_with_config_gives_the_same_result(dtype):
    # A CPU has no launch configuration: every valid one is checked and gives selu(x).
    x = check.harness_input(10_007, dtype=dtype, device=CPU)
    expected = ops.selu_vectorized(x)
    for config in [(64, 1, 0), (256, 4, 0), (1024, 8, 4), (128, 2, 1)]:
        match = check.agreement(ops.selu_vectorized_with_config(x, *config), expected)
        assert match.identical == x.numel(), (config, str(match))


def test_unrolled_naive_gives_the_same_result():
    x = check.harness_input(10_007, dtype=torch.float32, device=CPU)
    expected = ops.selu_naive(x)
    for elements_per_thread in (1, 2, 4, 8):
        match = check.agreement(ops.selu_naive_unrolled(x, elements_per_thread), expected)
        assert match.identical == x.numel(), (elements_per_thread, str(match))


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("elements_per_thread", [0, 3, 16, -1])
def test_bad_elements_per_thread_is_an_error_on_the_cpu_too(elements_per_thread):
    with pytest.raises(RuntimeError, match="elements_per_thread must be 1, 2, 4 or 8"):
        ops.selu_naive_unrolled(torch.randn(8), elements_per_thread)
    with pytest.raises(RuntimeError, match="elements_per_thread must be 1, 2, 4 or 8"):
        ops.selu_naive_unrolled(torch.randn(8, device="meta"), elements_per_thread)


@pytest.mark.parametrize(
    "config, message",
    [
        ((100, 4, 0), "threads_per_block must be 64, 128, 256, 512 or 1024"),
        ((2048, 4, 0), "threads_per_block must be"),
        ((256, 3, 0), "vectors_per_thread must be 1, 2, 4 or 8"),
        ((256, 0, 0), "vectors_per_thread must be"),
        ((256, 4, -1), "max_blocks_per_sm must be 0"),
    ],
)
def test_bad_launch_config_is_an_error_on_the_cpu_too(config, message):
    # A config the CUDA kernel would refuse is refused everywhere, so a notebook
    # that runs on the CPU finds out before it meets a GPU.
    with pytest.raises(RuntimeError, match=message):
        ops.selu_vectorized_with_config(torch.randn(8), *config)


@float32_kernels
@pytest.mark.parametrize(
    "make_out, message",
    [
        (lambda x: torch.empty(9), "out has shape"),
        (lambda x: torch.empty(2, 4), "out has shape"),
        (lambda x: torch.empty(8, dtype=torch.float64), "out is Double but x is Float"),
        (lambda x: torch.empty(1).expand(8), "share one memory location"),
    ],
    ids=["longer", "reshaped", "dtype", "expanded"],
)
def test_bad_out_is_an_error(kernel, make_out, message):
    x = torch.randn(8)
    with pytest.raises(RuntimeError, match=message):
        selu_out(kernel)(x, make_out(x))


def test_non_floating_out_is_an_error():
    with pytest.raises(RuntimeError, match=NOT_FLOATING_ERROR):
        ops.selu_vectorized_out(torch.arange(4), torch.empty(4, dtype=torch.int64))


# ---- notebook 02's first drafts --------------------------------------------------------------


def test_missing_minus_one_is_wrong_for_every_negative_input():
    negative = -torch.logspace(-6, 1, 200)
    positive = torch.logspace(-6, 1, 200)
    error = ops.mistake_missing_minus_one(negative).double() - check.selu_reference(negative)
    # λα·exp(x) instead of λα·(exp(x) - 1): off by exactly λα.
    torch.testing.assert_close(error, torch.full_like(error, check.SELU_SCALE * check.SELU_ALPHA), rtol=0, atol=1e-6)
    check.assert_selu(ops.mistake_missing_minus_one(positive), positive)


def test_expf_minus_one_loses_precision_near_zero():
    x = torch.tensor([-1e-6, -2e-6, -1e-7])
    relative_error = (ops.mistake_expf_minus_one(x).double() / check.selu_reference(x) - 1).abs()
    # exp(x) rounds to within half an ulp of 1 (6e-8), and subtracting 1 keeps
    # that rounding error whole: percents at -1e-6, and worse closer to 0.
    assert (relative_error > 1e-3).all(), relative_error
    check.assert_selu(ops.selu_naive(x), x)


def test_expf_minus_one_is_right_far_from_zero():
    # Where |exp(x) - 1| is not small, the subtraction loses nothing: the bug
    # hides from tests that only use values like randn().
    x = -torch.linspace(1, 20, 100)
    check.assert_selu(ops.mistake_expf_minus_one(x), x)


def test_legacy_default_stream_computes_selu_on_the_cpu():
    # A CPU has no streams: the launch mistake exists only on the GPU.
    x = check.harness_input(device=CPU)
    assert check.agreement(ops.mistake_legacy_default_stream(x), ops.selu_naive(x)).identical == x.numel()


@pytest.mark.parametrize("numel", [1, 17, 100_003])
@pytest.mark.parametrize("name", ["mistake_int32_count", "mistake_int32_index"])
def test_32_bit_counts_and_indices_compute_selu_for_small_sizes(name, numel):
    # The count narrowed to int is the same count below 2^31, an index wrapped to 32 bits the
    # same index below 2^32; the bugs show only past them (tested on the GPU, where 16 GiB
    # are cheaper to find).
    x = check.harness_input(numel, device=CPU, seed=numel)
    y = getattr(ops, name)(x)
    assert not (y.isnan() & ~x.isnan()).any(), "elements left unwritten (still NaN from the poisoning)"
    assert check.agreement(y, ops.selu_naive(x)).identical == x.numel()


# ---- the course's check (helpers.check.check_unary) agrees -----------------------------------

COURSE_CHECK_CASES = (
    [(f"selu_{kernel}", dtype, True) for kernel, dtype in KERNEL_DTYPES]
    + [("mistake_legacy_default_stream", torch.float32, True),  # right on a CPU
       ("mistake_int32_count", torch.float32, True),  # right below 2^31 elements
       ("mistake_int32_index", torch.float32, True),  # right below 2^32 elements
       ("mistake_missing_minus_one", torch.float32, False),
       ("mistake_expf_minus_one", torch.float32, False)]
)


@pytest.mark.parametrize(
    "name, dtype, passes", COURSE_CHECK_CASES,
    ids=[f"{name}-{dtype_id(dtype)}" for name, dtype, _ in COURSE_CHECK_CASES],
)
def test_course_correctness_check(name, dtype, passes):
    report = check.check_unary(getattr(ops, name), dtype=dtype, device=CPU, seed=0)
    if passes:
        report.assert_ok()
    else:
        assert not report.passed, report
