"""The CUDA kernels (kernels/selu_naive.cu, kernels/selu_vectorized.cu) on a GPU.

Every tensor the extensions allocate is poisoned (filled with NaN) before the
kernel runs, through torch's deterministic mode, so an element a kernel forgets
to write shows up as NaN instead of as whatever the memory held.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools

import pytest
import torch
from selu_cases import (
    DTYPES,
    MAX_ULPS,
    TAIL_SIZES,
    assert_close_ulps,
    assert_selu,
    make_input,
    selu_reference,
)

from helpers import build

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

THREADS_PER_BLOCK = (64, 128, 256, 512, 1024)
VECTORS_PER_THREAD = (1, 2, 4, 8)
MAX_BLOCKS_PER_SM = (0, 1, 4)  # one-shot grid; capped grids that loop over tiles
BIG_NUMEL = 2**31 + 12345  # past int32: 8 GiB of float32
SLEEP_CYCLES = 2_000_000_000 // 10  # about 0.1 s of GPU time

# (kernel, dtype): the naive kernel is float32 only.
KERNEL_DTYPES = [("naive", torch.float32)] + [("vectorized", dtype) for dtype in DTYPES]


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def case_id(case) -> str:
    kernel, dtype = case
    return f"{kernel}-{dtype_id(dtype)}"


kernel_dtypes = pytest.mark.parametrize("case", KERNEL_DTYPES, ids=[case_id(c) for c in KERNEL_DTYPES])


@pytest.fixture(scope="module")
def extensions():
    return {
        "naive": build.build("selu_naive", backend="cuda"),
        "vectorized": build.build("selu_vectorized", backend="cuda"),
    }


@pytest.fixture(scope="module")
def naive(extensions):
    return extensions["naive"]


@pytest.fixture(scope="module")
def vectorized(extensions):
    return extensions["vectorized"]


@contextlib.contextmanager
def poisoned_new_tensors(enabled: bool = True):
    """NaN-fill every new tensor (torch.empty, and torch::empty_like in the extensions)."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = enabled
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


@pytest.fixture(autouse=True)
def poison_new_tensors():
    with poisoned_new_tensors():
        yield


def test_new_tensors_are_poisoned():
    # Without this, the tests that rely on poisoning would pass vacuously.
    assert torch.empty(1000, device="cuda").isnan().all()
    assert torch.empty_like(torch.zeros(1000, device="cuda", dtype=torch.bfloat16)).isnan().all()


@kernel_dtypes
def test_selu_matches_reference_and_torch(extensions, case):
    kernel, dtype = case
    x = make_input(dtype).cuda()
    y = extensions[kernel].selu(x)
    assert y.device == x.device
    assert_selu(y, x)
    # torch's CUDA kernel computes the same expression in the same math type
    # with the same expm1f: identical, but allow an ulp for a different compiler.
    assert_close_ulps(y, torch.selu(x), x, max_ulps=1)


@kernel_dtypes
def test_course_correctness_check(extensions, case):
    # The check the notebooks run (helpers.check), on its own inputs and views.
    from helpers import check

    kernel, dtype = case
    check.check_unary(extensions[kernel].selu, check.selu_reference, dtype=dtype, device="cuda", seed=0).assert_ok()


@kernel_dtypes
def test_selu_out_writes_every_element(extensions, case):
    kernel, dtype = case
    x = make_input(dtype).cuda()
    out = torch.full_like(x, float("nan"))
    result = extensions[kernel].selu_out(x, out)
    assert result.data_ptr() == out.data_ptr()
    assert_selu(out, x)


@kernel_dtypes
@pytest.mark.parametrize("numel", TAIL_SIZES)
def test_tail_sizes(extensions, case, numel):
    kernel, dtype = case
    x = make_input(dtype, numel, seed=numel).cuda()
    assert_selu(extensions[kernel].selu(x), x)


@kernel_dtypes
@pytest.mark.parametrize("offset", range(9))
def test_views_at_every_offset(extensions, case, offset):
    # Offsets of 0..8 elements: some views are 16-byte aligned (vector path),
    # most are not (scalar path), for the input and for the output.
    kernel, dtype = case
    numel = 1000 + offset
    base = make_input(dtype, numel + 8).cuda()
    x = base[offset : offset + numel]
    assert_selu(extensions[kernel].selu(x), x)
    out = torch.full((numel + 8,), float("nan"), dtype=dtype, device="cuda")[offset : offset + numel]
    extensions[kernel].selu_out(base[:numel], out)  # aligned input, output at the offset
    assert_selu(out, base[:numel])


@kernel_dtypes
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_non_contiguous_input(extensions, case, layout):
    kernel, dtype = case
    base = make_input(dtype, 64 * 48).cuda().reshape(64, 48)
    x = base.t() if layout == "transposed" else base[:, ::3]
    assert not x.is_contiguous()
    y = extensions[kernel].selu(x)
    assert y.shape == x.shape
    assert_selu(y, x)


@kernel_dtypes
@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_empty_tensors(extensions, case, shape):
    kernel, dtype = case
    x = torch.empty(shape, dtype=dtype, device="cuda")
    assert extensions[kernel].selu(x).shape == shape
    assert extensions[kernel].selu_out(x, torch.empty_like(x)).shape == shape


@functools.lru_cache(maxsize=None)
def cached_case(dtype: torch.dtype, numel: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A CUDA input (a view starting ``offset`` elements into its allocation) and its expected selu.

    Cached: the 240 launch configurations below share a dozen inputs.
    """
    x = make_input(dtype, numel + offset, seed=numel).cuda()[offset:]
    return x, selu_reference(x.cpu()).to(dtype).cuda()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("max_blocks_per_sm", MAX_BLOCKS_PER_SM)
@pytest.mark.parametrize("vectors_per_thread", VECTORS_PER_THREAD)
@pytest.mark.parametrize("threads_per_block", THREADS_PER_BLOCK)
def test_every_launch_config(vectorized, threads_per_block, vectors_per_thread, max_blocks_per_sm, dtype):
    config = (threads_per_block, vectors_per_thread, max_blocks_per_sm)
    # Smaller than one vector; a few tiles and a tail; enough tiles that most
    # capped grids loop many times; and a misaligned view, for the scalar path.
    for numel, offset in ((5, 0), (10_007, 0), ((1 << 22) + 3, 0), (100_000, 1)):
        x, expected = cached_case(dtype, numel, offset)
        y = vectorized.selu_with_config(x, *config)
        assert_close_ulps(y, expected, x, MAX_ULPS[dtype])


def test_default_config_is_the_same_kernel(vectorized):
    x = make_input(torch.float32, 100_000).cuda()
    torch.testing.assert_close(vectorized.selu(x), vectorized.selu_with_config(x, 256, 4, 0),
                               rtol=0, atol=0, equal_nan=True)


# ---- launch mistakes (selu_naive.cu's demonstrations) ----------------------


def race_on_side_stream(fn):
    """Queue a copy into x behind 0.1 s of work on a side stream, then fn(x) on that stream.

    Returns fn's result and the right answer. A kernel launched on torch's
    current stream runs after the copy; one launched elsewhere does not wait for it.
    """
    source = make_input(torch.float32, 1 << 22).cuda().nan_to_num(nan=0.0)  # NaN != NaN
    expected = torch.selu(source)
    x = torch.zeros_like(source)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    # No poisoning here: it would queue a NaN fill of fn's output on the side
    # stream, one more write racing with a kernel launched elsewhere.
    with poisoned_new_tensors(enabled=False), torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.copy_(source)
        y = fn(x)
    torch.cuda.synchronize()
    return y, expected


def test_legacy_default_stream_reads_stale_input(naive):
    y, expected = race_on_side_stream(naive.selu_on_legacy_default_stream)
    assert not torch.equal(y, expected)
    # It ran at once, while the side stream slept: on the zeros x held before the copy.
    assert torch.equal(y, torch.zeros_like(y)), "expected selu(0) = 0 everywhere: x read before the copy"


@pytest.mark.parametrize("kernel", ["naive", "vectorized"])
def test_current_stream_waits_for_the_copy(extensions, kernel):
    y, expected = race_on_side_stream(extensions[kernel].selu)
    torch.testing.assert_close(y, expected, rtol=0, atol=0)


# ---- past 2^31 elements -----------------------------------------------------


@pytest.fixture(scope="module")
def big_input():
    """2^31 + 12345 float32 elements (8 GiB), where 32-bit counts and indices wrap."""
    nbytes = BIG_NUMEL * 4
    free, _total = torch.cuda.mem_get_info()
    if free < 3 * nbytes:
        pytest.skip(f"needs {3 * nbytes / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    x = torch.randn(BIG_NUMEL, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    yield x
    del x
    torch.cuda.empty_cache()


def big_slices():
    """The start, the middle, around element 2^31, and the end."""
    middle, boundary = BIG_NUMEL // 2, 2**31
    return [slice(0, 4096), slice(middle - 2048, middle + 2048), slice(boundary - 2048, boundary + 2048),
            slice(BIG_NUMEL - 4096, BIG_NUMEL)]


@pytest.mark.parametrize(
    "kernel, call",
    [
        ("naive", lambda ext, x: ext.selu(x)),
        ("vectorized", lambda ext, x: ext.selu(x)),
        ("vectorized", lambda ext, x: ext.selu_with_config(x, 256, 4, 2)),  # a capped, looping grid
    ],
    ids=["naive", "vectorized", "vectorized-capped-grid"],
)
def test_more_than_2_to_the_31_elements(extensions, big_input, kernel, call):
    y = call(extensions[kernel], big_input)
    for part in big_slices():
        assert_selu(y[part], big_input[part])
    assert not y.isnan().any(), "some elements were never written (still NaN from the poisoning)"
    del y


def test_int32_count_leaves_elements_unwritten(naive, big_input):
    y = naive.selu_with_int32_count(big_input)
    truncated = ctypes.c_int32(BIG_NUMEL).value  # what the kernel was told: -2147471303
    written = max(truncated, 0)
    if written:
        assert_selu(y[:written], big_input[:written])
    # No error, no crash: the rest is simply never written, and keeps the poison.
    assert y[written:].isnan().all()
    del y


# ---- bad input ----------------------------------------------------------------


def every_entry_point(extensions):
    """(name, fn(x)) for every function of both extensions, called on one tensor."""
    naive, vectorized = extensions["naive"], extensions["vectorized"]
    calls = [(f"naive.{name}", getattr(naive, name)) for name in (
        "selu", "selu_missing_minus_one", "selu_expf_minus_one", "selu_on_legacy_default_stream",
        "selu_with_int32_count")]
    calls += [("naive.selu_out", lambda x: naive.selu_out(x, torch.empty_like(x))),
              ("vectorized.selu", vectorized.selu),
              ("vectorized.selu_out", lambda x: vectorized.selu_out(x, torch.empty_like(x))),
              ("vectorized.selu_with_config", lambda x: vectorized.selu_with_config(x, 256, 4, 0))]
    return calls


def test_cpu_tensor_is_an_error(extensions):
    for name, fn in every_entry_point(extensions):
        with pytest.raises(RuntimeError, match=r"expected a CUDA tensor.*x\.to\('cuda'\)"):
            fn(torch.randn(8))
            pytest.fail(f"{name} accepted a CPU tensor")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64], ids=dtype_id)
def test_non_floating_input_is_an_error(extensions, dtype):
    x = torch.ones(8, dtype=dtype, device="cuda")
    for name, fn in every_entry_point(extensions):
        with pytest.raises(RuntimeError, match=r"expected a floating-point tensor.*x\.float\(\)"):
            fn(x)
            pytest.fail(f"{name} accepted {dtype}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=dtype_id)
def test_naive_kernel_is_float32_only(naive, dtype):
    for name in ("selu", "selu_missing_minus_one", "selu_expf_minus_one"):
        with pytest.raises(RuntimeError, match="float32 only"):
            getattr(naive, name)(torch.ones(8, dtype=dtype, device="cuda"))


@pytest.mark.parametrize(
    "config, message",
    [
        ((100, 4, 0), "threads_per_block must be 64, 128, 256, 512 or 1024"),
        ((32, 4, 0), "threads_per_block must be"),
        ((2048, 4, 0), "threads_per_block must be"),
        ((256, 3, 0), "vectors_per_thread must be 1, 2, 4 or 8"),
        ((256, 16, 0), "vectors_per_thread must be"),
        ((256, 0, 0), "vectors_per_thread must be"),
        ((256, 4, -1), "max_blocks_per_sm must be 0"),
    ],
)
def test_bad_launch_config_is_an_error(vectorized, config, message):
    with pytest.raises(RuntimeError, match=message):
        vectorized.selu_with_config(torch.randn(8, device="cuda"), *config)


@pytest.mark.parametrize("kernel", ["naive", "vectorized"])
@pytest.mark.parametrize(
    "out, message",
    [
        (lambda: torch.empty(9, device="cuda"), "out has shape"),
        (lambda: torch.empty(8, device="cuda", dtype=torch.float64), "out is Double but x is Float"),
        (lambda: torch.empty(8), "out is on cpu"),
        (lambda: torch.empty(16, device="cuda")[::2], "out must be contiguous"),
    ],
    ids=["shape", "dtype", "device", "non-contiguous"],
)
def test_bad_out_is_an_error(extensions, kernel, out, message):
    with pytest.raises(RuntimeError, match=message):
        extensions[kernel].selu_out(torch.randn(8, device="cuda"), out())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("kernel", ["naive", "vectorized"])
def test_tensor_on_a_second_gpu(extensions, kernel):
    # The kernel must run on x's GPU (CUDAGuard), whichever GPU is current.
    x = make_input(torch.float32).to("cuda:1")
    y = extensions[kernel].selu(x)
    assert y.device == x.device
    assert_selu(y, x)
