"""The C++ entry of notebook 05 (kernels/selu_entry.cpp): ``ops.selu_vectorized`` through a
pybind11 binding instead of ``torch.ops``.

* With the entry on, a plain tensor in eager mode goes through it, and results are the
  operator's, checked by the harness in every dtype.
* It calls the operator from the top of the dispatcher, so the autograd rule in place
  (Python or C++) records the gradient, and the refusing rule still refuses: no gradient
  is dropped on this path.
* Under ``torch.compile(fullgraph=True)``, and for a tensor subclass with
  ``__torch_function__``, ``ops.selu_vectorized`` calls ``torch.ops``: no graph break, and
  the subclass sees the operator.
* Bad input gets the operator's own error.

No timings here: what the entry saves per call is measured in notebook 05.
"""
from __future__ import annotations

import gc

import pytest
import torch

from helpers import build, check, ops


@pytest.fixture(scope="module", autouse=True)
def registered():
    return [build.load(kernel) for kernel in ("selu_vectorized", "selu_backward")]  # and CUDA, on a GPU


@pytest.fixture(autouse=True)
def entry_and_rule():
    """Each test runs with the entry on, and leaves the entry and rule it found."""
    before_entry, before_rule = ops.uses_cpp_entry(), ops.autograd_rule("selu_vectorized")
    ops.use_cpp_entry()
    yield
    gc.collect()
    ops.use_cpp_entry(before_entry)
    ops.disable_backward() if before_rule == "refuses" else ops.enable_backward(rule=before_rule)


@pytest.fixture
def entry_calls(monkeypatch):
    """Counts the calls that go through the entry."""
    calls = []
    real = ops._cpp_entry

    def counted(x):
        calls.append(x)
        return real(x)

    monkeypatch.setattr(ops, "_cpp_entry", counted)
    return calls


DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", check.DTYPES, ids=str)
def test_results_pass_the_harness_through_the_entry(dtype, device, entry_calls):
    report = check.check_unary(ops.selu_vectorized, dtype=dtype, device=device, trials=2, seed=3)
    assert report.passed, report
    assert entry_calls, "the harness's calls did not go through the entry"


def test_off_means_torch_ops(entry_calls):
    ops.use_cpp_entry(False)
    ops.selu_vectorized(torch.randn(8))
    assert not ops.uses_cpp_entry() and not entry_calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ops.AUTOGRAD_RULES)
def test_gradients_flow_through_the_entry_under_either_rule(rule, device, entry_calls):
    ops.enable_backward(rule=rule)
    x = torch.randn(1031, dtype=torch.float64, device=device) * 4
    grad = torch.randn_like(x)
    leaf = x.clone().requires_grad_()
    (ours,) = torch.autograd.grad(ops.selu_vectorized(leaf), leaf, grad)
    reference = x.clone().requires_grad_()
    (theirs,) = torch.autograd.grad(torch.selu(reference), reference, grad)
    assert entry_calls
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=0)


def test_the_refusing_rule_still_refuses_through_the_entry(entry_calls):
    ops.disable_backward()
    with pytest.raises(RuntimeError, match="backward"):
        ops.selu_vectorized(torch.randn(8, requires_grad=True))
    assert entry_calls


def test_compiled_code_calls_torch_ops_with_no_graph_break(entry_calls):
    ops.enable_backward(rule="cpp")
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: ops.selu_vectorized(t) * 2, fullgraph=True, backend="aot_eager")
    x = torch.randn(257)
    assert torch.equal(compiled(x), torch.ops.selu_course.selu_vectorized.default(x) * 2)
    assert not entry_calls, "the compiled graph called the pybind11 entry"


class Recording(torch.Tensor):
    """A tensor subclass whose __torch_function__ records what is called on it."""

    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_subclass_with_torch_function_sees_the_operator(entry_calls):
    Recording.seen = []
    x = torch.randn(16).as_subclass(Recording)
    y = ops.selu_vectorized(x)
    assert torch.ops.selu_course.selu_vectorized.default in Recording.seen
    assert torch.equal(y.as_subclass(torch.Tensor),
                       torch.ops.selu_course.selu_vectorized.default(x.as_subclass(torch.Tensor)))
    assert not entry_calls


def test_bad_input_gets_the_operators_error(entry_calls):
    with pytest.raises(RuntimeError, match="expected a float32, float64, float16 or bfloat16 tensor"):
        ops.selu_vectorized(torch.arange(4))
    assert entry_calls
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor'"):
        ops.selu_vectorized([1.0, 2.0])  # not a tensor: torch.ops' own error


def test_the_entry_is_built_and_imported_once(monkeypatch):
    """Switching the entry on and off (notebook 05 does it every round) must not run the
    extension builder again, which checks the build with ninja each time."""
    import torch.utils.cpp_extension

    first = build.load_entry()
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **_: pytest.fail("the entry was loaded again"))
    assert build.load_entry() is first
    ops.use_cpp_entry()
