"""The C++ autograd rule of notebook 05 (kernels/selu_autograd.cpp), against the Python one.

* ``ops.enable_backward(rule="cpp")`` gives selu_vectorized and selu_vectorized_with_config
  the C++ rule, whose results and gradients are the Python rule's, bit for bit, in every
  dtype; it passes ``gradcheck``, ``gradgradcheck`` (the double backward goes through
  selu_backward's own rule), ``opcheck`` and ``torch.compile(fullgraph=True)``.
* It records nothing for a tensor that does not require grad, saves only x, and the
  dispatcher's Autograd kernel is then the C++ function of that file, not a Python one.
* Switching between the rules (and to the refusing one) leaves the rule that
  ``ops.autograd_rule`` reports, and the C++ library is not unloaded while a graph node
  made by its code is alive (freeing that node afterwards would crash the process).

No timings here: what the C++ rule saves per call is measured in notebook 05.
"""
from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from helpers import build, check, env, ops

CPP_OPERATORS = ("selu_vectorized", "selu_vectorized_with_config")
CONFIG = (128, 2, 0)  # a launch configuration for selu_vectorized_with_config (the CPU ignores it)


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@pytest.fixture(scope="module", autouse=True)
def registered():
    # selu_backward for every device: ops.enable_backward needs it wherever a forward kernel is
    # (another test module may have loaded selu_vectorized's CUDA kernels).
    return [build.load("selu_vectorized", backend="cpu"), build.load("selu_backward")]


@pytest.fixture(autouse=True)
def restore_the_rule():
    """Each test leaves the rule it found (for the other test files: the default, the C++ rule refusing)."""
    before = ops.autograd_rule("selu_vectorized")
    yield
    gc.collect()  # graphs of the C++ rule kept by reference cycles would keep its library loaded
    ops.enable_backward(rule="cpp" if before == "refuses" else before)
    if before == "refuses":
        ops.disable_backward()


def set_rule(rule: str) -> None:
    if rule == "refuses":
        ops.disable_backward()
    else:
        ops.enable_backward(rule=rule)


def call(name: str, x: torch.Tensor) -> torch.Tensor:
    return ops.overload(name)(x, *CONFIG) if name.endswith("with_config") else ops.overload(name)(x)


def result_and_gradient(name: str, x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = x.clone().requires_grad_()
    y = call(name, leaf)
    y.backward(grad)
    return y.detach(), leaf.grad


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def autograd_kernel(name: str) -> str:
    """The dispatcher's line for the Autograd kernel of ``name``, e.g.
    ``Autograd[alias]: registered at <file>:<line> :: <signature> [ boxed unboxed ]``. There is
    exactly one: a second one registered over it would show as ``Autograd[alias] (inactive): ...``."""
    lines = [line for line in torch._C._dispatch_dump(ops.qualified(name)).splitlines()
             if line.startswith("Autograd[alias]")]
    assert len(lines) == 1 and lines[0].startswith("Autograd[alias]:"), lines
    return lines[0]


def assert_rule(rule: str, in_cpp: bool | None = None) -> None:
    """``ops.autograd_rule`` says ``rule`` for the C++ rule's operators, and the dispatcher agrees: its
    kernel is the C++ function where ``in_cpp`` (by default, where the rule is ``"cpp"``)."""
    for name in CPP_OPERATORS:
        assert ops.autograd_rule(name) == rule, name
        line = autograd_kernel(name)
        if rule == "cpp" if in_cpp is None else in_cpp:
            # A C++ function has an unboxed entry (called with C++ arguments); a Python kernel is boxed only.
            assert re.search(r"registered at \S*kernels[/\\]selu_autograd\.cpp:\d+ ", line), line
            assert "unboxed" in line, line
        else:  # a Python rule, of the library that helpers/schemas.py makes for the rules
            assert re.search(r"registered at \S*helpers[/\\]schemas\.py:\d+ ", line), line
            assert "unboxed" not in line, line


# ----------------------------------------------------------------------------- the same rule


@pytest.mark.parametrize("dtype", check.DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", CPP_OPERATORS)
def test_results_and_gradients_are_the_python_rules_bit_for_bit(name, dtype):
    # Special values, then normal, wide, tiny, huge and large negative inputs of both signs.
    x = check.harness_input(4096, dtype, "cpu", seed=21)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(22), dtype=torch.float64).to(dtype)
    ops.enable_backward(rule="python")
    y_python, grad_python = result_and_gradient(name, x, grad)
    ops.enable_backward(rule="cpp")
    y_cpp, grad_cpp = result_and_gradient(name, x, grad)
    assert torch.equal(bits(y_cpp), bits(y_python))
    assert torch.equal(bits(grad_cpp), bits(grad_python))
    assert torch.equal(bits(grad_cpp), bits(ops.selu_backward(grad, x)))


def test_gradcheck_and_double_backward():
    ops.enable_backward(rule="cpp")
    g = torch.Generator().manual_seed(23)
    x = torch.randn(50, generator=g, dtype=torch.float64)
    x = x[x.abs() > 1e-3].requires_grad_()  # the derivative jumps at 0: gradcheck must not sample across it
    for name in CPP_OPERATORS:
        assert torch.autograd.gradcheck(lambda t: call(name, t), (x,))
        assert torch.autograd.gradgradcheck(lambda t: call(name, t), (x,))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("name", CPP_OPERATORS)
def test_opcheck(name, requires_grad):
    ops.enable_backward(rule="cpp")
    x = check.harness_input(37 * 29, torch.float64, "cpu", seed=24).reshape(37, 29)
    x = torch.where(x.isfinite(), x, 0).requires_grad_(requires_grad)  # opcheck's assert_close: NaN != NaN
    args = (x, *CONFIG) if name.endswith("with_config") else (x,)
    torch.library.opcheck(ops.overload(name), args)


def test_compiles_into_one_graph_with_eager_results():
    ops.enable_backward(rule="cpp")
    torch._dynamo.reset()
    x = check.harness_input(1000, torch.float32, "cpu", seed=25)
    x = torch.where(x.isfinite(), x, 0).clamp(-50, 50)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(26))
    step = torch.compile(lambda t: ops.selu_vectorized(t) * 2, fullgraph=True)
    compiled_leaf, eager_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled, eager = step(compiled_leaf), ops.selu_vectorized(eager_leaf) * 2
    compiled.backward(grad)
    eager.backward(grad)
    assert torch.equal(bits(compiled.detach()), bits(eager.detach()))
    assert torch.equal(bits(compiled_leaf.grad), bits(eager_leaf.grad))
    # Dynamo keeps the fake results it traced, grad_fn and all, for as long as it keeps the
    # compiled code: the C++ rule's library may be unloaded only once they are gone.
    del compiled, eager
    torch._dynamo.reset()
    assert build.objects_alive(build.loaded_library("selu_autograd.cpp")) == 0


@pytest.mark.parametrize("name", CPP_OPERATORS)
def test_records_nothing_where_no_gradient_is_wanted(name):
    ops.enable_backward(rule="cpp")
    x = torch.randn(100)
    y = call(name, x)
    assert not y.requires_grad and y.grad_fn is None
    leaf = x.clone().requires_grad_()
    with torch.no_grad():
        assert not call(name, leaf).requires_grad
    with torch.inference_mode():
        assert not call(name, leaf).requires_grad
    assert torch.equal(y, torch.ops.selu_course.selu_vectorized(x))
    assert call(name, leaf).requires_grad


def python_frames_during(fn) -> set[str]:
    """The files of every Python function that ``fn()`` calls, below ``fn`` itself."""
    import sys

    files: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            files.add(frame.f_code.co_filename.replace("\\", "/"))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return files


def test_a_first_order_backward_runs_no_python():
    """The backward of the C++ rule calls selu_backward below its autograd key when no
    gradient of the gradient is wanted: that key's kernel is a Python rule (the double
    backward), which would run, and take the GIL, on every backward. With
    ``create_graph=True`` it must run, and the gradient of the gradient is recorded."""
    ops.enable_backward(rule="cpp")
    leaf = torch.randn(100, requires_grad=True)
    y = ops.selu_vectorized(leaf)
    grad = torch.randn(100)
    files = python_frames_during(lambda y=y: torch.autograd.grad(y, leaf, grad, retain_graph=True))
    assert not [f for f in files if "torch/_library/" in f], sorted(files)
    (first,) = torch.autograd.grad(y, leaf, grad, create_graph=True)
    assert first.grad_fn is not None  # through selu_backward's own rule
    assert torch.equal(first.detach(), ops.selu_backward(grad, leaf.detach()))
    del y, first  # graph nodes of the C++ library: gone before the fixture switches rules


@pytest.mark.parametrize("rule", ops.AUTOGRAD_RULES)
def test_saves_only_x_as_the_python_rule_does(rule):
    ops.enable_backward(rule=rule)
    x = torch.randn(100, dtype=torch.float64, requires_grad=True)
    y = ops.selu_vectorized(x)
    y.mul_(3)  # the output may change: the backward does not read it
    y.sum().backward()
    assert torch.equal(x.grad, ops.selu_backward(torch.full_like(x, 3.0), x.detach()))
    leaf = x.detach().clone().requires_grad_()
    base = leaf * 1
    y = ops.selu_vectorized(base)
    base.add_(1)  # but the input it saved may not: autograd says so instead of a wrong gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ----------------------------------------------------------------------------- which rule is in force


def test_the_autograd_kernel_is_the_cpp_function():
    ops.enable_backward(rule="python")
    assert_rule("python")
    ops.enable_backward(rule="cpp")
    assert_rule("cpp")
    # One kernel for the Autograd alias key serves every device's autograd key, CUDA's included.
    table = torch._C._dispatch_dump_table(ops.qualified("selu_vectorized"))
    for key in ("AutogradCPU", "AutogradCUDA"):
        assert re.search(rf"^{key}: registered at \S*kernels[/\\]selu_autograd\.cpp:\d+ \[autograd kernel\]",
                         table, re.MULTILINE), table


def test_switching_back_and_forth_leaves_the_rule_the_query_says():
    x = torch.randn(8, requires_grad=True)
    chosen = "cpp"
    for rule in ("python", "cpp", "cpp", "refuses", "cpp", "python", "refuses", "python", "cpp"):
        set_rule(rule)
        chosen = chosen if rule == "refuses" else rule  # refusing keeps the rule's kernel, and refuses in it
        assert_rule(rule, in_cpp=chosen == "cpp")  # and one Autograd kernel: none was registered over another
        assert ops.autograd_rule("selu_naive") == ("refuses" if rule == "refuses" else "python")
        assert ops.autograd_rule("mistake_int32_count") == "refuses"
        if rule == "refuses":
            with pytest.raises(RuntimeError, match="no backward yet"):
                ops.selu_vectorized(x)
        else:
            (grad,) = torch.autograd.grad(ops.selu_vectorized(x).sum(), x)
            assert torch.equal(grad, ops.selu_backward(torch.ones_like(x), x.detach()))


def test_its_library_stays_loaded_while_a_graph_node_of_it_is_alive():
    ops.enable_backward(rule="cpp")
    library = build.loaded_library("selu_autograd.cpp")
    x = torch.randn(8, requires_grad=True)
    y = ops.selu_vectorized(x)
    assert build.objects_alive(library) == 1
    with pytest.raises(build.BuildError, match=r"cannot be unloaded yet: 1 autograd graph node.*del y"):
        ops.enable_backward(rule="python")
    assert_rule("cpp")  # nothing changed
    y.sum().backward()  # and the graph still runs
    del y
    assert build.objects_alive(library) == 0
    ops.enable_backward(rule="python")
    assert_rule("python")
    assert build.loaded_library("selu_autograd.cpp") is None


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="rule must be one of 'python', 'cpp', not 'c'"):
        ops.enable_backward(rule="c")


def test_a_fresh_load_puts_the_fast_path_in_place():
    """What a learner gets from ``build.load("selu_vectorized")``: the C++ rule, refusing a gradient
    until ``enable_backward()`` (then differentiating), and the C++ entry; in a process of its own."""
    script = textwrap.dedent("""
        import re, torch
        from helpers import build, ops
        build.load("selu_vectorized", backend="cpu")
        table = torch._C._dispatch_dump_table("selu_course::selu_vectorized")
        assert re.search(r"^AutogradCPU: registered at \\S*selu_autograd\\.cpp", table, re.MULTILINE), table
        assert ops.uses_cpp_entry() and ops.autograd_rule("selu_vectorized") == "refuses"
        x = torch.randn(8, requires_grad=True)
        try:
            ops.selu_vectorized(x)
            raise SystemExit("no refusal")
        except RuntimeError as error:
            assert "selu_course::selu_vectorized has no backward yet" in str(error), error
        assert torch.equal(ops.selu_vectorized(x.detach()), torch.selu(x.detach()))
        build.load("selu_backward", backend="cpu")
        ops.enable_backward()
        assert ops.autograd_rule("selu_vectorized") == "cpp" and ops.autograd_rule("selu_naive") == "python"
        (grad,) = torch.autograd.grad(ops.selu_vectorized(x).sum(), x)
        assert torch.equal(grad, ops.selu_backward(torch.ones_like(x), x.detach()))
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=env.REPO_ROOT,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.stdout.strip().endswith("ok"), done.stdout + done.stderr
