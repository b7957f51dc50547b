"""The backward operators of notebook 04 on the CPU (kernels/selu_backward_cpu.cpp), and the
autograd rules that use them.

* ``selu_backward(grad, x)`` and ``selu_backward_from_output(grad, y)`` against their
  float64 references (:mod:`helpers.check`) in every dtype, on inputs of both signs,
  special values and large negatives; every float16 and bfloat16 input exhaustively;
  against torch's own backward.
* They never write into ``grad``: autograd may hand one gradient buffer to several
  backward functions.
* ``opcheck`` for both, ``gradcheck`` and ``gradgradcheck`` (double backward) in float64.
* ``ops.enable_backward()`` gives the forward operators a real gradient (gradcheck,
  torch.compile with a backward) and ``ops.disable_backward()`` restores the rule that
  refuses one, which notebooks 02 and 03 rely on.

On a GPU (``gpu`` marker) the same checks run on kernels/selu_backward.cu, and its result
is compared with torch's own CUDA backward.
"""
from __future__ import annotations

import pytest
import torch

from helpers import build, check, ops

SAMPLE = 1 << 16
GRADS = (1.0, -0.75, 3.5e-3, 1e4)  # a few gradient values for the exhaustive 16-bit tests


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


pytestmark = pytest.mark.usefixtures("poisoned")  # tests/conftest.py

@pytest.fixture(scope="module", autouse=True)
def registered():
    return [build.load(kernel, backend="cpu") for kernel in ("selu_vectorized", "selu_naive", "selu_backward", "mistakes")]



def saved_for(name: str, x: torch.Tensor) -> torch.Tensor:
    """What the forward saves: x itself, or y = selu(x) for the from-output form."""
    return x if name == "selu_backward" else torch.selu(x)


def grad_like(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.dtype)


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_matches_the_float64_reference(name, dtype):
    x = check.harness_input(SAMPLE, dtype, "cpu", seed=3)
    grad, saved = grad_like(x), saved_for(name, x)
    check.assert_selu_backward(ops.overload(name)(grad, saved), name, grad, saved, x)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_id)
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_every_16_bit_input(name, dtype):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)  # all 65,536 patterns
    saved = saved_for(name, x)
    for value in GRADS:
        grad = torch.full_like(x, value)
        check.assert_selu_backward(ops.overload(name)(grad, saved), name, grad, saved, x)


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_agrees_with_torchs_own_backward(dtype):
    x = check.harness_input(SAMPLE, dtype, "cpu", seed=4)
    grad = grad_like(x, seed=5)
    leaf = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(torch.selu(leaf), leaf, grad)
    # torch's CPU exp (a vectorized polynomial) and the C library's differ by ulps in
    # float32 and float64; rounded to 16 bits the two agree.
    tolerance = 1 if dtype in (torch.float16, torch.bfloat16) else 2 * check.BACKWARD_MAX_ULP[dtype]
    check.assert_close_ulps(ops.selu_backward(grad, x), expected, x, tolerance)


def test_from_output_loses_only_what_the_rounding_of_y_hides():
    # From y, lambda*alpha*e^x is y + lambda*alpha: for x near 0 that is as good as from x;
    # for x << 0, y is within rounding of -lambda*alpha and the sum keeps about
    # eps * lambda*alpha of absolute error, e^-x times the derivative's own size.
    eps = torch.finfo(torch.float64).eps
    near = torch.linspace(-1, 8, 2001, dtype=torch.float64)
    grad = grad_like(near)
    check.assert_close_ulps(ops.selu_backward_from_output(grad, torch.selu(near)), ops.selu_backward(grad, near), near, 16)
    far = torch.linspace(-30, -1, 2001, dtype=torch.float64)
    grad = torch.ones_like(far)
    from_y, from_x = ops.selu_backward_from_output(grad, torch.selu(far)), ops.selu_backward(grad, far)
    relative = ((from_y - from_x) / from_x).abs()
    assert (relative <= 8 * eps * torch.exp(-far)).all(), relative.max()
    assert relative[:100].max() > 1e3 * eps  # and the loss is real: far out, thousands of ulps


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_never_writes_into_the_incoming_gradient(name):
    x = check.harness_input(4096, torch.float32, "cpu", seed=6)
    grad = grad_like(x)
    before = grad.clone()
    result = ops.overload(name)(grad, saved_for(name, x))
    assert result.data_ptr() != grad.data_ptr()
    assert torch.equal(grad.view(torch.int32), before.view(torch.int32))


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_layouts_of_grad_and_saved_may_differ(name):
    x = check.harness_input(64 * 48, torch.float32, "cpu", seed=7).reshape(64, 48)
    saved = saved_for(name, x).t()  # dense, transposed
    grad = grad_like(saved).contiguous()  # the same values, another layout
    result = ops.overload(name)(grad, saved)
    assert result.stride() == saved.stride()  # laid out as the saved tensor
    check.assert_selu_backward(result, name, grad, saved, saved)


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_mismatched_grad_is_a_clear_error(name):
    x = torch.randn(8)
    with pytest.raises(RuntimeError, match="grad has shape .* but the saved tensor has shape"):
        ops.overload(name)(torch.randn(9), x)
    with pytest.raises(RuntimeError, match="grad is Double but the saved tensor is Float"):
        ops.overload(name)(torch.randn(8, dtype=torch.float64), x)
    with pytest.raises(RuntimeError, match="expected a float32, float64, float16 or bfloat16"):
        ops.overload(name)(torch.ones(8, dtype=torch.int32), torch.ones(8, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="must match the forward result"):  # the fake kernel says it too
        ops.overload(name)(torch.empty(9, device="meta"), torch.empty(8, device="meta"))


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_opcheck(name, dtype):
    x = check.harness_input(37 * 29, dtype, "cpu", seed=8).reshape(37, 29)
    x = torch.where(x.isnan(), 0, x)  # opcheck compares with assert_close, to which NaN != NaN
    grad, saved = grad_like(x), saved_for(name, x)
    torch.library.opcheck(ops.overload(name), (grad, saved),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    grad_g, saved_g = grad.double().requires_grad_(), saved.double().requires_grad_()
    torch.library.opcheck(ops.overload(name), (grad_g, saved_g), test_utils=("test_autograd_registration",))


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_gradcheck_and_double_backward(name):
    g = torch.Generator().manual_seed(9)
    x = torch.randn(40, generator=g, dtype=torch.float64)
    x = x[x.abs() > 1e-3]  # the derivative jumps at 0: gradcheck must not sample across it
    saved = saved_for(name, x).requires_grad_()
    grad = torch.randn(x.shape, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ops.overload(name), (grad, saved))
    assert torch.autograd.gradgradcheck(ops.overload(name), (grad, saved))


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_a_nan_takes_the_exp_branch_at_every_order(name):
    """The rules test x > 0 (y > 0) as the forward does, so a NaN takes the exp branch through the
    gradient of the gradient too (testing x <= 0 would send it to the other branch's 0)."""
    x = torch.tensor([float("nan"), -1.5, 2.0], dtype=torch.float64)
    saved = saved_for(name, x).requires_grad_()
    grad = torch.ones_like(x, requires_grad=True)
    grad_in = ops.overload(name)(grad, saved)
    d_grad, d_saved = torch.autograd.grad(grad_in.sum(), (grad, saved))
    assert grad_in[0].isnan() and d_grad[0].isnan() and not torch.cat([grad_in, d_grad, d_saved])[1:3].isnan().any()
    # From x, the exp branch's d/dx is grad * lambda*alpha*e^x: NaN. From y, grad * (y + lambda*alpha)
    # has d/dy = grad whatever y is: 1 here, where the x > 0 branch has 0.
    assert d_saved[0].isnan() if name == "selu_backward" else d_saved[0] == 1


@pytest.fixture
def backward_enabled():
    ops.enable_backward()
    try:
        yield
    finally:
        ops.disable_backward()


def test_enable_backward_gives_the_forward_operators_a_gradient(backward_enabled):
    g = torch.Generator().manual_seed(10)
    x = torch.randn(50, generator=g, dtype=torch.float64)
    x = x[x.abs() > 1e-3].requires_grad_()
    assert torch.autograd.gradcheck(ops.selu_vectorized, (x,))
    assert torch.autograd.gradgradcheck(ops.selu_vectorized, (x,))
    assert torch.autograd.gradcheck(lambda t: ops.selu_vectorized_with_config(t, 128, 2, 0), (x,))
    x32 = x.detach().float().requires_grad_()
    (ours,) = torch.autograd.grad(ops.selu_naive(x32).sum(), x32)
    assert torch.equal(ours, ops.selu_backward(torch.ones_like(x32), x32.detach()))
    with pytest.raises(RuntimeError, match="no backward yet"):  # the mistakes keep refusing
        ops.mistake_missing_minus_one(x32)


def test_enable_backward_compiles_with_its_backward(backward_enabled):
    torch._dynamo.reset()
    x = check.harness_input(1000, torch.float32, "cpu", seed=11)
    x = torch.where(x.isfinite(), x, 0).clamp(-50, 50).requires_grad_()
    step = torch.compile(lambda t: (ops.selu_vectorized(t) * 2).sum(), fullgraph=True)
    step(x).backward()
    expected = ops.selu_backward(torch.full_like(x, 2.0), x.detach())
    check.assert_close_ulps(x.grad, expected, x.detach(), 1)


def test_enable_backward_without_the_backward_kernels_says_what_to_load():
    library = build.loaded_library(build.KERNELS["selu_backward"].cpu_source)
    build.unload(library)
    try:
        with pytest.raises(RuntimeError, match=r"not loaded for CPU.*build\.load\('selu_backward'\) first"):
            ops.enable_backward()
        with pytest.raises(RuntimeError, match=r"build\.load\('selu_backward'\) first"):
            ops.enable_backward(rule="cpp")
        assert ops.autograd_rule("selu_vectorized") == "refuses"  # nothing changed
    finally:
        build.load("selu_backward")
    ops.enable_backward()
    ops.disable_backward()


def test_disable_backward_refuses_again():
    ops.enable_backward()
    ops.disable_backward()
    with pytest.raises(RuntimeError, match="no backward yet.*[Nn]otebook 04"):
        ops.selu_vectorized(torch.randn(4, requires_grad=True))


# ---- on a GPU: kernels/selu_backward.cu ----------------------------------------------------


@pytest.fixture(scope="module")
def on_gpu():
    return [build.load(kernel, backend="cuda") for kernel in ("selu_vectorized", "selu_backward")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_cuda_matches_the_reference_in_every_layout(on_gpu, name, dtype):
    base = check.harness_input(SAMPLE + 3, dtype, "cuda", seed=12)
    for x in (base, base[1:], base[:64 * 48].reshape(64, 48).t()):  # aligned, misaligned, transposed
        grad, saved = grad_like(x.cpu()).to("cuda"), saved_for(name, x)
        result = ops.overload(name)(grad, saved)
        assert result.is_cuda and result.stride() == saved.stride()
        check.assert_selu_backward(result, name, grad, saved, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_id)
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_cuda_every_16_bit_input(on_gpu, name, dtype):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).cuda()
    saved = saved_for(name, x)
    for value in GRADS:
        grad = torch.full_like(x, value)
        check.assert_selu_backward(ops.overload(name)(grad, saved), name, grad, saved, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_cuda_agrees_with_torchs_own_backward(on_gpu, dtype):
    # On the GPU both call CUDA's exp on the same value in the same math type. NaN inputs
    # are compared apart: here they give NaN, as in the forward pass.
    x = check.harness_input(SAMPLE, dtype, "cuda", seed=13)
    x = x[~x.isnan()]
    grad = grad_like(x.cpu(), seed=14).cuda()
    leaf = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(torch.selu(leaf), leaf, grad)
    match = check.agreement(ops.selu_backward(grad, x), expected)
    assert match.within(1), str(match)
    nan = torch.tensor([float("nan")], dtype=dtype, device="cuda")
    assert ops.selu_backward(torch.ones_like(nan), nan).isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_cuda_never_writes_into_the_incoming_gradient_and_passes_opcheck(on_gpu, name):
    x = check.harness_input(4096, torch.float32, "cuda", seed=15)
    x = torch.where(x.isnan(), 0, x)
    grad = grad_like(x.cpu()).cuda()
    before = grad.clone()
    result = ops.overload(name)(grad, saved_for(name, x))
    assert result.data_ptr() != grad.data_ptr() and torch.equal(grad, before)
    torch.library.opcheck(ops.overload(name), (grad, saved_for(name, x)),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.gpu
def test_cuda_gradients_with_the_backward_enabled(on_gpu, backward_enabled):
    g = torch.Generator().manual_seed(16)
    x = torch.randn(64, generator=g, dtype=torch.float64)
    x = x[x.abs() > 1e-3].cuda().requires_grad_()
    assert torch.autograd.gradcheck(ops.selu_vectorized, (x,))
    assert torch.autograd.gradgradcheck(ops.selu_vectorized, (x,))


# ---- the in-place operator: selu_vectorized_ (Tensor(a!) x) -> () -------------------------


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_in_place_writes_what_the_functional_operator_returns(dtype):
    x = check.harness_input(4099, dtype, "cpu", seed=30)
    t = x.clone()
    version = t._version
    assert ops.selu_vectorized_(t) is t
    assert t._version > version  # a saved copy of the old t must be seen as stale
    assert torch.equal(t.view(-1).view(torch.uint8), ops.selu_vectorized(x).view(-1).view(torch.uint8))


def test_in_place_refuses_a_gradient_until_the_backward_is_enabled():
    with pytest.raises(RuntimeError, match="selu_vectorized_ has no backward yet"):
        ops.selu_vectorized_(torch.randn(4, requires_grad=True) * 2)


def test_in_place_gradient_reads_the_saved_output(backward_enabled):
    x = torch.randn(64, generator=torch.Generator().manual_seed(31), dtype=torch.float64)
    x = x[x.abs() > 1e-3].requires_grad_()

    def f(t):
        return ops.selu_vectorized_(t * 1.5)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))
    h = x.detach() * 1.5
    (ours,) = torch.autograd.grad(f(x), x, torch.ones_like(x))
    expected = 1.5 * ops.selu_backward_from_output(torch.ones_like(h), ops.selu_vectorized(h))
    assert torch.equal(ours, expected)


def test_in_place_on_a_leaf_is_torchs_error(backward_enabled):
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad .* in-place operation"):
        ops.selu_vectorized_(torch.randn(4, requires_grad=True))


@pytest.mark.parametrize("grad_mode", (True, False), ids=("grad", "no_grad"))
def test_in_place_invalidates_a_tensor_saved_before_it(backward_enabled, grad_mode):
    x = torch.randn(8, requires_grad=True)
    h = x * 2
    square = h * h  # saves h for its backward
    with torch.set_grad_enabled(grad_mode):
        ops.selu_vectorized_(h)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        square.sum().backward()


def in_place_network(selu_in_place, seed: int = 0):
    """A small network with an in-place SELU after each hidden layer: its loss and every
    parameter's gradient."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)]
    h = torch.randn(256, 16, generator=torch.Generator().manual_seed(seed + 1))
    for layer in layers[:-1]:
        h = layer(h)
        selu_in_place(h)
    loss = layers[-1](h).square().mean()
    loss.backward()
    return loss.detach(), [p.grad for layer in layers for p in layer.parameters()]


def test_in_place_network_matches_torch(backward_enabled):
    loss_torch, grads_torch = in_place_network(torch.selu_)
    loss_course, grads_course = in_place_network(ops.selu_vectorized_)
    # A CPU's expm1 rounds apart from torch's vectorized one by ulps, depending on the CPU's vector
    # instructions (bit-identical on one machine, not on another): the loss to within float32 rounding.
    torch.testing.assert_close(loss_course, loss_torch, rtol=1e-6, atol=0)
    for ours, theirs in zip(grads_course, grads_torch):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6 * float(theirs.abs().max()))


def test_in_place_compiles_into_one_graph_with_eager_results(backward_enabled):
    def step(x):
        h = x * 2.0  # a non-leaf, as inside a network
        ops.selu_vectorized_(h)
        return h

    torch._dynamo.reset()
    x = check.harness_input(1031, torch.float32, "cpu", seed=12)
    x = torch.where(x.isfinite(), x, 0).clamp(-50, 50)
    results = []
    for run in (step, torch.compile(step, fullgraph=True)):  # fullgraph: one graph, no break
        leaf = x.clone().requires_grad_()
        y = run(leaf)
        y.backward(torch.ones_like(y))
        results.append((y.detach(), leaf.grad))
    (y_eager, grad_eager), (y_compiled, grad_compiled) = results
    assert torch.equal(y_compiled, y_eager) and torch.equal(grad_compiled, grad_eager)


def test_in_place_opcheck():
    x = check.harness_input(37 * 29, torch.float32, "cpu", seed=32).reshape(37, 29)
    x = torch.where(x.isnan(), 0, x)
    torch.library.opcheck(ops.overload("selu_vectorized_"), (x,))


@pytest.mark.parametrize("dtype", (torch.int32, torch.float8_e4m3fn), ids=dtype_id)
def test_in_place_refuses_what_the_functional_operator_refuses(dtype):
    x = torch.zeros(8).to(dtype)
    with pytest.raises(RuntimeError, match="expected a float32, float64, float16 or bfloat16"):
        ops.selu_vectorized_(x)
    with pytest.raises(RuntimeError, match="expected a float32, float64, float16 or bfloat16"):
        ops.selu_vectorized_(torch.empty(8, dtype=dtype, device="meta"))


def test_in_place_refuses_an_expanded_tensor():
    with pytest.raises(RuntimeError, match="share one memory location"):
        ops.selu_vectorized_(torch.randn(1, 4).expand(3, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
def test_cuda_in_place_every_layout_and_its_gradient(on_gpu, backward_enabled, dtype):
    base = check.harness_input(SAMPLE + 3, dtype, "cuda", seed=33)
    for x in (base, base[1:], base[:64 * 48].reshape(64, 48).t()):  # aligned, misaligned, transposed
        t = x.clone()
        ops.selu_vectorized_(t)
        assert torch.equal(t.view(torch.uint8) if t.is_contiguous() else t.contiguous().view(torch.uint8),
                           torch.selu(x).contiguous().view(torch.uint8))
    x = torch.where(base.isfinite(), base, 0).requires_grad_()
    grad = grad_like(x.detach().cpu()).cuda()
    (ours,) = torch.autograd.grad(ops.selu_vectorized_(x * 1), x, grad)
    (theirs,) = torch.autograd.grad(torch.selu_(x * 1), x, grad)
    match = check.agreement(ours, theirs)
    assert match.within(1), str(match)
    torch.library.opcheck(ops.overload("selu_vectorized_"), (torch.where(base.isnan(), 0, base).clone(),))
