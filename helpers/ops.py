"""The course's operators from Python: the autograd switches, the launch of selu_vectorized, and
one function per operator.

>>> from helpers import build, ops
>>> build.load("selu_vectorized")      # compiles and registers the CPU and CUDA kernels  # doctest: +SKIP
>>> y = ops.selu_vectorized(x)          # torch.ops.selu_course.selu_vectorized(x)       # doctest: +SKIP

The operators (schemas, fake kernels, refusing rules) are defined in :mod:`helpers.schemas`.
No operator may silently drop a gradient: until :func:`enable_backward`, each refuses a tensor
that requires grad; after it, the forward operators differentiate through the backward
operators, and the in-place one through :class:`helpers.schemas.SeluInPlace`.
"""
from __future__ import annotations

import ctypes

import torch

from . import build, schemas
from .schemas import (  # noqa: F401  (the names notebooks and tests use through ops)
    BACKWARD_OPS, CONFIG_SCHEMAS, COPY_OPS, DTYPES, FLOAT_DTYPES, FORWARD_OPS, IN_PLACE_OPS, NAMESPACE, PROBE_OPS,
    SCHEMAS, SeluInPlace, overload, qualified,
)

# ----------------------------------------------------------------------------- autograd

# The C++ rules' library (kernels/selu_autograd.cpp) while it is loaded; the rule enable_backward()
# gives the operators it covers, "cpp" unless a notebook asks for the Python one.
_cpp_rules: build.Library | None = None
AUTOGRAD_RULES = ("python", "cpp")
CPP_RULES_KERNEL = "selu_autograd"  # in helpers.build.AUTOGRAD_KERNELS
_rule = "cpp"


def _has_kernel(name: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified(name), key)


def _check_backward_kernels() -> None:
    """Refuse to enable a gradient that could not run: the backward kernels must be registered
    for the CPU, and for the GPU wherever a forward kernel is."""
    forward = [name for name in FORWARD_OPS if not name.startswith("mistake_")]
    keys = ["CPU"] + [key for key in ("CUDA",) if any(_has_kernel(name, key) for name in forward)]
    missing = [key for key in keys if not all(_has_kernel(name, key) for name in BACKWARD_OPS)]
    if missing:
        raise RuntimeError(
            f"ops.enable_backward: the backward kernels ({', '.join(map(qualified, BACKWARD_OPS))}) are not "
            f"loaded for {' and '.join(missing)}, so a gradient could not be computed. Call "
            "build.load('selu_backward') first, then enable the backward again.")


# region: autograd
def _save_input(ctx, inputs, output):
    # The backward needs x alone: not the output, and no gradient for the ints that
    # shape the launch (selu_vectorized_with_config, selu_naive_unrolled).
    ctx.save_for_backward(inputs[0])
    ctx.config_args = len(inputs) - 1


def _selu_backward_rule(ctx, grad):
    (x,) = ctx.saved_tensors
    return (torch.ops.selu_course.selu_backward.default(grad, x),) + (None,) * ctx.config_args


def register_python_rule(name: str, rules: torch.library.Library) -> None:
    """Forward operator ``name``'s autograd rule: backward = ``selu_backward(grad, x)``, saving only ``x``."""
    torch.library.register_autograd(qualified(name), _selu_backward_rule, setup_context=_save_input, lib=rules)
# endregion


def enable_backward(rule: str | None = None) -> None:
    """Give every functional forward operator its gradient (:func:`register_python_rule`); the mistakes keep refusing.
    On the operators kernels/selu_autograd.cpp covers, the same rule in C++ runs unless ``rule="python"``: it
    computes the same gradient, bit for bit, and costs far less per call (appendix A8). ``rule`` (``"python"`` or
    ``"cpp"``) stays the choice until changed.

    Needs the backward kernels (``build.load("selu_backward")``): without them this raises, and says so.
    :func:`disable_backward` restores the refusing rules."""
    global _rule
    if rule is not None and rule not in AUTOGRAD_RULES:
        raise ValueError(f"rule must be one of {', '.join(map(repr, AUTOGRAD_RULES))}, not {rule!r}.")
    _check_backward_kernels()
    _install_rules(differentiate=True, rule=rule or _rule)
    _rule = rule or _rule


def disable_backward() -> None:
    """Every forward operator refuses a gradient again (the state before notebook 04)."""
    _install_rules(differentiate=False, rule=_rule if _cpp_rules is not None else "python")


def _install_rules(differentiate: bool, rule: str) -> None:
    """One autograd kernel per forward operator: the C++ rule where ``rule`` is ``"cpp"`` and it
    covers the operator, else a Python one; each differentiates or refuses."""
    global _cpp_rules
    in_cpp = cpp_rule_operators() if rule == "cpp" else ()
    if _cpp_rules is not None and not in_cpp:
        if build.objects_alive(_cpp_rules):  # graphs torch.compile keeps hold nodes of it: they recompile
            torch._dynamo.reset()
        build.unload(_cpp_rules)  # first: it refuses while a node of the C++ rule is alive, changing nothing
        _cpp_rules = None
    rules = schemas.new_autograd_rules()  # the Python rules removed, before the C++ library may register
    schemas.backward_enabled = differentiate
    try:
        if in_cpp and _cpp_rules is None:
            build.load(CPP_RULES_KERNEL, backend="cpu")
    finally:  # where that failed, Python rules cover every operator, and the error still shows
        _cpp_rules = build.loaded_library(build.AUTOGRAD_KERNELS[CPP_RULES_KERNEL].cpu_source)
        for name in FORWARD_OPS:
            if _cpp_rules is not None and name in in_cpp:
                _set_cpp_refusal(name, "" if differentiate else schemas.NO_BACKWARD_YET.format(op=qualified(name)))
            elif differentiate and not name.startswith("mistake_"):
                register_python_rule(name, rules)
            else:
                schemas.forbid_gradients(name, rules)


def _set_cpp_refusal(name: str, message: str) -> None:
    with build.symbols(_cpp_rules) as library:
        library.selu_course_set_refusal.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
        library.selu_course_set_refusal(name.encode(), message.encode())


def cpp_rule_operators() -> tuple[str, ...]:
    """The forward operators that kernels/selu_autograd.cpp has a C++ autograd rule for."""
    return build.AUTOGRAD_KERNELS[CPP_RULES_KERNEL].operators


def autograd_rule(name: str) -> str:
    """The autograd rule forward operator ``name`` has now: ``"python"`` (:func:`register_python_rule`),
    ``"cpp"`` (kernels/selu_autograd.cpp) or ``"refuses"``."""
    if name not in FORWARD_OPS:
        raise ValueError(f"{qualified(name)} is not a functional forward operator: {', '.join(FORWARD_OPS)}.")
    if not schemas.backward_enabled or name.startswith("mistake_"):
        return "refuses"
    return "cpp" if _cpp_rules is not None and name in cpp_rule_operators() else "python"


def use_fast_path(kernel: str) -> None:
    """After ``build.load`` of selu_vectorized: the C++ rule (refusing until :func:`enable_backward`) and
    the C++ entry, unless chosen otherwise; a call then costs what torch's own cost (appendix A8)."""
    if kernel != "selu_vectorized":
        return
    if _cpp_rules is None and _rule == "cpp":
        _install_rules(differentiate=schemas.backward_enabled, rule="cpp")
    if _use_entry and _cpp_entry is None:
        use_cpp_entry()


build.AFTER_LOAD.append(use_fast_path)


# ----------------------------------------------------------------------------- the launch of selu_vectorized
# Asked of the C++ operators (kernels/launch.h, registered by the CPU library that every
# build.load of a SELU kernel builds; the launch table where the CUDA kernels are built).

H100_SXM_SMS = 132  # the GPU whose launch launch_for_size describes on a machine without one


def default_launch_config() -> tuple[int, int, int]:
    """``(threads_per_block, vectors_per_thread, max_blocks_per_sm)`` that ``selu_vectorized``
    launches until :func:`helpers.tuning.configure` (or :func:`set_launch_config`) changes it."""
    return tuple(torch.ops.selu_course.default_launch_config.default())


def set_launch_config(device: torch.device, dtype: torch.dtype, threads_per_block: int, vectors_per_thread: int,
                      max_blocks_per_sm: int) -> None:
    """Make ``selu_vectorized`` on ``device`` launch ``dtype`` tensors with this configuration."""
    torch.ops.selu_course.set_launch_config.default(
        torch.device(device), dtype, threads_per_block, vectors_per_thread, max_blocks_per_sm
    )


def launch_config(device: torch.device, dtype: torch.dtype) -> tuple[int, int, int]:
    """``(threads_per_block, vectors_per_thread, max_blocks_per_sm)`` that ``selu_vectorized`` uses there."""
    return tuple(torch.ops.selu_course.launch_config.default(torch.device(device), dtype))


def launch_for_size(numel: int, dtype: torch.dtype, config: tuple[int, int, int] | None = None,
                    sms: int | None = None) -> tuple[int, int, int]:
    """``(threads_per_block, vectors_per_thread, blocks)``: the launch ``selu_vectorized`` makes for a
    contiguous tensor of ``numel`` elements of ``dtype``, at ``config`` (default: the one in use on
    this GPU for ``dtype``, else :func:`default_launch_config`) on a GPU of ``sms`` multiprocessors
    (default: this GPU's count, or an H100 SXM's on a machine without one). Small tensors get
    fewer vectors per thread, then fewer threads per block, so that every SM has blocks to run."""
    on_gpu = torch.cuda.is_available()
    if config is None:
        in_use = on_gpu and _has_kernel("launch_config", "CompositeExplicitAutograd")
        config = launch_config(torch.device("cuda", torch.cuda.current_device()), dtype) if in_use \
            else default_launch_config()
    if sms is None:
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count if on_gpu \
            else H100_SXM_SMS
    return tuple(torch.ops.selu_course.launch_for_size.default(numel, dtype, *config, sms))


# ----------------------------------------------------------------------------- the C++ entry

_cpp_entry = None  # kernels/selu_entry.cpp's selu_vectorized, once loaded
_use_entry = True  # loaded with selu_vectorized (use_fast_path), unless use_cpp_entry(False)


def use_cpp_entry(enabled: bool = True) -> None:
    """Call :func:`selu_vectorized` through kernels/selu_entry.cpp, a pybind11 binding of the operator (appendix A8;
    loaded with selu_vectorized), instead of through ``torch.ops``, whose generic binding converts each argument
    through the schema; ``enabled=False`` goes back. The entry calls the same operator through the dispatcher,
    autograd rule included; under ``torch.compile``, and for tensor subclasses, :func:`selu_vectorized` calls
    ``torch.ops``."""
    global _cpp_entry, _use_entry
    _use_entry = enabled
    _cpp_entry = build.load_entry().selu_vectorized if enabled else None


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

    After :func:`enable_backward` it differentiates through :class:`SeluInPlace`, whose backward reads the saved
    output; a leaf that requires grad is refused, as torch refuses it."""
    torch.ops.selu_course.selu_vectorized_.default(x)
    return x


def selu_vectorized_with_config(
    x: torch.Tensor, threads_per_block: int, vectors_per_thread: int, max_blocks_per_sm: int
) -> torch.Tensor:
    """:func:`selu_vectorized` with a launch configuration of its own (a CPU checks it and ignores it).

    ``max_blocks_per_sm=0`` is a one-shot grid (one block per tile); ``k > 0`` caps the grid at ``k`` blocks per SM,
    which then loop over the tiles."""
    return torch.ops.selu_course.selu_vectorized_with_config.default(
        x, threads_per_block, vectors_per_thread, max_blocks_per_sm
    )


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


def mistake_int32_index(x: torch.Tensor) -> torch.Tensor:
    """WRONG ON PURPOSE: the thread's index computed in 32 bits, widened only after it wrapped."""
    return torch.ops.selu_course.mistake_int32_index.default(x)
