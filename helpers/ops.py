"""The course's operators: their schemas, fake kernels and autograd rules, and a thin Python layer.

>>> from helpers import build, ops
>>> build.load("selu_vectorized")      # compiles and registers the CPU and CUDA kernels  # doctest: +SKIP
>>> y = ops.selu_vectorized(x)          # torch.ops.selu_course.selu_vectorized(x)       # doctest: +SKIP

Every kernel of ``kernels/`` is a PyTorch operator in one namespace, ``selu_course``,
the way PyTorch's own operators are: a schema (its name, argument and return types,
and which arguments it writes), implementations registered per device in C++
(``TORCH_LIBRARY_IMPL(selu_course, CPU | CUDA, m)`` in each kernel file), a fake
kernel that says what the result looks like without computing it (what
``torch.compile`` traces with), and an autograd rule. The same call then runs on
whatever device its tensor is on, ``torch.compile(fullgraph=True)`` sees it as one
node of its graph, and ``torch.library.opcheck`` can test all of it.

The schemas live here, once, rather than in a C++ ``TORCH_LIBRARY`` block: a
namespace may be defined only once per process, and the kernels' libraries are
rebuilt and replaced while a notebook runs (see :func:`helpers.build.load`).
When a kernel file registers an implementation whose C++ signature does not
match its schema, the dispatcher refuses it.

No operator may silently drop a gradient. Until notebook 04 calls
:func:`enable_backward`, each raises an error that says so when called on a tensor
that requires grad; after it, the forward operators differentiate through the
backward operators, and the in-place one through :class:`SeluInPlace`.
"""
from __future__ import annotations

import torch

NAMESPACE = "selu_course"

# Name -> schema. ``Tensor(a!) out`` says that the operator writes into ``out``: the
# compiler and autograd rely on that annotation being true. The ``.out`` overloads
# return nothing (``-> ()``): torch.compile can only functionalize a custom
# operator whose results are new tensors, not aliases of its inputs, so the
# Python functions below return ``out`` themselves.
SCHEMAS = {
    # notebook 02: one thread per element, float32 only
    "selu_naive": "(Tensor x) -> Tensor",
    "selu_naive.out": "(Tensor x, *, Tensor(a!) out) -> ()",
    # notebook 03's control experiment: the naive kernel with several independent loads per thread
    "selu_naive_unrolled": "(Tensor x, int elements_per_thread) -> Tensor",
    # notebook 03: 16-byte vectors, every floating dtype
    "selu_vectorized": "(Tensor x) -> Tensor",
    "selu_vectorized.out": "(Tensor x, *, Tensor(a!) out) -> ()",
    # notebook 04: the mutating form, as torch.selu_; its backward reads the saved output
    "selu_vectorized_": "(Tensor(a!) x) -> ()",
    "selu_vectorized_with_config": (
        "(Tensor x, int threads_per_block, int vectors_per_thread, int max_blocks_per_sm) -> Tensor"
    ),
    # notebook 04: the backward pass, grad_in = grad * d selu/dx, from the input or the output
    "selu_backward": "(Tensor grad, Tensor x) -> Tensor",
    "selu_backward_from_output": "(Tensor grad, Tensor y) -> Tensor",
    # notebook 03's yardstick: the vectorized kernel's loop with no math, a copy (every dtype)
    "copy_vectorized": "(Tensor x) -> Tensor",
    # notebook 02's latency probe: follow a chain of int64 indices (kernels/latency_chain*)
    "pointer_chase": "(Tensor next, int steps) -> Tensor",
    # notebook 02's first drafts: wrong on purpose (kernels/mistakes*.c*)
    "mistake_missing_minus_one": "(Tensor x) -> Tensor",
    "mistake_expf_minus_one": "(Tensor x) -> Tensor",
    "mistake_legacy_default_stream": "(Tensor x) -> Tensor",
    "mistake_int32_count": "(Tensor x) -> Tensor",
}

# The dtypes each operator accepts, as its C++ checks say (kernels/selu_checks.h).
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPES = {name: FLOAT_DTYPES if name.startswith(("selu_vectorized", "selu_backward", "copy_")) else (torch.float32,)
          for name in SCHEMAS}
BACKWARD_OPS = ("selu_backward", "selu_backward_from_output")
# Operators that compute no SELU: a copy, whose gradient is the incoming one (_register_copy_autograd).
COPY_OPS = ("copy_vectorized",)
# Operators on integer tensors, which have no gradient: the latency probe.
PROBE_OPS = ("pointer_chase",)
DTYPES.update({name: (torch.int64,) for name in PROBE_OPS})
# Operators that write into their input (``Tensor(a!) x``): register_autograd takes only
# functional schemas, so their autograd rule is an Autograd-key kernel (_register_in_place).
IN_PLACE_OPS = ("selu_vectorized_",)
# The functional forward operators: the ones an autograd rule is registered for.
FORWARD_OPS = tuple(name for name in SCHEMAS
                    if "." not in name and name not in BACKWARD_OPS + IN_PLACE_OPS + COPY_OPS + PROBE_OPS)

# Kept alive for the life of the process: dropping a Library object deregisters
# what it registered.
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
# The forward operators' autograd rules live in a library of their own, so that
# enable_backward() can swap the rule that refuses a gradient for the real one.
_autograd_rules: torch.library.Library | None = None
# The C++ rule's library (kernels/selu_autograd.cpp) while it is loaded: enable_cpp_backward().
_cpp_rules = None  # helpers.build.Library | None
# Whether the in-place operator differentiates (enable_backward) or refuses a gradient.
_backward_enabled = False
for _name, _schema in SCHEMAS.items():
    _LIBRARY.define(_name + _schema)

# The launch configuration of selu_vectorized per GPU and dtype (kernels/selu_vectorized.cu):
# not tensor operators, so no fake kernel, autograd rule or opcheck; they exist only
# where the CUDA kernels were built. helpers.tuning sets them.
CONFIG_SCHEMAS = {
    "set_launch_config": (
        "(Device device, ScalarType dtype, int threads_per_block, int vectors_per_thread, "
        "int max_blocks_per_sm) -> ()"
    ),
    "launch_config": "(Device device, ScalarType dtype) -> int[]",
}
for _name, _schema in CONFIG_SCHEMAS.items():
    _LIBRARY.define(_name + _schema)


def qualified(name: str) -> str:
    """``"selu_vectorized"`` -> ``"selu_course::selu_vectorized"``."""
    return f"{NAMESPACE}::{name}"


def overload(name: str) -> torch._ops.OpOverload:
    """The operator overload ``name`` (``"selu_naive"``, ``"selu_naive.out"``...)."""
    base, _, suffix = name.partition(".")
    return getattr(getattr(torch.ops.selu_course, base), suffix or "default")


# ----------------------------------------------------------------------------- fake kernels


def _check_dtype(name: str, x: torch.Tensor) -> None:
    # The same rules and words as the C++ checks (kernels/selu_checks.h), so that
    # tracing with fake tensors refuses what running would.
    if x.dtype not in FLOAT_DTYPES:
        raise RuntimeError(
            f"{qualified(name)}: expected a float32, float64, float16 or bfloat16 tensor, got {x.dtype}. "
            "SELU is defined on real numbers and these kernels are compiled for those four types: "
            "convert first, e.g. x.float()."
        )
    if x.dtype not in DTYPES[name]:
        raise RuntimeError(
            f"{qualified(name)}: this kernel handles float32 only, got {x.dtype}. Use x.float(), or "
            "selu_course::selu_vectorized (notebook 03), which dispatches over every floating dtype."
        )


def _check_launch_config(threads_per_block: int, vectors_per_thread: int, max_blocks_per_sm: int) -> None:
    name = qualified("selu_vectorized_with_config")
    if threads_per_block not in (64, 128, 256, 512, 1024):
        raise RuntimeError(f"{name}: threads_per_block must be 64, 128, 256, 512 or 1024 (whole warps, at most "
                           f"1024 per block), got {threads_per_block}.")
    if vectors_per_thread not in (1, 2, 4, 8):
        raise RuntimeError(f"{name}: vectors_per_thread must be 1, 2, 4 or 8 (the kernel is compiled for these), "
                           f"got {vectors_per_thread}.")
    if max_blocks_per_sm < 0:
        raise RuntimeError(f"{name}: max_blocks_per_sm must be 0 (one block per tile, a one-shot grid) or k > 0 "
                           f"(at most k blocks per SM, grid-stride loop), got {max_blocks_per_sm}.")


def _check_elements_per_thread(elements_per_thread: int) -> None:
    if elements_per_thread not in (1, 2, 4, 8):
        raise RuntimeError(f"{qualified('selu_naive_unrolled')}: elements_per_thread must be 1, 2, 4 or 8 (the "
                           f"kernel is compiled for these), got {elements_per_thread}.")


# The checks of the int arguments some operators take besides x, as their C++ checks make them.
_ARGUMENT_CHECKS = {"selu_vectorized_with_config": _check_launch_config,
                    "selu_naive_unrolled": _check_elements_per_thread}


def _fake_pointer_chase(next_index: torch.Tensor, steps: int) -> torch.Tensor:
    # The rules of kernels/latency_chain.h's check_chain, in its words.
    name = qualified("pointer_chase")
    if next_index.dtype != torch.int64:
        raise RuntimeError(f"{name}: the chain holds int64 indices, got {next_index.dtype}; "
                           "build it with helpers.demos.random_cycle.")
    size = next_index.numel()
    if next_index.dim() != 1 or not next_index.is_contiguous() or size == 0 or size & (size - 1):
        raise RuntimeError(f"{name}: the chain must be a contiguous 1-D tensor whose length is a power of two, "
                           f"got shape {tuple(next_index.shape)}.")
    if steps < 0:
        raise RuntimeError(f"{name}: steps must be 0 or more, got {steps}.")
    return next_index.new_empty(())


def _register_fakes() -> None:
    """What each result looks like, computed from its inputs' metadata alone.

    A new result has ``x``'s sizes, dtype and device and the strides
    ``torch.empty_like(x)`` picks, which is what the C++ implementations allocate
    (kernels/elementwise.h); an ``out=`` overload returns nothing.
    """
    for name in BACKWARD_OPS:
        def fake_backward(grad, saved, _name=name):
            _check_dtype(_name, grad)
            _check_dtype(_name, saved)
            if grad.shape != saved.shape or grad.dtype != saved.dtype:
                raise RuntimeError(f"{qualified(_name)}: grad is {grad.dtype} {tuple(grad.shape)} but the saved "
                                   f"tensor is {saved.dtype} {tuple(saved.shape)}; both must match the forward result.")
            return torch.empty_like(saved)

        torch.library.register_fake(qualified(name), fake_backward, lib=_LIBRARY)
    for name in IN_PLACE_OPS:
        def fake_in_place(x, _name=name):
            _check_dtype(_name, x)

        torch.library.register_fake(qualified(name), fake_in_place, lib=_LIBRARY)
    torch.library.register_fake(qualified("pointer_chase"), _fake_pointer_chase, lib=_LIBRARY)
    for name in SCHEMAS:
        if name in BACKWARD_OPS + IN_PLACE_OPS + PROBE_OPS:
            continue
        if name.endswith(".out"):
            def fake_out(x, *, out, _name=name.removesuffix(".out")):
                _check_dtype(_name, x)

            torch.library.register_fake(qualified(name), fake_out, lib=_LIBRARY)
        else:
            def fake(x, *arguments, _name=name):
                _check_dtype(_name, x)
                if arguments:
                    _ARGUMENT_CHECKS[_name](*arguments)
                return torch.empty_like(x)

            torch.library.register_fake(qualified(name), fake, lib=_LIBRARY)


# ----------------------------------------------------------------------------- autograd

NO_BACKWARD_YET = (
    "{op} has no backward yet, so the gradient of its result would be lost. Notebook 04 "
    "writes the backward kernel and registers it. Until then call it on a tensor that does not "
    "require grad (x.detach(), or inside torch.no_grad()), or use torch.selu where you train."
)


def _forbid_gradients(name: str, lib: torch.library.Library) -> None:
    """Register an autograd rule that refuses to run when a gradient is wanted.

    Without any autograd rule, a custom operator's result would silently not
    require grad, and a model using it would train every layer but this one's
    inputs. ``setup_context`` runs only when an input requires grad and grad
    mode is on, so calls that need no gradient are untouched.
    """

    def setup_context(ctx, inputs, output):
        raise RuntimeError(NO_BACKWARD_YET.format(op=qualified(name)))

    def backward(ctx, grad):  # never reached: setup_context refuses first
        raise RuntimeError(NO_BACKWARD_YET.format(op=qualified(name)))

    torch.library.register_autograd(qualified(name), backward, setup_context=setup_context, lib=lib)


# region: autograd
def _save_input(ctx, inputs, output):
    # The backward needs x alone: not the output, and no gradient for the ints that
    # shape the launch (selu_vectorized_with_config, selu_naive_unrolled).
    ctx.save_for_backward(inputs[0])
    ctx.config_args = len(inputs) - 1


def _selu_backward_rule(ctx, grad):
    (x,) = ctx.saved_tensors
    return (torch.ops.selu_course.selu_backward.default(grad, x),) + (None,) * ctx.config_args


def enable_backward() -> None:
    """Register the real autograd rule on every functional forward operator: the backward is
    ``selu_backward(grad, x)``, saving only ``x``. The mistakes keep refusing.

    Needs the backward kernels of the device at hand (``build.load`` of a SELU kernel
    registers the CPU one). :func:`disable_backward` restores the refusing rules.
    """
    global _backward_enabled
    _reset_autograd_rules()
    _backward_enabled = True
    for name in FORWARD_OPS:
        if name.startswith("mistake_"):
            _forbid_gradients(name, _autograd_rules)
        else:
            torch.library.register_autograd(qualified(name), _selu_backward_rule,
                                            setup_context=_save_input, lib=_autograd_rules)
# endregion


def disable_backward() -> None:
    """Every forward operator refuses a gradient again (the state before notebook 04)."""
    global _backward_enabled
    _reset_autograd_rules()
    _backward_enabled = False
    for name in FORWARD_OPS:
        _forbid_gradients(name, _autograd_rules)


def _reset_autograd_rules(keep_cpp_rules: bool = False) -> None:
    global _autograd_rules, _cpp_rules
    if _cpp_rules is not None and not keep_cpp_rules:
        from . import build

        build.unload(_cpp_rules)  # first: it refuses while a node of the C++ rule is alive, changing nothing
        _cpp_rules = None
    if _autograd_rules is not None:
        _autograd_rules._destroy()  # removes its registrations: a new rule may take their place
    _autograd_rules = torch.library.Library(NAMESPACE, "FRAGMENT")


# ----------------------------------------------------------------------------- the C++ rule (notebook 05)

AUTOGRAD_RULES = ("python", "cpp")
CPP_RULES_KERNEL = "selu_autograd"  # in helpers.build.AUTOGRAD_KERNELS


def cpp_rule_operators() -> tuple[str, ...]:
    """The forward operators that kernels/selu_autograd.cpp has a C++ autograd rule for."""
    from . import build  # where it is needed: helpers.build imports this module in turn

    return build.AUTOGRAD_KERNELS[CPP_RULES_KERNEL].operators


def enable_cpp_backward() -> None:
    """:func:`enable_backward`, with the rule of the operators that kernels/selu_autograd.cpp
    covers written in C++ instead of Python (notebook 05): their Python rule is left out,
    and the C++ library is loaded in its place; the other operators get the Python rule."""
    global _backward_enabled
    _reset_autograd_rules(keep_cpp_rules=True)
    _backward_enabled = True
    in_cpp = cpp_rule_operators()
    for name in FORWARD_OPS:
        if name.startswith("mistake_"):
            _forbid_gradients(name, _autograd_rules)
        elif name not in in_cpp:
            torch.library.register_autograd(qualified(name), _selu_backward_rule, setup_context=_save_input,
                                            lib=_autograd_rules)
    _load_cpp_rules()


def set_autograd_rule(rule: str) -> None:
    """``"python"``: :func:`enable_backward` (notebook 04); ``"cpp"``: :func:`enable_cpp_backward`."""
    if rule not in AUTOGRAD_RULES:
        raise ValueError(f"rule must be one of {', '.join(map(repr, AUTOGRAD_RULES))}, not {rule!r}.")
    (enable_cpp_backward if rule == "cpp" else enable_backward)()


def _load_cpp_rules() -> None:
    """Load kernels/selu_autograd.cpp, whose C++ Autograd-key kernels then are the rule of its
    operators; :func:`enable_cpp_backward` calls it once their Python rule is gone.

    Why: ``register_autograd`` installs a Python function as the operator's Autograd-key
    kernel, and the dispatcher calls it on every call, not only on those that record a
    gradient: under ``torch.no_grad()``, or on a tensor that does not require grad, the
    Python function runs all the same, finds nothing to record and calls the kernel. On a
    small tensor those microseconds of Python cost more than the kernel itself (only
    ``torch.inference_mode()``, which takes the Autograd key out of the call, skips them).
    The same rule in C++ costs what the rules of torch's own operators cost, and computes
    the same gradient, bit for bit.
    """
    global _cpp_rules
    from . import build

    try:
        build.load(CPP_RULES_KERNEL, backend="cpu")
    finally:
        _cpp_rules = build.loaded_library(build.AUTOGRAD_KERNELS[CPP_RULES_KERNEL].cpu_source)
        if _cpp_rules is None:  # it failed: no operator may be left without a rule
            for name in cpp_rule_operators():
                torch.library.register_autograd(qualified(name), _selu_backward_rule, setup_context=_save_input,
                                                lib=_autograd_rules)


def autograd_rule(name: str) -> str:
    """The autograd rule forward operator ``name`` has now: ``"python"`` (the Python functions of
    :func:`enable_backward`), ``"cpp"`` (kernels/selu_autograd.cpp) or ``"refuses"``."""
    if name not in FORWARD_OPS:
        raise ValueError(f"{qualified(name)} is not a functional forward operator: {', '.join(FORWARD_OPS)}.")
    if _cpp_rules is not None and name in cpp_rule_operators():
        return "cpp"
    return "python" if _backward_enabled and not name.startswith("mistake_") else "refuses"


def _register_double_backward() -> None:
    """Autograd rules for the backward operators themselves, so that a gradient of a
    gradient (``gradgradcheck``, second-order optimisers) flows through them."""

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def from_input(ctx, grad_grad_in):
        # grad_in = grad * f(x) with f(x) = lambda for x > 0, lambda*alpha*e^x otherwise, so
        # d/dgrad = f(x), and d/dx = grad * f'(x) = grad * lambda*alpha*e^x where x <= 0, else 0.
        grad, x = ctx.saved_tensors
        d_grad = torch.ops.selu_course.selu_backward.default(grad_grad_in, x)
        d_x = torch.where(x <= 0, torch.ops.selu_course.selu_backward.default(grad * grad_grad_in, x), 0)
        return d_grad, d_x

    def from_output(ctx, grad_grad_in):
        # grad_in = grad * (y + lambda*alpha) for y <= 0, grad * lambda otherwise.
        grad, y = ctx.saved_tensors
        d_grad = torch.ops.selu_course.selu_backward_from_output.default(grad_grad_in, y)
        d_y = torch.where(y <= 0, grad * grad_grad_in, 0)
        return d_grad, d_y

    for name, rule in (("selu_backward", from_input), ("selu_backward_from_output", from_output)):
        torch.library.register_autograd(qualified(name), rule, setup_context=setup_context, lib=_LIBRARY)


def _register_copy_autograd() -> None:
    """A copy's gradient is the incoming gradient, from notebook 02 on: it needs no backward
    kernel, so there is nothing to refuse."""
    for name in COPY_OPS:
        torch.library.register_autograd(qualified(name), lambda ctx, grad: grad, lib=_LIBRARY)


# region: in_place
class SeluInPlace(torch.autograd.Function):
    """selu_ with a gradient: ``x`` is overwritten by ``y = selu(x)``, and the backward reads ``y``.

    ``mark_dirty`` tells autograd that ``x`` was modified in place: it bumps ``x``'s
    version counter (a later backward that saved the old ``x`` then fails loudly
    instead of reading ``y``), refuses a leaf that requires grad, and rebases ``x``'s
    history onto this function. The output is saved, not the input, which no longer exists.
    """

    @staticmethod
    def forward(ctx, x):
        torch.ops.selu_course.selu_vectorized_.default(x)  # grad mode is off in here: the kernel itself
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.selu_course.selu_backward_from_output.default(grad, y)


def _register_in_place(name: str) -> None:
    """The Autograd-key kernel of a mutating operator: :class:`SeluInPlace` when a gradient
    is wanted (or notebook 02/03's refusal before :func:`enable_backward`), and otherwise the
    device kernel, with ``x``'s version counter bumped as torch's own in-place operators do."""
    op = overload(name)

    def autograd_kernel(keyset, x):
        if torch.is_grad_enabled() and x.requires_grad:
            if not _backward_enabled:
                raise RuntimeError(NO_BACKWARD_YET.format(op=qualified(name)))
            SeluInPlace.apply(x)
            return
        with torch._C._AutoDispatchBelowAutograd():
            op.redispatch(keyset & torch._C._after_autograd_keyset, x)
        torch.autograd.graph.increment_version(x)

    _LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)
# endregion


def _forbid_gradients_out(name: str) -> None:
    """The same for an ``out=`` overload, as torch's own ``out=`` operators do.

    ``register_autograd`` takes only functional schemas, so this registers the
    Autograd-key kernel directly: it refuses when a gradient is wanted and
    otherwise passes the call on to the device's kernel.
    """
    op = overload(name)

    def autograd_kernel(keyset, x, *, out):
        if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad):
            raise RuntimeError(
                f"{qualified(name)}: functions with out=... arguments don't support automatic "
                "differentiation, but one of the arguments requires grad. Call it inside torch.no_grad(), "
                f"or use the functional form {qualified(name.removesuffix('.out'))}."
            )
        with torch._C._AutoDispatchBelowAutograd():
            op.redispatch(keyset & torch._C._after_autograd_keyset, x, out=out)

    _LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


_register_fakes()
_register_double_backward()
_register_copy_autograd()
for _name in SCHEMAS:
    if _name.endswith(".out"):
        _forbid_gradients_out(_name)
for _name in IN_PLACE_OPS:
    _register_in_place(_name)
disable_backward()


# ----------------------------------------------------------------------------- the C++ entry

_cpp_entry = None  # kernels/selu_entry.cpp's selu_vectorized, after use_cpp_entry()


def use_cpp_entry(enabled: bool = True) -> None:
    """Call :func:`selu_vectorized` through kernels/selu_entry.cpp, a pybind11 binding of the
    operator (notebook 05), instead of through ``torch.ops``; ``enabled=False`` goes back.

    Why: ``torch.ops`` binds every operator with one generic function that converts each
    argument through the schema. On a small tensor, where issuing the call is its whole
    cost, that costs more than the kernel's own host code. The entry calls the same
    operator through the dispatcher, autograd rule included, so results and gradients do
    not change. It is used in eager mode only: under ``torch.compile``, and for tensor
    subclasses, :func:`selu_vectorized` calls ``torch.ops``.
    """
    global _cpp_entry
    if not enabled:
        _cpp_entry = None
        return
    from . import build  # where it is needed: helpers.build imports this module in turn

    _cpp_entry = build.load_entry().selu_vectorized


def uses_cpp_entry() -> bool:
    """Whether :func:`selu_vectorized` goes through the C++ entry (:func:`use_cpp_entry`)."""
    return _cpp_entry is not None


# ----------------------------------------------------------------------------- the thin layer


def selu_naive(x: torch.Tensor) -> torch.Tensor:
    """Notebook 02's kernel: one thread per element, float32."""
    return torch.ops.selu_course.selu_naive.default(x)


def selu_naive_out(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """:func:`selu_naive` into ``out`` (x's shape, dtype and device); returns ``out``."""
    torch.ops.selu_course.selu_naive.out(x, out=out)
    return out


def pointer_chase(next_index: torch.Tensor, steps: int) -> torch.Tensor:
    """Notebook 02's latency probe: starting at 0, ``steps`` times ``i = next_index[i]`` (masked to
    the table's power-of-two length), one load at a time; the index reached, a 0-d int64 tensor."""
    return torch.ops.selu_course.pointer_chase.default(next_index, steps)


def selu_naive_unrolled(x: torch.Tensor, elements_per_thread: int) -> torch.Tensor:
    """Notebook 03's control: the naive kernel, each thread loading ``elements_per_thread``
    floats (1, 2, 4 or 8) before computing any; on a CPU, the knob is checked and ignored."""
    return torch.ops.selu_course.selu_naive_unrolled.default(x, elements_per_thread)


def selu_vectorized(x: torch.Tensor) -> torch.Tensor:
    """Notebook 03's kernel: 16-byte vectors, every floating dtype, its default launch.

    Through the C++ entry where :func:`use_cpp_entry` loaded it, for a plain tensor in eager
    mode; otherwise through ``torch.ops``. Both call the same operator."""
    if _cpp_entry is not None and type(x) is torch.Tensor and not torch.compiler.is_compiling():
        return _cpp_entry(x)
    return torch.ops.selu_course.selu_vectorized.default(x)


def copy_vectorized(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` by :func:`selu_vectorized`'s loop and launch with the math left out: on a
    GPU, the time the SELU kernel would take if SELU cost nothing; on a CPU, a copy."""
    return torch.ops.selu_course.copy_vectorized.default(x)


def selu_vectorized_out(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """:func:`selu_vectorized` into ``out``; ``out`` may be ``x`` itself (in place)."""
    torch.ops.selu_course.selu_vectorized.out(x, out=out)
    return out


def selu_vectorized_(x: torch.Tensor) -> torch.Tensor:
    """:func:`selu_vectorized` in place, as ``torch.selu_``: ``x`` becomes ``selu(x)``; returns ``x``.

    After :func:`enable_backward` it differentiates through :class:`SeluInPlace`, whose
    backward reads the saved output; a leaf that requires grad is refused, as torch refuses it.
    """
    torch.ops.selu_course.selu_vectorized_.default(x)
    return x


def selu_vectorized_with_config(
    x: torch.Tensor, threads_per_block: int, vectors_per_thread: int, max_blocks_per_sm: int
) -> torch.Tensor:
    """:func:`selu_vectorized` with a launch configuration of its own (a CPU checks it and ignores it).

    ``max_blocks_per_sm=0`` is a one-shot grid (one block per tile); ``k > 0`` caps
    the grid at ``k`` blocks per SM, which then loop over the tiles.
    """
    return torch.ops.selu_course.selu_vectorized_with_config.default(
        x, threads_per_block, vectors_per_thread, max_blocks_per_sm
    )


def set_launch_config(device: torch.device, dtype: torch.dtype, threads_per_block: int, vectors_per_thread: int,
                      max_blocks_per_sm: int) -> None:
    """Make ``selu_vectorized`` on ``device`` launch ``dtype`` tensors with this configuration."""
    torch.ops.selu_course.set_launch_config.default(
        torch.device(device), dtype, threads_per_block, vectors_per_thread, max_blocks_per_sm
    )


def launch_config(device: torch.device, dtype: torch.dtype) -> tuple[int, int, int]:
    """``(threads_per_block, vectors_per_thread, max_blocks_per_sm)`` that ``selu_vectorized`` uses there."""
    return tuple(torch.ops.selu_course.launch_config.default(torch.device(device), dtype))


def selu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Notebook 04: ``grad * d selu/dx`` from the forward's input ``x``."""
    return torch.ops.selu_course.selu_backward.default(grad, x)


def selu_backward_from_output(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Notebook 04: the same from the forward's output ``y = selu(x)`` (what an in-place forward keeps)."""
    return torch.ops.selu_course.selu_backward_from_output.default(grad, y)


def mistake_missing_minus_one(x: torch.Tensor) -> torch.Tensor:
    """WRONG ON PURPOSE: ``λα·eˣ`` for x ≤ 0, without the − 1."""
    return torch.ops.selu_course.mistake_missing_minus_one.default(x)


def mistake_expf_minus_one(x: torch.Tensor) -> torch.Tensor:
    """WRONG ON PURPOSE: ``expf(x) - 1`` instead of ``expm1f(x)``."""
    return torch.ops.selu_course.mistake_expf_minus_one.default(x)


def mistake_legacy_default_stream(x: torch.Tensor) -> torch.Tensor:
    """WRONG ON PURPOSE: launched on the legacy default stream, not torch's current one."""
    return torch.ops.selu_course.mistake_legacy_default_stream.default(x)


def mistake_int32_count(x: torch.Tensor) -> torch.Tensor:
    """WRONG ON PURPOSE: the element count narrowed to a 32-bit ``int``."""
    return torch.ops.selu_course.mistake_int32_count.default(x)
