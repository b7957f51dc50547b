"""The course's Triton peer as an operator (helpers/triton_selu.py): ``selu_course::selu_triton``
and ``selu_course::selu_triton_backward``.

* Without triton (CI), or with a torch older than 2.6 (no ``wrap_triton``), the module
  imports, defines nothing and says what is missing; every other test skips.
* With triton and no GPU (``gpu`` marker skipped) the Triton kernels are compiled to PTX
  for an sm_90 GPU, which needs no GPU, and the operators run their CPU kernels (torch's
  own ops): float64 reference, opcheck, gradcheck, errors, torch.compile.
* On a GPU the Triton kernels run: against the float64 reference on inputs of both signs,
  special values and odd sizes; bit for bit against ``torch.selu`` and ``aten.elu_backward``
  (every float16 and bfloat16 input; float32 harness inputs); opcheck, gradcheck,
  torch.compile(fullgraph=True) against eager, past 2^31 elements.

Every tensor allocated during a test starts full of NaN (tests/conftest.py ``poisoned``),
the operators' own ``torch.empty_like`` included: an element a kernel never writes is NaN
where the reference is not, and the comparisons, which demand NaN exactly where the
reference has it, fail. Triton's interpreter (TRITON_INTERPRET=1) cannot stand in for a GPU:
in triton 3.6 it has no libdevice (``libdevice.expm1`` returns None there).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from kernel_cases import NON_FLOATING_DTYPES, NOT_FLOATING_ERROR, dtype_id

from helpers import check, env, triton_selu

pytestmark = pytest.mark.usefixtures("poisoned")  # tests/conftest.py

SAMPLE = 1 << 16
SIZES = (1, 2, 3, 1023, 1024, 1025, 4097, 65537)  # within a block, one block, a tail, many blocks
GRADS = (1.0, -0.75, 3.5e-3, 1e4)  # incoming gradients for the exhaustive 16-bit tests
DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))
BIG_NUMEL = 2**31 + 1029  # past int32 offsets: 4 GiB of float16


@pytest.fixture(scope="module")
def triton_ops():
    if not triton_selu.available():
        pytest.skip("needs triton (not installed here: the operators are not defined)")
    assert triton_selu.register()


needs_triton = pytest.mark.usefixtures("triton_ops")


def grad_like(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(x.shape, generator=g, dtype=torch.float64).to(device=x.device, dtype=x.dtype)


def torch_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.elu_backward(grad, check.SELU_ALPHA, check.SELU_SCALE, 1.0, False, x)


def assert_matches_the_reference(x: torch.Tensor, seed: int = 0) -> None:
    """Forward and backward of ``x`` within the course's tolerances of the float64 reference."""
    grad = grad_like(x, seed)
    y = triton_selu.selu_triton(x)
    assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device)
    check.assert_selu(y, x)
    check.assert_selu_backward(triton_selu.selu_triton_backward(grad, x), "selu_backward", grad, x, x)


def assert_identical_to_torch(x: torch.Tensor, grad: torch.Tensor) -> None:
    """Bit for bit torch.selu, and aten.elu_backward except where x is NaN: torch's CUDA
    backward tests x <= 0 and returns grad * lambda there, the course's kernels NaN."""
    match = check.agreement(triton_selu.selu_triton(x), torch.selu(x))
    assert match.identical == x.numel(), str(match)
    ours, nan = triton_selu.selu_triton_backward(grad, x), x.isnan()
    match = check.agreement(ours[~nan], torch_backward(grad, x)[~nan])
    assert match.identical == match.numel, str(match)
    assert ours[nan].isnan().all()


# ---- without triton ----------------------------------------------------------------------------


def _without_what_it_needs(setup: str, error: str) -> None:
    """In a fresh interpreter prepared by ``setup``: the module imports, registers nothing, and
    the operator raises a RuntimeError that says ``error``."""
    script = setup + (
        "import torch\n"
        "from helpers import triton_selu\n"
        "assert not triton_selu.available() and triton_selu.register() is False\n"
        "assert not hasattr(torch.ops.selu_course, 'selu_triton')\n"
        "try:\n"
        "    triton_selu.selu_triton(torch.ones(3))\n"
        "except RuntimeError as error:\n"
        f"    assert {error!r} in str(error), error\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=env.REPO_ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(env.REPO_ROOT)}, timeout=300)
    assert result.returncode == 0, result.stderr


def test_imports_and_defines_nothing_without_triton():
    # `import triton` fails, as in CI.
    _without_what_it_needs("import sys; sys.modules['triton'] = None\n", "needs triton")


def test_an_old_torch_is_a_clear_error():
    # A stand-in triton package and a torch without torch.library.wrap_triton and triton_op
    # (before 2.6): the error names what is missing, and the torch that brought it.
    _without_what_it_needs(
        "import sys, types\n"
        "for name in ('triton', 'triton.language', 'triton.language.extra'):\n"
        "    sys.modules[name] = types.ModuleType(name)\n"
        "sys.modules['triton'].jit = lambda fn: fn\n"
        "sys.modules['triton.language.extra'].libdevice = None\n"
        "import torch.library\n"
        "del torch.library.wrap_triton, torch.library.triton_op\n"
        "from helpers import triton_selu\n"
        "assert 'torch 2.6' in triton_selu.missing(), triton_selu.missing()\n",
        "needs torch.library.triton_op and wrap_triton")


# ---- with triton, any machine ------------------------------------------------------------------


@needs_triton
def test_register_defines_the_operators_once():
    assert triton_selu.register() and triton_selu.register()  # the second call does nothing
    assert str(torch.ops.selu_course.selu_triton.default._schema) == "selu_course::selu_triton(Tensor x) -> Tensor"
    assert str(torch.ops.selu_course.selu_triton_backward.default._schema) == (
        "selu_course::selu_triton_backward(Tensor grad, Tensor x) -> Tensor")


@needs_triton
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_kernels_compile_for_a_gpu_with_torchs_coefficients(dtype):
    # No GPU needed: Triton compiles to PTX (and ptxas, which it ships, to a cubin) for sm_90.
    # The coefficients are rounded to the math type, then multiplied in it, as torch does.
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    math = torch.float64 if dtype == torch.float64 else torch.float32
    scale = torch.tensor(check.SELU_SCALE, dtype=math)
    negative_coef = torch.tensor(check.SELU_ALPHA, dtype=math) * scale
    bits = torch.int64 if math == torch.float64 else torch.int32
    width, prefix = (16, "0d") if math == torch.float64 else (8, "0f")
    patterns = [f"{prefix}{int(c.view(bits)) & (2 ** (4 * width) - 1):0{width}X}" for c in (scale, negative_coef)]
    pointer = "*" + {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    constants = {"ALPHA": check.SELU_ALPHA, "SCALE": check.SELU_SCALE, "BLOCK": triton_selu.BLOCK}
    for kernel, pointers in ((triton_selu.selu_forward_kernel, ("x_ptr", "y_ptr")),
                             (triton_selu.selu_backward_kernel, ("grad_ptr", "x_ptr", "out_ptr"))):
        signature = {**dict.fromkeys(pointers, pointer), "n": "i64", **dict.fromkeys(constants, "constexpr")}
        compiled = triton.compile(ASTSource(kernel, signature=signature, constexprs=constants),
                                  target=GPUTarget("cuda", 90, 32), options={"num_warps": triton_selu.NUM_WARPS})
        ptx = compiled.asm["ptx"]
        assert all(pattern in ptx for pattern in patterns), (kernel.__name__, patterns)


@needs_triton
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("device", DEVICES)
def test_matches_the_float64_reference(device, dtype):
    for size in SIZES:
        assert_matches_the_reference(check.harness_input(size, dtype, device, seed=size), seed=size)
    assert_matches_the_reference(check.special_values(dtype, device))
    assert_matches_the_reference(check.harness_input(SAMPLE, dtype, device, seed=1).reshape(256, -1))


@needs_triton
@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_input_gives_a_contiguous_result(device):
    base = check.harness_input(64 * 48 + 1, torch.float32, device, seed=2)
    for x in (base[1:], base[:64 * 48].reshape(64, 48).t(), base[::3]):  # misaligned, transposed, strided
        grad = grad_like(x).t().contiguous().t() if x.dim() == 2 else grad_like(x)  # another layout than x
        y, grad_in = triton_selu.selu_triton(x), triton_selu.selu_triton_backward(grad, x)
        assert y.is_contiguous() and grad_in.is_contiguous()
        assert check.agreement(y, triton_selu.selu_triton(x.contiguous())).identical == x.numel()
        check.assert_selu(y, x)
        check.assert_selu_backward(grad_in, "selu_backward", grad, x, x)


@needs_triton
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, dtype):
    x = check.harness_input(37 * 29, dtype, device, seed=8).reshape(37, 29)
    x = torch.where(x.isnan(), 0, x)  # opcheck compares with assert_close, to which NaN != NaN
    grad = grad_like(x)
    forward, backward = torch.ops.selu_course.selu_triton.default, torch.ops.selu_course.selu_triton_backward.default
    for args in ((x,), (x.t(),), (x.clone().requires_grad_(),)):
        torch.library.opcheck(forward, args)
    for args in ((grad, x), (grad.clone().requires_grad_(), x.clone().requires_grad_())):
        torch.library.opcheck(backward, args)


@needs_triton
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_and_double_backward(device):
    g = torch.Generator().manual_seed(9)
    x = torch.randn(64, generator=g, dtype=torch.float64)
    x = x[x.abs() > 1e-3].to(device).requires_grad_()  # the derivative jumps at 0: gradcheck must not sample across it
    grad = torch.randn(x.shape, generator=g, dtype=torch.float64).to(device).requires_grad_()
    assert torch.autograd.gradcheck(triton_selu.selu_triton, (x,))
    assert torch.autograd.gradgradcheck(triton_selu.selu_triton, (x,))
    assert torch.autograd.gradcheck(triton_selu.selu_triton_backward, (grad, x))
    assert torch.autograd.gradgradcheck(triton_selu.selu_triton_backward, (grad, x))


@needs_triton
@pytest.mark.parametrize("device, dtype", [
    ("cpu", torch.float32),
    pytest.param("cuda", torch.float32, marks=pytest.mark.gpu),
    pytest.param("cuda", torch.bfloat16, marks=pytest.mark.gpu),
], ids=["cpu-float32", "cuda-float32", "cuda-bfloat16"])
def test_compiles_into_one_graph_with_its_backward(device, dtype):
    torch._dynamo.reset()
    x = check.harness_input(4099, dtype, device, seed=11)
    x = torch.where(x.isfinite(), x, 0).clamp(-50, 50).requires_grad_()

    def step(t):
        return (triton_selu.selu_triton(t) * 2).sum()

    compiled = torch.compile(step, fullgraph=True)
    (compiled_grad,) = torch.autograd.grad(compiled(x), x)
    (eager_grad,) = torch.autograd.grad(step(x), x)
    assert check.agreement(compiled_grad, eager_grad).identical == x.numel()
    y = torch.compile(triton_selu.selu_triton, fullgraph=True)(x.detach())
    # On a GPU the compiled graph launches the same Triton kernel; on the CPU the operator
    # decomposes to torch.selu, which the compiler generates code for itself (in torch 2.13
    # as exp(x) - 1, which cancels near 0): there it must equal compiled torch.selu.
    expected = triton_selu.selu_triton(x.detach()) if device == "cuda" else torch.compile(torch.selu)(x.detach())
    assert check.agreement(y, expected).identical == x.numel()


@needs_triton
@pytest.mark.parametrize("dtype", NON_FLOATING_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("device", (*DEVICES, "meta"))
def test_bad_dtype_is_a_clear_error(device, dtype):
    x = torch.zeros(8, device=device).to(dtype)
    with pytest.raises(RuntimeError, match=f"selu_course::selu_triton: {NOT_FLOATING_ERROR}"):
        triton_selu.selu_triton(x)
    with pytest.raises(RuntimeError, match=f"selu_course::selu_triton_backward: {NOT_FLOATING_ERROR}"):
        triton_selu.selu_triton_backward(x, x)


@needs_triton
@pytest.mark.parametrize("device", (*DEVICES, "meta"))  # meta: the fake kernel says it too
def test_mismatched_backward_is_a_clear_error(device):
    x = torch.zeros(8, device=device)
    others = [torch.zeros(9, device=device), torch.zeros(8, device=device, dtype=torch.float64),
              torch.zeros(2, 4, device=device)]
    if device == "cuda":
        others.append(torch.zeros(8))  # on the CPU
    for grad in others:
        with pytest.raises(RuntimeError, match=r"grad is .* but the saved input is .*; both must match the forward's"):
            triton_selu.selu_triton_backward(grad, x)


# ---- on a GPU: the Triton kernels ----------------------------------------------------------------


@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_gpu_identical_to_torch(dtype):
    x = check.harness_input(100_003, dtype, "cuda", seed=12)  # special values, subnormals, every distribution
    grad = grad_like(x, seed=13)
    if dtype == torch.float64:  # Triton's libdevice and torch's CUDA math library: allow an ulp in float64
        match = check.agreement(triton_selu.selu_triton(x), torch.selu(x))
        assert match.within(1), str(match)
        nan = x.isnan()
        match = check.agreement(triton_selu.selu_triton_backward(grad, x)[~nan], torch_backward(grad, x)[~nan])
        assert match.within(1), str(match)
    else:
        assert_identical_to_torch(x, grad)


@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_id)
def test_gpu_every_16_bit_input(dtype):
    x = check.every_16_bit_value(dtype, "cuda")
    check.assert_selu(triton_selu.selu_triton(x), x)
    for grad in [torch.full_like(x, value) for value in GRADS] + [grad_like(x, seed=14)]:
        check.assert_selu_backward(triton_selu.selu_triton_backward(grad, x), "selu_backward", grad, x, x)
        assert_identical_to_torch(x, grad)


@needs_triton
@pytest.mark.gpu
def test_gpu_more_than_2_to_the_31_elements():
    torch.cuda.empty_cache()
    if not env.fits_on_gpu(BIG_NUMEL, torch.float16, tensors=5):  # x, grad, two results, a mask
        pytest.skip(f"needs {5 * BIG_NUMEL * 2 / 2**30:.0f} GiB of free GPU memory")
    x = torch.randn(BIG_NUMEL, device="cuda", dtype=torch.float16, generator=torch.Generator("cuda").manual_seed(0))
    grad = torch.full_like(x, -0.75)
    y, grad_in = triton_selu.selu_triton(x), triton_selu.selu_triton_backward(grad, x)
    assert not y.isnan().any() and not grad_in.isnan().any(), "elements never written (still NaN from the poisoning)"
    for part in (slice(0, 4096), slice(2**31 - 2048, 2**31 + 2048), slice(BIG_NUMEL - 4096, BIG_NUMEL)):
        check.assert_selu(y[part], x[part])
        check.assert_selu_backward(grad_in[part], "selu_backward", grad[part], x[part], x[part])
    del x, grad, y, grad_in
    torch.cuda.empty_cache()
