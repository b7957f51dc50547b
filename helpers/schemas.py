"""The ``selu_course`` operators as the dispatcher knows them: schemas, fake kernels, and the autograd kernels that
refuse a gradient until notebook 04 enables one.

Every kernel of ``kernels/`` is a PyTorch operator in one namespace, ``selu_course``: a schema (defined here, once
per process, because the kernels' libraries are rebuilt and replaced while a notebook runs), implementations
registered per device in C++ (``TORCH_LIBRARY_IMPL``), a fake kernel that says what the result looks like (what
``torch.compile`` traces with) and an autograd rule. A kernel whose C++ signature does not match its schema is
refused when its library loads.

This module imports nothing of :mod:`helpers`: :mod:`helpers.build` imports it before it loads a library, and
:mod:`helpers.ops` swaps the autograd rules it starts with."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

NAMESPACE = "selu_course"

# Name -> schema. ``Tensor(a!) out`` says that the operator writes into ``out``. The ``.out``
# overloads return nothing (``-> ()``): torch.compile can only functionalize a custom
# operator whose results are new tensors, so the Python functions return ``out`` themselves.
SCHEMAS = {
    # notebook 02: one thread per element, float32 only
    "selu_naive": "(Tensor x) -> Tensor",
    "selu_naive.out": "(Tensor x, *, Tensor(a!) out) -> ()",
    # notebook 02's control experiment: the naive kernel with several independent loads per thread
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
    # the vectorized kernel's loop with no math, a copy (every dtype): the tests' check that the loop moves bytes only
    "copy_vectorized": "(Tensor x) -> Tensor",
    # notebook 02's latency probe: follow a chain of int64 indices (kernels/latency_chain*)
    "pointer_chase": "(Tensor next, int steps) -> Tensor",
    # appendix A9's first drafts: wrong on purpose (kernels/mistakes*.c*)
    "mistake_missing_minus_one": "(Tensor x) -> Tensor",
    "mistake_expf_minus_one": "(Tensor x) -> Tensor",
    "mistake_legacy_default_stream": "(Tensor x) -> Tensor",
    "mistake_int32_count": "(Tensor x) -> Tensor",
    "mistake_int32_index": "(Tensor x) -> Tensor",
}

# Operators that take no tensor, so no fake kernel, autograd rule or opcheck. The launch table
# of selu_vectorized (kernels/selu_vectorized.cu: where its CUDA kernels are built) and the
# arithmetic of its launch and its checks (kernels/launch.h, registered by selu_cpu.cpp: on
# every machine).
CONFIG_SCHEMAS = {
    "set_launch_config": ("(Device device, ScalarType dtype, int threads_per_block, int vectors_per_thread, "
                          "int max_blocks_per_sm) -> ()"),
    "launch_config": "(Device device, ScalarType dtype) -> int[]",
    "default_launch_config": "() -> int[]",
    "launch_for_size": ("(int numel, ScalarType dtype, int threads_per_block, int vectors_per_thread, "
                        "int max_blocks_per_sm, int sms) -> int[]"),
    "check_launch_config": "(int threads_per_block, int vectors_per_thread, int max_blocks_per_sm) -> ()",
    "check_elements_per_thread": "(int elements_per_thread) -> ()",
}

# The dtypes each operator accepts, as its C++ checks say (kernels/selu_checks.h).
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPES = {name: FLOAT_DTYPES if name.startswith(("selu_vectorized", "selu_backward", "copy_")) else (torch.float32,)
          for name in SCHEMAS}
BACKWARD_OPS = ("selu_backward", "selu_backward_from_output")
COPY_OPS = ("copy_vectorized",)  # a copy: its gradient is the incoming one
PROBE_OPS = ("pointer_chase",)  # on int64 tensors, which have no gradient
DTYPES.update({name: (torch.int64,) for name in PROBE_OPS})
IN_PLACE_OPS = ("selu_vectorized_",)  # write into their input: an Autograd-key kernel of their own
# The functional forward operators: the ones an autograd rule is registered for.
FORWARD_OPS = tuple(name for name in SCHEMAS
                    if "." not in name and name not in BACKWARD_OPS + IN_PLACE_OPS + COPY_OPS + PROBE_OPS)
# The functional operators that map each element on its own, as torch.selu does: tagged
# pointwise, batched by vmap in one call. (The first drafts of appendix A9 are left out.)
POINTWISE_OPS = tuple(name for name in FORWARD_OPS + COPY_OPS + BACKWARD_OPS if not name.startswith("mistake_"))

# region: define
# Kept alive for the life of the process: dropping a Library object deregisters what it registered.
LIBRARY = torch.library.Library(NAMESPACE, "DEF")
for _name, _schema in {**SCHEMAS, **CONFIG_SCHEMAS}.items():
    LIBRARY.define(_name + _schema, tags=(torch.Tag.pointwise,) if _name in POINTWISE_OPS else ())
# endregion


def qualified(name: str) -> str:
    """``"selu_vectorized"`` -> ``"selu_course::selu_vectorized"``."""
    return f"{NAMESPACE}::{name}"


def overload(name: str) -> torch._ops.OpOverload:
    """The operator overload ``name`` (``"selu_naive"``, ``"selu_naive.out"``...)."""
    base, _, suffix = name.partition(".")
    return getattr(getattr(torch.ops.selu_course, base), suffix or "default")


# ----------------------------------------------------------------------------- fake kernels


def check_dtype(name: str, x: torch.Tensor) -> None:
    """The dtype rules of kernels/selu_checks.h, in its words, for the fake kernels: tracing
    with fake tensors refuses what running would."""
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


def _check_in_cpp(check: str, *arguments: int) -> None:
    # The C++ check itself (kernels/launch.h), run outside the fake mode that is tracing.
    with _disable_current_modes():
        getattr(torch.ops.selu_course, check).default(*map(int, arguments))


# The int arguments some operators take besides x, checked by the C++ check the kernels use.
_ARGUMENT_CHECKS = {"selu_vectorized_with_config": "check_launch_config",
                    "selu_naive_unrolled": "check_elements_per_thread"}


def _fake_pointer_chase(next_index: torch.Tensor, steps: int) -> torch.Tensor:
    # The rules of kernels/latency_chain.h's check_chain, in its words.
    name = qualified("pointer_chase")
    if next_index.dtype != torch.int64:
        raise RuntimeError(f"{name}: the chain holds int64 indices, got {next_index.dtype}.")
    size = next_index.numel()
    if next_index.dim() != 1 or not next_index.is_contiguous() or size == 0 or size & (size - 1):
        raise RuntimeError(f"{name}: the chain must be a contiguous 1-D tensor whose length is a power of two, "
                           f"got shape {tuple(next_index.shape)}.")
    if steps < 0:
        raise RuntimeError(f"{name}: steps must be 0 or more, got {steps}.")
    return next_index.new_empty(())


def _register_fakes() -> None:
    """A new result has ``x``'s sizes, dtype and device and the strides ``torch.empty_like(x)``
    picks, as the C++ implementations allocate it (kernels/elementwise.h); ``.out`` returns nothing."""
    for name in BACKWARD_OPS:
        def fake_backward(grad, saved, _name=name):
            check_dtype(_name, grad)
            check_dtype(_name, saved)
            if grad.shape != saved.shape or grad.dtype != saved.dtype:
                raise RuntimeError(f"{qualified(_name)}: grad is {grad.dtype} {tuple(grad.shape)} but the saved "
                                   f"tensor is {saved.dtype} {tuple(saved.shape)}; both must match the forward result.")
            return torch.empty_like(saved)

        torch.library.register_fake(qualified(name), fake_backward, lib=LIBRARY)
    torch.library.register_fake(qualified("pointer_chase"), _fake_pointer_chase, lib=LIBRARY)
    for name in SCHEMAS:
        if name in BACKWARD_OPS + PROBE_OPS:
            continue
        if name in IN_PLACE_OPS or name.endswith(".out"):
            def fake_writes(x, *, out=None, _name=name.removesuffix(".out")):
                check_dtype(_name, x)

            torch.library.register_fake(qualified(name), fake_writes, lib=LIBRARY)
        else:
            # region: fake
            def fake(x, *arguments, _name=name):  # the C++ operator's own checks, then an empty result
                check_dtype(_name, x)
                if arguments:
                    _check_in_cpp(_ARGUMENT_CHECKS[_name], *arguments)
                return torch.empty_like(x)

            torch.library.register_fake(qualified(name), fake, lib=LIBRARY)
            # endregion


# ----------------------------------------------------------------------------- refusing a gradient

NO_BACKWARD_YET = (
    "{op} has no backward yet, so the gradient of its result would be lost. Notebook 04 "
    "writes the backward kernel and registers it. Until then call it on a tensor that does not "
    "require grad (x.detach(), or inside torch.no_grad()), or use torch.selu where you train."
)


# region: forbid_gradients
def forbid_gradients(name: str, lib: torch.library.Library) -> None:
    """An autograd rule that refuses to run when a gradient is wanted: without any rule, a
    custom operator's result would silently not require grad. ``setup_context`` runs only when
    an input requires grad and grad mode is on, so other calls are untouched."""

    def refuse(*_, **__):
        raise RuntimeError(NO_BACKWARD_YET.format(op=qualified(name)))

    torch.library.register_autograd(qualified(name), refuse, setup_context=refuse, lib=lib)
# endregion


# The forward operators' autograd rules, in a library of their own that helpers.ops swaps;
# whether the in-place operator differentiates (SeluInPlace) or refuses.
autograd_rules: torch.library.Library | None = None
backward_enabled = False


def new_autograd_rules() -> torch.library.Library:
    """Remove every rule of :data:`autograd_rules` and return the empty library in its place."""
    global autograd_rules
    if autograd_rules is not None:
        autograd_rules._destroy()  # removes its registrations: a new rule may take their place
    autograd_rules = torch.library.Library(NAMESPACE, "FRAGMENT")
    return autograd_rules


def refuse_every_gradient() -> None:
    """Every forward operator refuses a gradient (the state before notebook 04)."""
    global backward_enabled
    rules = new_autograd_rules()
    backward_enabled = False
    for name in FORWARD_OPS:
        forbid_gradients(name, rules)


def _register_double_backward() -> None:
    """Autograd rules for the backward operators themselves, so that a gradient of a
    gradient (``gradgradcheck``, second-order optimisers) flows through them."""

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def from_input(ctx, grad_grad_in):
        # grad_in = grad * f(x) with f(x) = lambda for x > 0, lambda*alpha*e^x otherwise, so
        # d/dgrad = f(x), and d/dx = grad * f'(x) = 0 where x > 0, else grad * lambda*alpha*e^x. Tested
        # as the forward tests it (x > 0): a NaN x takes the exp branch, and its NaN carries through.
        grad, x = ctx.saved_tensors
        d_grad = torch.ops.selu_course.selu_backward.default(grad_grad_in, x)
        d_x = torch.where(x > 0, 0, torch.ops.selu_course.selu_backward.default(grad * grad_grad_in, x))
        return d_grad, d_x

    def from_output(ctx, grad_grad_in):
        # grad_in = grad * (y + lambda*alpha) for y <= 0, grad * lambda otherwise.
        grad, y = ctx.saved_tensors
        d_grad = torch.ops.selu_course.selu_backward_from_output.default(grad_grad_in, y)
        d_y = torch.where(y > 0, 0, grad * grad_grad_in)
        return d_grad, d_y

    for name, rule in (("selu_backward", from_input), ("selu_backward_from_output", from_output)):
        torch.library.register_autograd(qualified(name), rule, setup_context=setup_context, lib=LIBRARY)
    for name in COPY_OPS:  # a copy needs no backward kernel: nothing to refuse, from notebook 02 on
        torch.library.register_autograd(qualified(name), lambda ctx, grad: grad, lib=LIBRARY)


# region: in_place
class SeluInPlace(torch.autograd.Function):
    """selu_ with a gradient: ``x`` is overwritten by ``y = selu(x)``, and the backward reads ``y``.

    ``mark_dirty`` tells autograd that ``x`` was modified in place: it bumps ``x``'s version counter (a later
    backward that saved the old ``x`` then fails loudly instead of reading ``y``), refuses a leaf that requires
    grad, and rebases ``x``'s history onto this function. The output is saved, not the input, which no longer
    exists."""

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
# endregion


def _register_in_place(name: str) -> None:
    """The Autograd-key kernel of a mutating operator: :class:`SeluInPlace` when a gradient
    is wanted (a refusal until the backward is enabled), and otherwise the device kernel,
    with ``x``'s version counter bumped as torch's own in-place operators do."""
    op = overload(name)

    def autograd_kernel(keyset, x):
        if torch.is_grad_enabled() and x.requires_grad:
            if not backward_enabled:
                raise RuntimeError(NO_BACKWARD_YET.format(op=qualified(name)))
            SeluInPlace.apply(x)
            return
        with torch._C._AutoDispatchBelowAutograd():
            op.redispatch(keyset & torch._C._after_autograd_keyset, x)
        torch.autograd.graph.increment_version(x)

    LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


def _forbid_gradients_out(name: str) -> None:
    """The Autograd-key kernel of an ``out=`` overload (``register_autograd`` takes only
    functional schemas): it refuses when a gradient is wanted, as torch's own ``out=``
    operators do, and otherwise passes the call on to the device's kernel."""
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

    LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


# ----------------------------------------------------------------------------- vmap and autocast


# region: vmap
def _register_vmap(name: str) -> None:
    """torch.vmap in one call of the operator: an elementwise operator is blind to which dimension is the batch, so the
    batched tensor goes in whole (without a rule, vmap would call the operator once per batch element, and warn)."""
    op = overload(name)

    def one_input(info, in_dims, x, *arguments):
        return op(x, *arguments), in_dims[0]  # the result has x's shape: the batch stays where it was

    def two_inputs(info, in_dims, grad, saved):
        if in_dims[0] == in_dims[1]:  # both batched alike
            return op(grad, saved), in_dims[0]
        # The batch first in both; one that is not batched is repeated for each batch element.
        grad, saved = (t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)
                       for t, d in zip((grad, saved), in_dims))
        return op(grad, saved), 0

    torch.library.register_vmap(qualified(name), two_inputs if name in BACKWARD_OPS else one_input, lib=LIBRARY)
# endregion


# region: autocast
def _register_autocast(name: str) -> None:
    """Under torch.autocast, SELU runs in its input's dtype, as torch.selu does (it is on none of autocast's lists): a
    one-input operator needs no rule. The backward operators take two tensors, which autocast may leave in two
    dtypes (a float32 gradient of a bfloat16 result); they run in the wider one, as autocast's "promote" operators
    do. Outside autocast, two dtypes stay an error."""
    op = overload(name)
    for device_type in ("cpu", "cuda"):
        def promote(grad, saved, _device_type=device_type):
            dtype = torch.promote_types(grad.dtype, saved.dtype)
            with torch.autocast(_device_type, enabled=False):
                return op(grad.to(dtype), saved.to(dtype))

        LIBRARY.impl(name, promote, f"Autocast{device_type.upper()}")
# endregion


_register_fakes()
for _name in POINTWISE_OPS:
    _register_vmap(_name)
for _name in BACKWARD_OPS:
    _register_autocast(_name)
_register_double_backward()
for _name in SCHEMAS:
    if _name.endswith(".out"):
        _forbid_gradients_out(_name)
for _name in IN_PLACE_OPS:
    _register_in_place(_name)
refuse_every_gradient()
