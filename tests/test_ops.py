"""The kernels as PyTorch operators (namespace ``selu_course``): the contract every operator keeps.

What is tested here is what makes a kernel a well-behaved operator rather than
what its math is (tests/test_kernels_cpu.py and tests/test_kernels_gpu.py do that):

* ``torch.library.opcheck`` passes for every schema of :data:`helpers.ops.SCHEMAS`,
  every dtype it accepts, and inputs of every layout (so the fake kernels, the
  schemas' mutation annotations and the functionalization torch.compile does are right);
* no gradient is ever dropped silently: an input that requires grad is refused until
  notebook 04 writes the backward;
* ``torch.compile(fullgraph=True)`` sees each operator as one node, with no graph break;
* meta and fake tensors work, and refuse what the real kernels refuse, with the same rules;
* the layout of a result, and the overlap rules of the ``out=`` overloads, are torch's own;
* :func:`helpers.build.load` replaces a loaded kernel with an edited one in the running
  process, silently and without a restart, and :func:`helpers.build.loaded` puts the
  previous one back.

Each test runs on the CPU and, where there is a GPU (``gpu`` marker), on CUDA.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from helpers import build, check, env, ops

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

# The unary operators of notebooks 02 and 03: tests/test_backward.py has notebook 04's
# (the backward operators and the in-place forward).
# The copy computes no SELU and has a gradient from the start, and the latency probe takes
# integers: their tests are at the end.
OPERATORS = tuple(name for name in ops.SCHEMAS
                  if name not in ops.BACKWARD_OPS + ops.IN_PLACE_OPS + ops.COPY_OPS + ops.PROBE_OPS)
FUNCTIONAL_OPERATORS = tuple(name for name in OPERATORS if not name.endswith(".out"))
OUT_OPERATORS = tuple(name for name in OPERATORS if name.endswith(".out"))
# The operators that compute selu (the mistakes compute something else on purpose).
SELU_OPERATORS = tuple(name for name in OPERATORS if not name.startswith("mistake_"))
FLOAT32_ONLY_OPERATORS = tuple(name for name in OPERATORS if ops.DTYPES[name] == (torch.float32,))
# A launch configuration that every device accepts (the CPU checks it and ignores it).
CONFIG = (128, 2, 0)
ELEMENTS_PER_THREAD = 4

# What no kernel accepts: the float8 types are floating types to at::isFloatingType,
# but no kernel is compiled for them.
UNSUPPORTED_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int32, torch.bool, torch.complex64)
# The C++ checks (kernels/selu_checks.h) and the fake kernels (helpers/schemas.py) word
# their refusal a little differently; both must name the four dtypes.
NOT_A_SUPPORTED_FLOAT = r"expected a float32, float64, float16,? (?:or )?bfloat16 tensor"
# The real float32-only kernels say "float32 only"; their fake kernels "expected a float32 tensor".
NOT_FLOAT32 = r"float32 only|expected a float32 tensor"


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def call(name: str, x: torch.Tensor, out: torch.Tensor | None = None):
    """Operator ``name`` on ``x``: its result, or ``out`` for an out= overload."""
    args, kwargs = arguments(name, x, out)
    result = ops.overload(name)(*args, **kwargs)
    return kwargs["out"] if name.endswith(".out") else result


def arguments(name: str, x: torch.Tensor, out: torch.Tensor | None = None) -> tuple[tuple, dict]:
    """The (args, kwargs) of operator ``name`` for input ``x``."""
    if name.endswith(".out"):
        return (x,), {"out": torch.empty_like(x) if out is None else out}
    if name == "selu_vectorized_with_config":
        return (x, *CONFIG), {}
    if name == "selu_naive_unrolled":
        return (x, ELEMENTS_PER_THREAD), {}
    return (x,), {}


def normal(shape, dtype=torch.float32, device="cpu", seed=0) -> torch.Tensor:
    return check.make_input("normal", shape, dtype, device, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def cpu_kernels() -> dict[str, build.Loaded]:
    """All three kernels built and registered for the CPU (cached in .build/ after the first run)."""
    return {kernel: build.load(kernel, backend="cpu") for kernel in build.KERNELS}


@pytest.fixture(scope="module", params=DEVICES)
def device(request, cpu_kernels) -> str:
    """Each device the operators run on, with all three kernels registered for it."""
    if request.param == "cuda":
        for kernel in build.KERNELS:
            build.load(kernel, backend="cuda")
    return request.param


# ----------------------------------------------------------------------------- opcheck

# Inputs of every kind a caller may pass: odd sizes (a tail no vector fills), a
# transposed view (dense, other strides), a slice with gaps, no elements, 0-d.
OPCHECK_INPUTS = {
    "odd_1d": lambda dtype, device: normal((37,), dtype, device),
    "odd_2d": lambda dtype, device: normal((5, 7), dtype, device),
    "transposed": lambda dtype, device: normal((7, 5), dtype, device).t(),
    "strided_slice": lambda dtype, device: normal((5, 9), dtype, device)[:, ::3],
    "empty": lambda dtype, device: torch.empty(0, dtype=dtype, device=device),
    "zero_dim": lambda dtype, device: torch.tensor(-0.5, dtype=dtype, device=device),
}
OPERATOR_DTYPES = [(name, dtype) for name in OPERATORS for dtype in ops.DTYPES[name]]

# The checks are split in two because until notebook 04 every operator refuses an
# input that requires grad (see test_an_input_that_requires_grad_is_refused):
# test_schema, test_faketensor and test_aot_dispatch_dynamic run the operator, so
# they get inputs that do not require grad; test_autograd_registration needs inputs
# that do, and only checks that an Autograd kernel is registered (it returns as soon
# as it finds one, without running the operator).
RUNNING_CHECKS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
REGISTRATION_CHECKS = ("test_autograd_registration",)


@pytest.mark.parametrize("kind", OPCHECK_INPUTS)
@pytest.mark.parametrize(
    "name, dtype", OPERATOR_DTYPES, ids=[f"{name}-{dtype_id(dtype)}" for name, dtype in OPERATOR_DTYPES]
)
def test_opcheck(device, name, dtype, kind):
    x = OPCHECK_INPUTS[kind](dtype, device)
    args, kwargs = arguments(name, x)
    torch.library.opcheck(ops.overload(name), args, kwargs, test_utils=RUNNING_CHECKS)


IN_PLACE_CASES = [(name, dtype) for name in OUT_OPERATORS for dtype in ops.DTYPES[name]]


@pytest.mark.parametrize("kind", ["odd_2d", "transposed"])
@pytest.mark.parametrize(
    "name, dtype", IN_PLACE_CASES, ids=[f"{name}-{dtype_id(dtype)}" for name, dtype in IN_PLACE_CASES]
)
def test_opcheck_in_place(device, name, dtype, kind):
    # out=x: x is written through out, which the schema's (a!) on out must cover.
    x = OPCHECK_INPUTS[kind](dtype, device)
    torch.library.opcheck(ops.overload(name), (x,), {"out": x}, test_utils=RUNNING_CHECKS)


@pytest.mark.parametrize("name", OPERATORS)
def test_opcheck_autograd_registration(device, name):
    x = normal((5, 7), torch.float32, device).requires_grad_()
    args, kwargs = arguments(name, x)
    torch.library.opcheck(ops.overload(name), args, kwargs, test_utils=REGISTRATION_CHECKS)


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("name", FUNCTIONAL_OPERATORS)
def test_an_input_that_requires_grad_is_refused(device, name):
    # Without a backward, the result would silently not require grad and training
    # would go on without this operator's gradient.
    x = normal((9,), torch.float32, device).requires_grad_()
    with pytest.raises(RuntimeError, match=r"no backward yet.*[Nn]otebook 04"):
        call(name, x)


@pytest.mark.parametrize("name", OUT_OPERATORS)
@pytest.mark.parametrize("which", ["x", "out"])
def test_an_out_call_that_requires_grad_is_refused(device, name, which):
    x = normal((9,), torch.float32, device)
    out = torch.empty_like(x)
    (x if which == "x" else out).requires_grad_()
    with pytest.raises(RuntimeError, match=r"out=.*automatic differentiation"):
        call(name, x, out)


@pytest.mark.parametrize("name", OPERATORS)
def test_no_grad_runs_and_returns_no_grad(device, name):
    source = normal((9,), torch.float32, device)
    x = source.clone().requires_grad_()
    with torch.no_grad():
        result = call(name, x)
    assert not result.requires_grad
    if name in SELU_OPERATORS:
        check.assert_selu(result, source)


# ----------------------------------------------------------------------------- torch.compile


@pytest.fixture
def fresh_dynamo():
    """A compiler cache of this test's own: one test's graphs cannot satisfy another's."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def doubled_naive(t):
    return ops.selu_naive(t) * 2


def doubled_vectorized(t):
    return ops.selu_vectorized(t) * 2


def doubled_vectorized_out(t):
    # out= inside a compiled function: functionalization turns the write into a new tensor.
    return ops.selu_vectorized_out(t, torch.empty_like(t)) * 2


@pytest.mark.parametrize("fn", [doubled_naive, doubled_vectorized, doubled_vectorized_out], ids=lambda f: f.__name__)
def test_compiles_into_one_graph(device, fn, fresh_dynamo):
    x = check.harness_input(1000, torch.float32, device, seed=1)
    explanation = torch._dynamo.explain(fn)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)  # fullgraph: a graph break would raise
    y = compiled(x)
    # Doubling is exact, so the kernel's tolerance applies to the doubled result too.
    check.assert_close_ulps(y, check.selu_reference(x.cpu()) * 2, x, check.MAX_ULP[torch.float32])


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_compiled_in_place_call_writes_its_input(device, name, fresh_dynamo):
    # The compiled graph is functional: the write into its input must be copied back.
    compiled = torch.compile(lambda t: call(name, t, t), fullgraph=True)
    original = check.harness_input(1000, torch.float32, device, seed=2)
    x = original.clone()
    compiled(x)
    check.assert_selu(x, original)


# ----------------------------------------------------------------------------- meta and fake tensors


@pytest.mark.parametrize("name", FUNCTIONAL_OPERATORS)
def test_meta_tensors_give_the_result_layout(name):
    # No kernel is involved: the fake kernels of helpers/schemas.py answer for the Meta device.
    for x in (torch.empty(3, 4, device="meta"), torch.empty(4, 3, device="meta").t()):
        y = call(name, x)
        assert y.device.type == "meta"
        assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == x.dtype


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_meta_out_leaves_out_as_it_is(name):
    x = torch.empty(3, 4, device="meta")
    out = torch.empty(3, 4, device="meta")
    assert call(name, x, out) is out
    assert out.shape == (3, 4) and out.device.type == "meta"


@pytest.mark.parametrize("name", FUNCTIONAL_OPERATORS)
def test_fake_tensors_give_the_result_layout(name):
    with FakeTensorMode():
        x = torch.empty(4, 3).t()
        y = call(name, x)
        assert type(y).__name__ == "FakeTensor"
        assert y.shape == (3, 4) and y.stride() == x.stride() and y.dtype == torch.float32


# ----------------------------------------------------------------------------- layout


LAYOUTS = {
    "transposed": lambda dtype, device: normal((33, 17), dtype, device).t(),
    "channels_last": lambda dtype, device: normal((2, 3, 5, 7), dtype, device).to(memory_format=torch.channels_last),
}
STRIDED = {
    "every_third_column": lambda dtype, device: normal((6, 33), dtype, device)[:, ::3],
    "every_other_row": lambda dtype, device: normal((10, 7), dtype, device)[::2],
}
SELU_FUNCTIONAL = tuple(name for name in SELU_OPERATORS if name in FUNCTIONAL_OPERATORS)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", SELU_FUNCTIONAL)
def test_a_dense_input_keeps_its_layout(device, name, layout):
    # As torch.selu: a dense input's strides carry over, so the kernel walks x's
    # memory as it lies, with no copy to a contiguous layout and back.
    x = LAYOUTS[layout](torch.float32, device)
    assert not x.is_contiguous()
    y = call(name, x)
    assert y.stride() == x.stride() == torch.selu(x).stride()
    check.assert_selu(y, x)


@pytest.mark.parametrize("strided", STRIDED)
@pytest.mark.parametrize("name", SELU_FUNCTIONAL)
def test_an_input_with_gaps_gives_a_dense_result(device, name, strided):
    x = STRIDED[strided](torch.float32, device)
    assert not x.is_contiguous()
    y = call(name, x)
    assert y.is_contiguous() and y.stride() == torch.selu(x).stride()
    check.assert_selu(y, x)


# ----------------------------------------------------------------------------- out= and overlap


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_out_is_x_computes_in_place(device, name):
    for x in (check.harness_input(1001, torch.float32, device), normal((33, 17), torch.float32, device).t()):
        original = x.clone()
        pointer = x.data_ptr()
        assert call(name, x, x) is x
        assert x.data_ptr() == pointer and x.stride() == original.stride()
        check.assert_selu(x, original)


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_out_partly_overlapping_x_is_refused(device, name):
    buffer = normal((100,), torch.float32, device)
    before = buffer.clone()
    with pytest.raises(RuntimeError, match="partly overlaps"):
        call(name, buffer[0:50], buffer[1:51])
    assert torch.equal(buffer, before)  # refused before anything was written


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_an_expanded_out_is_refused(device, name):
    x = normal((5,), torch.float32, device)
    with pytest.raises(RuntimeError, match="share one memory location"):
        call(name, x, torch.empty(1, device=device).expand(5))


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_an_out_with_gaps_gets_the_values_and_nothing_else(device, name):
    x = check.harness_input(100, torch.float32, device)
    base = torch.full((200,), 7.0, device=device)
    out = base[::2]
    assert call(name, x, out) is out
    check.assert_selu(out, x)
    assert torch.all(base[1::2] == 7.0)  # the gaps are left alone


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_an_out_in_another_layout_gets_the_values(device, name):
    x = normal((33, 17), torch.float32, device).t()
    out = torch.empty(17, 33, device=device)
    assert call(name, x, out) is out
    assert out.is_contiguous()  # out keeps its own layout
    check.assert_selu(out, x)


@pytest.mark.parametrize("name", OUT_OPERATORS)
def test_an_out_of_the_wrong_shape_or_dtype_is_refused(device, name):
    x = normal((5,), torch.float32, device)
    with pytest.raises(RuntimeError, match=r"out has shape \[4\] but x has shape \[5\]"):
        call(name, x, torch.empty(4, device=device))
    with pytest.raises(RuntimeError, match=r"out is Double but x is Float"):
        call(name, x, torch.empty(5, dtype=torch.float64, device=device))


# ----------------------------------------------------------------------------- dtypes


def make(dtype: torch.dtype, device) -> torch.Tensor:
    return torch.tensor([-1.5, 0.0, 2.0], device=device).to(dtype)


@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", OPERATORS)
def test_unsupported_dtypes_are_refused_by_kernel_and_fake(device, name, dtype):
    x = make(dtype, device)
    out = torch.empty_like(x)
    with pytest.raises(RuntimeError, match=NOT_A_SUPPORTED_FLOAT):
        call(name, x, out)
    # The fake kernel refuses it too, so that torch.compile fails at tracing, as eager would.
    with pytest.raises(RuntimeError, match=rf"selu_course::{name.removesuffix('.out')}: "
                       rf"(?:{NOT_A_SUPPORTED_FLOAT}|expected a float32 tensor)"):
        call(name, x.to("meta"), out.to("meta"))
    real = x.cpu()  # moved before the fake mode starts: inside it, every op must take fake tensors
    with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=NOT_A_SUPPORTED_FLOAT + "|expected a float32"):
        fake = mode.from_tensor(real)
        call(name, fake, torch.empty_like(fake))


@pytest.mark.parametrize("dtype", (torch.float64, torch.float16, torch.bfloat16), ids=dtype_id)
@pytest.mark.parametrize("name", FLOAT32_ONLY_OPERATORS)
def test_float32_only_operators_refuse_other_floats(device, name, dtype):
    x = make(dtype, device)
    with pytest.raises(RuntimeError, match=r"float32 only.*x\.float\(\)"):
        call(name, x, torch.empty_like(x))
    with pytest.raises(RuntimeError, match=NOT_FLOAT32):
        call(name, x.to("meta"), torch.empty_like(x, device="meta"))


@pytest.mark.parametrize("dtype", ops.FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", OPERATORS)
def test_kernel_and_fake_accept_the_same_dtypes(device, name, dtype):
    # ops.DTYPES is the fake kernels' rule; the C++ checks are the real one. A dtype
    # that one accepts and the other refuses would compile and fail at run time (or
    # the reverse), so each float dtype is run through both.
    x = make(dtype, device)
    accepted = {}
    for where, tensor in (("kernel", x), ("meta", x.to("meta"))):
        try:
            call(name, tensor, torch.empty_like(tensor))
            accepted[where] = True
        except RuntimeError:
            accepted[where] = False
    assert accepted == {"kernel": dtype in ops.DTYPES[name], "meta": dtype in ops.DTYPES[name]}
    if accepted["kernel"] and name in SELU_OPERATORS:
        check.assert_selu(call(name, x), x)


# ----------------------------------------------------------------------------- with_config


@pytest.mark.parametrize(
    "config, message",
    [
        ((100, 1, 0), r"threads_per_block must be 64, 128, 256, 512 or 1024.*got 100"),
        ((2048, 1, 0), r"threads_per_block must be .*got 2048"),
        ((0, 1, 0), r"threads_per_block must be .*got 0"),
        ((256, 3, 0), r"vectors_per_thread must be 1, 2, 4 or 8.*got 3"),
        ((256, 16, 0), r"vectors_per_thread must be .*got 16"),
        ((256, 4, -1), r"max_blocks_per_sm must be 0 .*or k > 0.*got -1"),
    ],
)
def test_with_config_refuses_a_bad_launch_configuration(device, config, message):
    with pytest.raises(RuntimeError, match=rf"selu_course::selu_vectorized_with_config: {message}"):
        ops.selu_vectorized_with_config(normal((10,), torch.float32, device), *config)


@pytest.mark.parametrize("config", [(64, 8, 0), (1024, 1, 0), (256, 4, 2), (128, 2, 1)])
def test_with_config_computes_selu_for_every_good_configuration(device, config):
    x = check.harness_input(20011, torch.float32, device)
    check.assert_selu(ops.selu_vectorized_with_config(x, *config), x)


# ----------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("name", OPERATORS)
def test_the_schema_says_what_is_written(name):
    schema = ops.overload(name)._schema
    written = [argument.name for argument in schema.arguments if argument.alias_info and argument.alias_info.is_write]
    if name.endswith(".out"):
        assert written == ["out"]
        assert [argument.name for argument in schema.arguments if argument.kwarg_only] == ["out"]
        assert schema.returns == []  # see helpers/schemas.py: torch.compile needs -> ()
    else:
        assert written == []
        assert not schema.is_mutable and len(schema.returns) == 1


# ----------------------------------------------------------------------------- loading and reloading


def test_an_unregistered_kernel_is_an_error_naming_the_operator(cpu_kernels):
    library = build._LOADED["mistakes_cpu.cpp"]
    build.unload(library)
    try:
        assert not build._is_loaded(library.path)
        with pytest.raises(NotImplementedError, match=r"selu_course::mistake_missing_minus_one.*'CPU' backend"):
            ops.mistake_missing_minus_one(torch.ones(3))
    finally:
        reloaded = build.load("mistakes", backend="cpu")
    assert reloaded.libraries[0].name == library.name
    assert torch.isfinite(ops.mistake_missing_minus_one(torch.ones(3))).all()


def test_unloading_what_load_returned_then_loading_again_registers_it(cpu_kernels):
    library = build.load("mistakes", backend="cpu").libraries[0]  # already loaded: not rebuilt
    build.unload(library)
    try:
        build.load("mistakes", backend="cpu")
        assert torch.isfinite(ops.mistake_missing_minus_one(torch.ones(3))).all()
    finally:
        # Whatever happened above, leave the mistakes registered for the other tests.
        stale = build._LOADED.get("mistakes_cpu.cpp")
        if stale is not None and not build._is_loaded(stale.path):
            del build._LOADED["mistakes_cpu.cpp"]
        build.load("mistakes", backend="cpu")


def test_loading_an_unchanged_kernel_again_does_nothing(cpu_kernels):
    first = build.load("selu_vectorized", backend="cpu")
    again = build.load("selu_vectorized", backend="cpu")
    assert [library.name for library in again.libraries] == [library.name for library in first.libraries]
    assert again.build_seconds == 0 and all(library.build_seconds == 0 for library in again.libraries)
    # The naive and vectorized kernels share one CPU library.
    assert build.load("selu_naive", backend="cpu").libraries[0].name == first.libraries[0].name


# The edit of the hot-reload test: selu's positive branch doubled.
SELU_POSITIVE_BRANCH = "x > T(0) ? x * scale :"
SELU_POSITIVE_BRANCH_DOUBLED = "x > T(0) ? x * scale * T(2) :"


def edited_kernels_copy() -> Path:
    """A copy of kernels/ whose selu_math.cuh doubles selu for x > 0.

    In a fixed folder under .build/ rather than a fresh tmp_path, and with each file
    written only when its text changed: the build records the source's path and
    every file's time stamp, so an unchanged copy in the same place is not rebuilt
    on the next test run.
    """
    copy = env.BUILD_DIR / "tests" / "kernels_edited"
    copy.mkdir(parents=True, exist_ok=True)
    for source in env.KERNELS_DIR.iterdir():
        if not source.is_file():
            continue
        text = source.read_text()
        if source.name == "selu_math.cuh":
            assert text.count(SELU_POSITIVE_BRANCH) == 1, "selu_math.cuh changed: update this test's edit"
            text = text.replace(SELU_POSITIVE_BRANCH, SELU_POSITIVE_BRANCH_DOUBLED)
        target = copy / source.name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
    for stale in copy.iterdir():
        if not (env.KERNELS_DIR / stale.name).exists():
            stale.unlink()
    return copy


def test_an_edited_kernel_replaces_the_loaded_one_silently(cpu_kernels, monkeypatch, capfd):
    x = torch.tensor([2.0, -1.0, 0.5, -3.0])
    doubled_selu = torch.where(x > 0, 2 * torch.selu(x), torch.selu(x))
    original = build._LOADED["selu_cpu.cpp"]
    copy = edited_kernels_copy()
    capfd.readouterr()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            monkeypatch.setattr(env, "KERNELS_DIR", copy)
            edited = build.load("selu_vectorized", backend="cpu")
        printed = capfd.readouterr()
        # "Overriding a previously registered kernel" would mean both libraries'
        # kernels were registered at once; the old library must be gone first.
        assert "Overriding" not in printed.err + printed.out
        assert printed.out == "" and printed.err == "", printed
        assert not [str(w.message) for w in caught if "Overriding" in str(w.message)]
        assert edited.libraries[0].name != original.name
        assert not build._is_loaded(original.path)
        torch.testing.assert_close(ops.selu_vectorized(x), doubled_selu)
        torch.testing.assert_close(ops.selu_naive(x), doubled_selu)  # the same CPU library
    finally:
        monkeypatch.undo()
        restored = build.load("selu_vectorized", backend="cpu")
    printed = capfd.readouterr()
    assert "Overriding" not in printed.err + printed.out
    assert restored.libraries[0].name == original.name
    assert build._LOADED["selu_cpu.cpp"].name == original.name
    check.assert_selu(ops.selu_vectorized(x), x)


def test_loaded_puts_the_previous_build_back(cpu_kernels):
    x = check.harness_input(1000, torch.float32, "cpu")
    before = build._LOADED["selu_cpu.cpp"]
    with build.loaded("selu_vectorized", backend="cpu", extra_cflags=("-DSELU_COURSE_TEST_OTHER_FLAGS",)) as other:
        flagged = other.libraries[0]
        assert flagged.name != before.name  # other flags, another library
        assert build._LOADED["selu_cpu.cpp"].name == flagged.name
        assert build._is_loaded(flagged.path) and not build._is_loaded(before.path)
        check.assert_selu(ops.selu_vectorized(x), x)
    assert build._LOADED["selu_cpu.cpp"].name == before.name
    assert build._is_loaded(before.path) and not build._is_loaded(flagged.path)
    check.assert_selu(ops.selu_vectorized(x), x)
    check.assert_selu(ops.selu_naive(x), x)


# ----------------------------------------------------------------------------- the copy


def with_nan_payloads(x: torch.Tensor) -> torch.Tensor:
    """``x`` with a few NaNs whose payloads are not the canonical one (and a -NaN)."""
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    x = x.clone()
    flat = x.view(-1).view(bits)
    exponent_bits = {torch.float16: 0x7C01, torch.bfloat16: 0x7F81, torch.float32: 0x7F800001}
    if x.dtype in exponent_bits:
        flat[:3] = torch.tensor([exponent_bits[x.dtype], exponent_bits[x.dtype] + 5, -1], dtype=bits)
    return x


@pytest.mark.parametrize("dtype", ops.FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("numel, offset", [(0, 0), (1, 0), (37, 0), (10_007, 0), (10_007, 1), (10_007, 3)])
def test_copy_is_exact_to_the_bit(device, dtype, numel, offset):
    # Every dtype, tails, misaligned views, NaN payloads: the bytes come out as they went in.
    x = with_nan_payloads(normal((numel + offset + 3,), dtype, device))[offset:offset + numel]
    with check.poisoned_outputs():
        y = ops.copy_vectorized(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert numel == 0 or y.data_ptr() != x.data_ptr()  # a new tensor, never x itself
    assert torch.equal(y.view(torch.uint8), x.contiguous().view(torch.uint8))


@pytest.mark.parametrize("dtype", ops.FLOAT_DTYPES, ids=dtype_id)
def test_copy_opcheck(device, dtype):
    for make in OPCHECK_INPUTS.values():
        x = make(dtype, device)
        torch.library.opcheck(ops.overload("copy_vectorized"), (x,))
        torch.library.opcheck(ops.overload("copy_vectorized"), (x.clone().requires_grad_(),))


def test_copy_passes_the_gradient_on(device):
    x = normal((5, 7), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(ops.copy_vectorized, (x,))
    grad = torch.randn(5, 7, dtype=torch.float64, device=device)
    (got,) = torch.autograd.grad(ops.copy_vectorized(x), x, grad)
    assert torch.equal(got, grad)


def test_copy_refuses_what_the_kernels_refuse(device):
    with pytest.raises(RuntimeError, match=NOT_A_SUPPORTED_FLOAT):
        ops.copy_vectorized(torch.arange(4, dtype=torch.int32, device=device))
    with pytest.raises(RuntimeError, match=NOT_A_SUPPORTED_FLOAT):
        ops.copy_vectorized(torch.empty(4, dtype=torch.int32, device="meta"))


def test_copy_compiles_into_one_graph(device, fresh_dynamo):
    x = normal((33, 17), torch.float32, device).t()
    y = torch.compile(lambda t: ops.copy_vectorized(t) * 2, fullgraph=True)(x)
    assert torch.equal(y, x * 2) and y.stride() == x.stride()


# ----------------------------------------------------------------------------- the launch, asked of C++

H100_SMS = 132


def test_small_tensors_halve_vectors_then_threads(cpu_kernels):
    # 2^20 fp32 elements are 262,144 vectors: 256 tiles of 256 x 4, fewer than 8 x 132;
    # 1 vector gives 1,024 blocks, still fewer, so the threads halve too: 2,048 blocks.
    assert ops.launch_for_size(2**20, torch.float32, (256, 4, 0), sms=H100_SMS) == (128, 1, 2048)
    # Enough blocks at the first halving: 2^23 fp32 at 256 x 4 are 2,048 blocks, at least 1,056.
    assert ops.launch_for_size(2**23, torch.float32, (256, 8, 0), sms=H100_SMS) == (256, 4, 2048)
    assert ops.launch_for_size(2**23, torch.float32, (256, 4, 0), sms=H100_SMS) == (256, 4, 2048)
    # Fewer SMs want fewer blocks: the same tensor keeps more vectors per thread.
    assert ops.launch_for_size(2**20, torch.float32, (256, 4, 0), sms=8) == (256, 4, 256)


def test_the_reference_size_is_untouched_and_threads_stay_at_128_or_more(cpu_kernels):
    numel = env.REFERENCE_NUMEL
    assert ops.launch_for_size(numel, torch.bfloat16, (512, 8, 0), sms=H100_SMS) == (512, 8, -(-(numel // 8) // 4096))
    # A tensor smaller than a vector still gets one block, for its tail.
    assert ops.launch_for_size(1, torch.bfloat16, (512, 8, 0), sms=H100_SMS) == (128, 1, 1)


def test_blocks_count_16_byte_vectors_of_the_dtype(cpu_kernels):
    blocks = {dtype: ops.launch_for_size(2**26, dtype, (128, 2, 0), sms=H100_SMS)[2]
              for dtype in (torch.float64, torch.float32, torch.float16)}
    assert blocks[torch.float64] == 2 * blocks[torch.float32] == 4 * blocks[torch.float16] == 2**26 // 2 // 256


def test_a_capped_grid_has_at_most_k_blocks_per_sm(cpu_kernels):
    assert ops.launch_for_size(2**28, torch.float32, (256, 4, 8), sms=H100_SMS) == (256, 4, 8 * H100_SMS)
    assert ops.launch_for_size(2**28, torch.float32, (256, 4, 8), sms=10) == (256, 4, 80)


def test_without_a_config_the_launch_is_the_one_in_use(cpu_kernels):
    config = ops.default_launch_config()
    torch.ops.selu_course.check_launch_config(*config)  # the default is a launch the kernel accepts
    if not torch.cuda.is_available():  # no launch table here: the C++ default, on an H100's SMs
        assert ops.launch_for_size(2**26, torch.float32) == ops.launch_for_size(2**26, torch.float32, config,
                                                                                sms=H100_SMS)


@pytest.mark.parametrize("arguments, message", [
    ((2**20, torch.float32, (100, 1, 0)), r"threads_per_block must be 64, 128, 256, 512 or 1024.*got 100"),
    ((2**20, torch.float32, (128, 3, 0)), r"vectors_per_thread must be 1, 2, 4 or 8.*got 3"),
    ((2**20, torch.float32, (128, 2, -1)), r"max_blocks_per_sm must be 0 .*got -1"),
    ((2**20, torch.int32, (128, 2, 0)), r"expected float32, float64, float16 or bfloat16"),
    ((-1, torch.float32, (128, 2, 0)), r"numel must be 0 or more"),
])
def test_launch_for_size_refuses_what_the_kernel_refuses(cpu_kernels, arguments, message):
    with pytest.raises(RuntimeError, match=rf"selu_course::launch_for_size: {message}"):
        ops.launch_for_size(*arguments, sms=H100_SMS)


# ----------------------------------------------------------------------------- the latency probe


def random_cycle(n: int, device, seed: int = 0) -> torch.Tensor:
    """A table of int64 indices that visits all n once before it comes back to where it began."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    table = torch.empty(n, dtype=torch.int64)
    table[order] = order.roll(-1)
    return table.to(device)



def test_pointer_chase_follows_the_chain(device):
    ring = ((torch.arange(16) + 3) % 16).to(device)  # i -> i + 3: after s steps, 3 s mod 16
    for steps in (0, 1, 5, 16, 1000):
        reached = ops.pointer_chase(ring, steps)
        assert reached.shape == () and reached.dtype == torch.int64 and reached.device.type == device
        assert reached.item() == 3 * steps % 16


def test_a_random_cycle_visits_every_index_once(device):
    table = random_cycle(64, device, seed=3)
    seen, index = [], 0
    for _ in range(64):
        seen.append(index)
        index = table[index].item()
    assert index == 0 and sorted(seen) == list(range(64))
    assert ops.pointer_chase(table, 64).item() == 0 and ops.pointer_chase(table, 7).item() == seen[7]


def test_pointer_chase_reads_in_bounds_whatever_the_table_holds(device):
    # Each index is masked to the table's length: garbage cannot send a load outside it.
    garbage = torch.tensor([-5, 2**40 + 1, 7, -(2**62), 12, 3, 99, 1], dtype=torch.int64, device=device)
    assert 0 <= ops.pointer_chase(garbage, 1000).item() < 8


@pytest.mark.parametrize("make, message", [
    (lambda d: torch.zeros(8, dtype=torch.int32, device=d), "int64 indices"),
    (lambda d: torch.zeros(12, dtype=torch.int64, device=d), "power of two"),
    (lambda d: torch.zeros(0, dtype=torch.int64, device=d), "power of two"),
    (lambda d: torch.zeros(4, 4, dtype=torch.int64, device=d), "1-D"),
    (lambda d: torch.zeros(16, dtype=torch.int64, device=d)[::2], "contiguous"),
])
def test_pointer_chase_refuses_a_bad_table(device, make, message):
    for where in (device, "meta"):
        with pytest.raises(RuntimeError, match=message):
            ops.pointer_chase(make(where), 1)
    with pytest.raises(RuntimeError, match="steps must be 0 or more"):
        ops.pointer_chase(torch.zeros(8, dtype=torch.int64, device=device), -1)


def test_pointer_chase_opcheck(device):
    table = random_cycle(32, device)
    torch.library.opcheck(ops.overload("pointer_chase"), (table, 9))
    y = torch.compile(lambda t: ops.pointer_chase(t, 9) + 1, fullgraph=True)(table)
    assert y.item() == ops.pointer_chase(table, 9).item() + 1
