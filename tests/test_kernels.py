"""What every device's kernels must do alike, run on the CPU always and on a GPU where there is one.

The operators of :mod:`helpers.ops` through the dispatcher, as the notebooks call
them: results against the float64 reference, out= that writes every element, every
tail length, the layout rules (dense layouts kept, inputs with gaps copied), in place
and partly overlapping out=, empty and 0-d tensors, and the dtype errors. Every new
tensor starts full of NaN (:func:`helpers.check.poisoned_outputs`), so an element a
kernel never writes cannot pass. tests/test_kernels_cpu.py and test_kernels_gpu.py
hold what only one device can show.
"""
from __future__ import annotations

import pytest
import torch
from kernel_cases import (
    ENTRY_POINTS,
    FLOAT32_ONLY,
    NON_FLOATING_DTYPES,
    NOT_FLOATING_ERROR,
    OTHER_FLOATS,
    TAIL_SIZES,
    dtype_id,
    float32_kernels,
    kernel_dtypes,
    selu,
    selu_out,
)

from helpers import build, check


pytestmark = pytest.mark.usefixtures("poisoned")  # tests/conftest.py

@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> torch.device:
    """Each device, with every kernel's libraries for it built and registered (cached in .build/)."""
    for kernel in build.KERNELS:
        build.load(kernel, backend=request.param)
    return torch.device(request.param)



def synchronize(device: torch.device) -> None:
    """Wait for the GPU, so that a kernel's error is raised here and not at a later call."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def test_new_tensors_are_poisoned(device):
    # Without this, the tests that rely on poisoning would pass vacuously.
    assert torch.empty(1000, device=device).isnan().all()
    assert torch.empty_like(torch.zeros(1000, device=device, dtype=torch.bfloat16)).isnan().all()


@kernel_dtypes
def test_selu_out_writes_every_element(device, case):
    kernel, dtype = case
    x = check.harness_input(dtype=dtype, device=device)
    out = torch.empty_like(x)
    assert out.isnan().all()  # poisoned: an element left unwritten stays NaN
    assert selu_out(kernel)(x, out) is out
    check.assert_selu(out, x)


@kernel_dtypes
@pytest.mark.parametrize("numel", TAIL_SIZES)
def test_tail_sizes(device, case, numel):
    kernel, dtype = case
    x = check.harness_input(numel, dtype=dtype, device=device, seed=numel)
    check.assert_selu(selu(kernel)(x), x)


@kernel_dtypes
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_dense_input_keeps_its_layout(device, case, layout):
    # Computed in x's own layout, with no copy; the result has x's strides, as torch.selu's does.
    kernel, dtype = case
    if layout == "transposed":
        x = check.harness_input(64 * 48, dtype=dtype, device=device).reshape(64, 48).t()
    else:
        x = check.harness_input(2 * 3 * 5 * 7, dtype=dtype, device=device).reshape(2, 3, 5, 7)
        x = x.contiguous(memory_format=torch.channels_last)
    assert not x.is_contiguous()
    y = selu(kernel)(x)
    assert y.stride() == x.stride() == torch.selu(x).stride()
    check.assert_selu(y, x)


@kernel_dtypes
@pytest.mark.parametrize("layout", ["strided", "expanded"])
def test_input_with_gaps_gives_a_dense_result(device, case, layout):
    kernel, dtype = case
    if layout == "strided":
        x = check.harness_input(64 * 48, dtype=dtype, device=device).reshape(64, 48)[:, ::3]
    else:  # every row the same memory
        x = check.harness_input(48, dtype=dtype, device=device).expand(64, 48)
    y = selu(kernel)(x)
    assert y.shape == x.shape and y.is_contiguous()
    check.assert_selu(y, x)


@kernel_dtypes
@pytest.mark.parametrize("out_layout", ["transposed", "strided"])
def test_out_in_another_layout(device, case, out_layout):
    kernel, dtype = case
    x = check.harness_input(64 * 48, dtype=dtype, device=device).reshape(64, 48)
    if out_layout == "transposed":
        out = torch.empty(48, 64, dtype=dtype, device=device).t()
    else:
        out = torch.empty(64, 96, dtype=dtype, device=device)[:, ::2]
    strides = out.stride()
    assert selu_out(kernel)(x, out) is out
    assert out.stride() == strides
    check.assert_selu(out, x)


@kernel_dtypes
def test_in_place(device, case):
    # out is x: each element is read before it is written, by the same thread.
    kernel, dtype = case
    base = check.harness_input(100_003, dtype=dtype, device=device)
    before = base.clone()
    assert selu_out(kernel)(base, base) is base  # aligned: the vector path
    check.assert_selu(base, before)
    x = base[1:]  # misaligned: the scalar path; the element before it is untouched
    before = base.clone()
    selu_out(kernel)(x, x)
    check.assert_selu(x, before[1:])
    assert base[:1].view(torch.uint8).equal(before[:1].view(torch.uint8))


@float32_kernels
def test_out_partly_overlapping_x_is_an_error(device, kernel):
    # The kernel would read elements it has already overwritten.
    memory = check.harness_input(9, device=device)
    with pytest.raises(RuntimeError, match="partly overlaps"):
        selu_out(kernel)(memory[:8], memory[1:9])


@kernel_dtypes
@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_empty_tensors(device, case, shape):
    # A grid of 0 blocks would be an invalid launch: the kernels launch nothing.
    kernel, dtype = case
    x = torch.empty(shape, dtype=dtype, device=device)
    assert selu(kernel)(x).shape == shape
    assert selu_out(kernel)(x, torch.empty_like(x)).shape == shape
    synchronize(device)  # a launch error would surface here


@kernel_dtypes
def test_zero_dim_tensor(device, case):
    # One element: no whole vector, so only the tail code runs.
    kernel, dtype = case
    x = torch.tensor(-0.5, dtype=dtype, device=device)
    y = selu(kernel)(x)
    assert y.shape == ()
    check.assert_selu(y, x)
    check.assert_selu(selu_out(kernel)(x, torch.empty_like(x)), x)


@pytest.mark.parametrize("dtype", NON_FLOATING_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_non_floating_input_is_an_error(device, name, dtype):
    x = torch.ones(8).to(dtype).to(device)
    with pytest.raises(RuntimeError, match=NOT_FLOATING_ERROR):
        ENTRY_POINTS[name](x)
        synchronize(device)


@pytest.mark.parametrize("dtype", OTHER_FLOATS, ids=dtype_id)
@pytest.mark.parametrize("name", FLOAT32_ONLY)
def test_naive_and_mistakes_are_float32_only(device, name, dtype):
    with pytest.raises(RuntimeError, match="float32 only"):
        ENTRY_POINTS[name](torch.ones(8, dtype=dtype, device=device))
