"""The course's operators on a GPU (kernels/selu_naive.cu, selu_vectorized.cu, mistakes.cu): what
only a GPU shows; tests/test_kernels.py holds what every device must do alike.

Every test calls through :mod:`helpers.ops`, as the notebooks do: the same
operator dispatches to the CUDA kernel for a GPU tensor. Every tensor allocated
during a test starts full of NaN (:func:`helpers.check.poisoned_outputs`, the
operators' own ``at::empty_like`` included), so an element a kernel forgets to
write shows up as NaN instead of as whatever the memory held. Reference,
tolerances and inputs all come from :mod:`helpers.check`.
"""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch

from kernel_cases import (
    dtype_id,
    float32_kernels,
    kernel_dtypes,
    selu,
    selu_out,
)

from helpers import bench, build, check, env, ops

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned")]  # tests/conftest.py skips these where there is no GPU

CUDA = "cuda"
THREADS_PER_BLOCK = (64, 128, 256, 512, 1024)
VECTORS_PER_THREAD = (1, 2, 4, 8)
MAX_BLOCKS_PER_SM = (0, 1, 4)  # one-shot grid; capped grids that loop over tiles
BIG_NUMEL = 2**31 + 12345  # past int32: 8 GiB of float32


@pytest.fixture(scope="module", autouse=True)
def registered():
    """The CPU and CUDA libraries of every kernel, built once (cached in .build/)."""
    return [build.load(kernel, backend="cuda") for kernel in build.KERNELS]



# ---- results ---------------------------------------------------------------------------------


@kernel_dtypes
def test_selu_matches_reference_and_torch(case):
    kernel, dtype = case
    x = check.harness_input(dtype=dtype, device=CUDA)
    y = selu(kernel)(x)
    assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device)
    check.assert_selu(y, x)  # against the float64 reference, computed on the CPU
    # torch's CUDA kernel computes the same expression in the same math type with
    # the same expm1f: identical (next test), but allow an ulp for another compiler.
    check.assert_close_ulps(y, torch.selu(x), x, max_ulp=1)


@kernel_dtypes
def test_identical_to_torch_selu_bit_for_bit(case):
    # The coefficients rounded to the math type and multiplied in it, as torch does
    # (selu_math.cuh): every element, NaN and the sign of zero included, the same bits.
    kernel, dtype = case
    x = check.harness_input(100_003, dtype=dtype, device=CUDA)  # vectors, and a tail
    match = check.agreement(selu(kernel)(x), torch.selu(x))
    assert match.identical == x.numel(), str(match)


@kernel_dtypes
def test_course_correctness_check(case):
    # The check the notebooks run (helpers.check), on its own inputs and views.
    kernel, dtype = case
    check.check_unary(selu(kernel), dtype=dtype, device=CUDA, seed=0).assert_ok()


@pytest.mark.parametrize("name", ["mistake_missing_minus_one", "mistake_expf_minus_one"])
def test_course_check_fails_the_wrong_math(name):
    report = check.check_unary(getattr(ops, name), device=CUDA, seed=0, trials=1)
    assert not report.passed, report


@kernel_dtypes
@pytest.mark.parametrize("offset", range(9))
def test_views_at_every_offset(case, offset):
    # Offsets of 0..8 elements: some views are 16-byte aligned (vector path),
    # most are not (scalar path), for the input and for the output.
    kernel, dtype = case
    numel = 1000 + offset
    base = check.harness_input(numel + 8, dtype=dtype, device=CUDA)
    x = base[offset:offset + numel]
    check.assert_selu(selu(kernel)(x), x)
    out = torch.empty(numel + 8, dtype=dtype, device=CUDA)[offset:offset + numel]
    selu_out(kernel)(base[:numel], out)  # aligned input, output at the offset
    check.assert_selu(out, base[:numel])


# ---- launch configurations ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def cached_case(dtype: torch.dtype, numel: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A CUDA input (a view starting ``offset`` elements into its allocation) and its
    float64 reference rounded to ``dtype``. Cached: the 240 configurations share a dozen inputs."""
    x = check.harness_input(numel + offset, dtype=dtype, device=CUDA, seed=numel)[offset:]
    return x, check.selu_reference(x.cpu()).to(dtype).to(CUDA)


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("max_blocks_per_sm", MAX_BLOCKS_PER_SM)
@pytest.mark.parametrize("vectors_per_thread", VECTORS_PER_THREAD)
@pytest.mark.parametrize("threads_per_block", THREADS_PER_BLOCK)
def test_every_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, dtype):
    config = (threads_per_block, vectors_per_thread, max_blocks_per_sm)
    # Smaller than one vector; a few tiles and a tail; enough tiles that most
    # capped grids loop many times; and a misaligned view, for the scalar path.
    for numel, offset in ((5, 0), (10_007, 0), ((1 << 22) + 3, 0), (100_000, 1)):
        x, expected = cached_case(dtype, numel, offset)
        y = ops.selu_vectorized_with_config(x, *config)
        check.assert_close_ulps(y, expected, x, check.MAX_ULP[dtype])


@pytest.mark.parametrize("elements_per_thread", (1, 2, 4, 8))
def test_unrolled_naive_kernel(elements_per_thread):
    # Fewer elements than one thread's share, a partial last block, and a misaligned view.
    for numel, offset in ((3, 0), (10_007, 0), ((1 << 20) + 5, 0), (100_000, 1)):
        x, expected = cached_case(torch.float32, numel, offset)
        y = ops.selu_naive_unrolled(x, elements_per_thread)
        check.assert_close_ulps(y, expected, x, check.MAX_ULP[torch.float32])
        assert torch.equal(y.view(torch.int32), ops.selu_naive(x).view(torch.int32)), (numel, offset)


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_the_launch_in_use_and_the_default_compute_the_same(dtype):
    # The operator launches the configuration helpers.tuning chose for this GPU, or
    # kernels/launch.h's default_config before it has; neither changes a bit.
    x = check.harness_input(100_003, dtype=dtype, device=CUDA)
    y = ops.selu_vectorized(x)
    for config in {ops.launch_config(x.device, dtype), ops.default_launch_config()}:
        match = check.agreement(y, ops.selu_vectorized_with_config(x, *config))
        assert match.identical == x.numel(), f"{config}: {match}"


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_launch_for_size_describes_this_gpus_launch_by_default(dtype):
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    in_use = ops.launch_config(CUDA, dtype)
    for numel in (1, 2**16, 2**20, 2**26):
        assert ops.launch_for_size(numel, dtype) == ops.launch_for_size(numel, dtype, in_use, sms=sms)


def realigned_sizes(tile_vectors: int) -> tuple[int, ...]:
    """Sizes of a misaligned fp16 or bf16 input (8 elements a vector) whose vector loop
    (map_realigned_tiles, realign.cuh: all but the 8 slack elements) ends three tiles in with the last
    tile whole, one vector into a fourth tile, and one vector short of the third's end."""
    slack, per_vector = 8, 8
    return tuple(slack + (3 * tile_vectors + extra) * per_vector + tail
                 for extra, tail in ((0, 0), (1, 5), (-1, 7)))


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_id)
@pytest.mark.parametrize("offset", range(1, 8))  # every word offset (0-3), odd and even halves
def test_realigned_input_in_whole_tiles_and_the_last(dtype, offset):
    # x[offset:] into a fresh result is realigned in registers. Every tile but the last lies
    # whole inside the tensor and takes a form of the loop with no bounds test
    # (whole_realigned_tile); the last one tests each vector. The last tile whole, barely
    # begun and one vector short, at every vectors per thread.
    for vectors in VECTORS_PER_THREAD:
        for threads in (64, 256):
            for numel in realigned_sizes(threads * vectors):
                x, expected = cached_case(dtype, numel, offset)
                y = ops.selu_vectorized_with_config(x, threads, vectors, 0)
                check.assert_close_ulps(y, expected, x, check.MAX_ULP[dtype])
                match = check.agreement(y, torch.selu(x))
                assert match.identical == numel, f"{numel} elements, {threads} x {vectors}: {match}"


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_id)
@pytest.mark.parametrize("offsets", [(1, 0), (0, 3), (2, 5), (7, 7)])  # grad's and x's elements into a buffer
def test_realigned_backward_in_whole_tiles_and_the_last(dtype, offsets):
    # The backward kernel realigns each misaligned input with offsets known only at run time
    # (one loop for all), 256 threads x 4 vectors a tile; the same three ends of the loop.
    # Gradients as autograd passes them (standard normal), inputs with the check's special values.
    for numel in realigned_sizes(256 * 4):
        generator = torch.Generator().manual_seed(numel)
        grad_buffer = torch.randn(numel + 8, generator=generator, dtype=torch.float64).to(dtype).to(CUDA)
        x_buffer = check.harness_input(numel + 8, dtype=dtype, device=CUDA, seed=numel)
        grad = grad_buffer[offsets[0]:offsets[0] + numel]
        x = x_buffer[offsets[1]:offsets[1] + numel]
        check.assert_selu_backward(ops.selu_backward(grad, x), "selu_backward", grad, x, x)


# ---- launch mistakes (kernels/mistakes.cu) -----------------------------------------------------


@contextlib.contextmanager
def no_poisoning():
    # The race runs on a side stream: a NaN fill of an output would be queued there,
    # after the sleep, and overwrite what a kernel launched elsewhere already wrote.
    filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = filling


@float32_kernels
def test_legacy_default_stream_reads_stale_input_and_the_current_stream_waits(kernel):
    # A double buffer on a side stream: a slow producer (torch.cuda._sleep), the new batch
    # copied into x, then SELU of x by the mistake (legacy stream 0) and by a kernel that
    # launches on torch's current stream.
    right, numel = selu(kernel), 1 << 22
    with no_poisoning():
        new_batch = bench.random_input(numel, device=CUDA, seed=1)
        x = bench.random_input(numel, device=CUDA, seed=2)  # the previous batch
        # Each kernel once first: CUDA loads a kernel's code at its first launch, and that
        # waits for the queued work, which would hide the race behind an unwritten sync.
        ops.mistake_legacy_default_stream(x[:1])
        right(x[:1])
        expected, previous = check.selu_reference(new_batch), check.selu_reference(x)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)
            x.copy_(new_batch)  # queued on side: lands after the sleep
            y_legacy = ops.mistake_legacy_default_stream(x)  # stream 0: does not wait
            y_current = right(x)  # the current stream, side: waits for the copy
        torch.cuda.synchronize()

    def close(y, reference):
        return int((check.ulp_distance(y, reference) <= check.MAX_ULP[torch.float32]).sum())

    assert close(y_legacy, expected) == 0  # it ran at once, while the side stream slept...
    assert close(y_legacy, previous) == numel  # ...on the previous batch
    assert close(y_current, expected) == numel


# ---- past 2^31 elements --------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_input():
    """2^31 + 12345 float32 elements (8 GiB), where 32-bit counts and indices wrap."""
    cached_case.cache_clear()  # the launch-config inputs are not needed any more
    torch.cuda.empty_cache()
    if not env.fits_on_gpu(BIG_NUMEL, torch.float32, tensors=3):  # input, output, temporaries
        pytest.skip(f"needs {3 * BIG_NUMEL * 4 / 2**30:.0f} GiB of free GPU memory, "
                    f"{env.free_gpu_bytes() / 2**30:.0f} GiB free")
    x = torch.randn(BIG_NUMEL, device=CUDA, generator=torch.Generator(CUDA).manual_seed(0))
    yield x
    del x
    torch.cuda.empty_cache()


def big_slices() -> list[slice]:
    """The start, the middle, around element 2^31, and the end."""
    middle, boundary = BIG_NUMEL // 2, 2**31
    return [slice(0, 4096), slice(middle - 2048, middle + 2048), slice(boundary - 2048, boundary + 2048),
            slice(BIG_NUMEL - 4096, BIG_NUMEL)]


@pytest.mark.parametrize(
    "selu_big",
    [ops.selu_naive, ops.selu_vectorized, lambda x: ops.selu_vectorized_with_config(x, 256, 4, 2)],
    ids=["naive", "vectorized", "vectorized-capped-grid"],  # capped: a grid that loops over tiles
)
def test_more_than_2_to_the_31_elements(big_input, selu_big):
    y = selu_big(big_input)
    for part in big_slices():
        check.assert_selu(y[part], big_input[part])
    assert not y.isnan().any(), "some elements were never written (still NaN from the poisoning)"
    del y


@pytest.mark.parametrize("elements_per_thread", (1, 4))
def test_unrolled_naive_past_2_to_the_31_elements(big_input, elements_per_thread):
    y = ops.selu_naive_unrolled(big_input, elements_per_thread)
    for part in big_slices():
        check.assert_selu(y[part], big_input[part])
    assert not y.isnan().any(), "some elements were never written (still NaN from the poisoning)"
    del y


def test_copy_past_2_to_the_31_elements(big_input):
    y = ops.copy_vectorized(big_input)
    assert torch.equal(y, big_input)
    del y


def test_int32_count_leaves_elements_unwritten(big_input):
    # What `int n = numel` holds: numel wrapped into [-2^31, 2^31); a count <= 0 launches nothing.
    written = max((BIG_NUMEL + 2**31) % 2**32 - 2**31, 0)
    y = ops.mistake_int32_count(big_input)
    # No error, no crash: the rest is simply never written, and keeps the poison.
    assert int(y.isnan().sum()) == BIG_NUMEL - written
    assert not y[:written].isnan().any()
    del y


def test_int32_index_is_right_below_2_to_the_32(big_input):
    # Below 2^32 the unsigned 32-bit index does not wrap: every element is right.
    y = ops.mistake_int32_index(big_input)
    for part in big_slices():
        check.assert_selu(y[part], big_input[part])
    assert not y.isnan().any(), "some elements were never written (still NaN from the poisoning)"
    del y


def test_int32_index_leaves_what_lies_past_2_to_the_32_unwritten():
    cached_case.cache_clear()
    torch.cuda.empty_cache()  # cached blocks count as used in mem_get_info
    numel, past = 2**32 + 2**20, 2**20
    if not env.fits_on_gpu(numel, torch.float32, tensors=3):  # x, y and the NaN mask's bytes
        pytest.skip(f"needs room for 3 x {numel * 4 / 2**30:.0f} GiB, {env.free_gpu_bytes() / 2**30:.0f} GiB free")
    x = torch.randn(numel, device=CUDA, generator=torch.Generator(CUDA).manual_seed(0))
    with check.poisoned_outputs():
        y = ops.mistake_int32_index(x)
    # The thread for element 2^32 + k wrote element k instead: no error, the tail keeps the poison.
    assert y[2**32:].isnan().all() and int(y.isnan().sum()) == past
    check.assert_selu(y[:past], x[:past])
    del x, y
    torch.cuda.empty_cache()


# ---- bad input ---------------------------------------------------------------------------------


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
def test_bad_launch_config_is_an_error(config, message):
    with pytest.raises(RuntimeError, match=message):
        ops.selu_vectorized_with_config(torch.randn(8, device=CUDA), *config)


@float32_kernels
@pytest.mark.parametrize(
    "make_out, message",
    [
        (lambda: torch.empty(9, device=CUDA), "out has shape"),
        (lambda: torch.empty(8, device=CUDA, dtype=torch.float64), "out is Double but x is Float"),
        (lambda: torch.empty(8), "out is on cpu"),
        (lambda: torch.empty(1, device=CUDA).expand(8), "share one memory location"),
    ],
    ids=["shape", "dtype", "device", "expanded"],
)
def test_bad_out_is_an_error(kernel, make_out, message):
    with pytest.raises(RuntimeError, match=message):
        selu_out(kernel)(torch.randn(8, device=CUDA), make_out())


@float32_kernels
def test_cpu_input_with_a_gpu_out_is_an_error(kernel):
    # The out tensor sends the call to the CUDA kernel, which checks x's device.
    with pytest.raises(RuntimeError, match=r"expected a CUDA tensor.*x\.to\('cuda'\)"):
        selu_out(kernel)(torch.randn(8), torch.empty(8, device=CUDA))


@float32_kernels
def test_cpu_tensor_runs_the_cpu_kernel(kernel):
    # One operator, a kernel per device: a CPU tensor is no error, it runs on the CPU.
    x = check.harness_input(device="cpu")
    y = selu(kernel)(x)
    assert y.device == x.device
    check.assert_selu(y, x)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@float32_kernels
def test_tensor_on_a_second_gpu(kernel):
    # The kernel must allocate and run on x's GPU (CUDAGuard), whichever GPU is current.
    x = check.harness_input(device="cuda:1")
    y = selu(kernel)(x)
    assert y.device == x.device
    check.assert_selu(y, x)
    out = selu_out(kernel)(x, torch.empty_like(x))
    check.assert_selu(out, x)
