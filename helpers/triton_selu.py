"""The course's Triton peer as a real PyTorch operator: ``selu_course::selu_triton`` and its backward.

>>> from helpers import triton_selu
>>> triton_selu.register()          # defines the operators once; False where triton is missing  # doctest: +SKIP
>>> y = triton_selu.selu_triton(x)   # torch.ops.selu_course.selu_triton(x)                      # doctest: +SKIP

:func:`helpers.bench.triton_selu` is the ten lines anyone would write first, called as a
plain function. Here the same kernel is an operator like the CUDA ones of :mod:`helpers.ops`:
``torch.library.triton_op`` defines it, and its kernels are launched through
``torch.library.wrap_triton``, so ``torch.compile`` sees into it (it traces the kernel
launch, not an opaque call), ``opcheck`` can test it, and autograd differentiates it.

The math is the course's (kernels/selu_math.cuh): in float32 for the 16-bit types (float64
for float64), the coefficients rounded to that type first and multiplied in it, ``x > 0``
as the test, so that the results can equal ``torch.selu`` and ``aten.elu_backward`` bit for
bit. A CUDA tensor runs the Triton kernels; every other device runs the same formulas with
torch's own operators, so the operator works everywhere (kernels for the CPU).

Everything Triton is defined only where triton imports and torch has ``triton_op`` and
``wrap_triton`` (torch 2.6 on): :func:`available` says whether both hold, :func:`missing`
says what is missing, and :func:`register` returns False without them. This module itself
always imports.
"""
from __future__ import annotations

import torch

from helpers import check, ops

try:  # torch.library.triton_op and wrap_triton exist from torch 2.6 on
    from torch.library import triton_op, wrap_triton
except ImportError:
    triton_op = wrap_triton = None

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # a machine without triton (CI, usually): nothing below is compiled or launched
    triton = None

FORWARD = "selu_triton"
BACKWARD = "selu_triton_backward"

# Blocks of 1024 elements, 4 warps: each of a block's 128 threads handles 8 elements in
# 16-byte loads (one for float16/bfloat16, two for float32, four for float64), enough bytes
# in flight for a memory-bound kernel. (Where n is not a multiple of 16, Triton cannot prove
# the mask uniform over a vector and every load is scalar, in every block: the PTX shows it.)
# It is what torch.compile's pointwise heuristic picks for large tensors, and the block of
# helpers.bench.triton_selu, so the peers compare. Fixed rather than autotuned: an
# autotuner's choice can vary from run to run, and so would the timings.
BLOCK = 1024
NUM_WARPS = 4


def missing() -> str | None:
    """What this machine lacks for the Triton operators, in a sentence; None where nothing."""
    if triton is None:
        return ("needs triton, which does not import here. Install it (pip install triton, on a machine "
                "with a CUDA GPU), or use torch.selu.")
    if wrap_triton is None:
        return (f"needs torch.library.triton_op and wrap_triton, which torch {torch.__version__} does not have "
                "(they came with torch 2.6). Upgrade torch, or use torch.selu.")
    return None


def available() -> bool:
    """Whether triton imports here and torch can register Triton operators (the kernels need
    a CUDA GPU to run)."""
    return missing() is None


def _jit(fn):
    """``triton.jit``; without triton the plain function, which nothing compiles or calls."""
    return triton.jit(fn) if triton is not None else fn


# region: forward_kernel
@_jit  # triton.jit
def selu_forward_kernel(x_ptr, y_ptr, n, ALPHA: tl.constexpr, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    # 64-bit offsets: program_id * BLOCK in int32 would wrap past 2^31 elements.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last block's tail
    x = tl.load(x_ptr + offsets, mask=mask)
    math = tl.float64 if x.dtype == tl.float64 else tl.float32  # float32 for the 16-bit types, as torch
    v = x.to(math)
    # The coefficients rounded to the math type first, then multiplied in it, as torch does.
    scale = tl.full((), SCALE, math)
    negative_coef = tl.full((), ALPHA, math) * scale
    e = libdevice.expm1(v)
    if math == tl.float32:
        # Triton links libdevice in flush-to-zero mode (and torch.compile keeps it so): its
        # expm1f returns 0 for a subnormal x. expm1(x) rounds to x there, which is what
        # torch's expm1f (no flush) returns, so take x itself. expf needs no such care.
        e = tl.where(tl.abs(v) < 1.1754943508222875e-38, v, e)  # below 2^-126: subnormal
    # x > 0, not x >= 0: -0.0 and NaN take the expm1 side, which keeps the sign and the NaN.
    y = tl.where(v > 0, v * scale, e * negative_coef)
    tl.store(y_ptr + offsets, y.to(x.dtype), mask=mask)
# endregion


# region: backward_kernel
@_jit  # triton.jit
def selu_backward_kernel(grad_ptr, x_ptr, out_ptr, n, ALPHA: tl.constexpr, SCALE: tl.constexpr,
                         BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    grad = tl.load(grad_ptr + offsets, mask=mask)
    math = tl.float64 if x.dtype == tl.float64 else tl.float32
    v, g = x.to(math), grad.to(math)
    scale = tl.full((), SCALE, math)
    negative_coef = tl.full((), ALPHA, math) * scale
    # grad * lambda for x > 0, else (grad * lambda*alpha) * e^x, left to right as torch's
    # elu_backward; a NaN x takes the e^x side and gives NaN, as in the forward. libdevice's
    # flush to zero changes expf only for a subnormal x, where e^x is 1 with or without it.
    result = tl.where(v > 0, g * scale, g * negative_coef * libdevice.exp(v))
    tl.store(out_ptr + offsets, result.to(x.dtype), mask=mask)
# endregion


# ----------------------------------------------------------------------------- checks


def _check_dtype(name: str, x: torch.Tensor) -> None:
    if x.dtype not in ops.FLOAT_DTYPES:
        raise RuntimeError(
            f"{ops.qualified(name)}: expected a float32, float64, float16 or bfloat16 tensor, got {x.dtype}. "
            "SELU is defined on real numbers and this Triton kernel is compiled for those four types: "
            "convert first, e.g. x.float()."
        )


def _check_backward(grad: torch.Tensor, x: torch.Tensor) -> None:
    _check_dtype(BACKWARD, grad)
    _check_dtype(BACKWARD, x)
    if grad.shape != x.shape or grad.dtype != x.dtype or grad.device != x.device:
        raise RuntimeError(
            f"{ops.qualified(BACKWARD)}: grad is {grad.dtype} {tuple(grad.shape)} on {grad.device} but the saved "
            f"input is {x.dtype} {tuple(x.shape)} on {x.device}; both must match the forward's input."
        )


def _grid(n: int):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# ----------------------------------------------------------------------------- the same with torch's operators


def _torch_forward(x: torch.Tensor) -> torch.Tensor:
    """torch.selu, with the Triton kernel's layout (a contiguous result)."""
    return torch.selu(x.contiguous())


def _torch_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """aten.elu_backward from the input, contiguous; a NaN x gives NaN, as the Triton kernel
    (and the course's kernels) do: torch's own CPU loop does so only in its vectorized part."""
    x = x.contiguous()
    result = torch.ops.aten.elu_backward(grad.contiguous(), check.SELU_ALPHA, check.SELU_SCALE, 1.0, False, x)
    return torch.where(x.isnan(), x, result)


# ----------------------------------------------------------------------------- the operators


# region: register
def _selu_triton(x: torch.Tensor) -> torch.Tensor:
    """SELU: the Triton kernel on a CUDA tensor, torch.selu elsewhere. A non-contiguous ``x``
    is copied to a contiguous one first, and the result is contiguous."""
    _check_dtype(FORWARD, x)
    if x.device.type != "cuda":  # what torch.compile traces for a CPU tensor (the CPU kernel runs in eager)
        return _torch_forward(x)
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    wrap_triton(selu_forward_kernel)[_grid(n)](
        x, y, n, ALPHA=check.SELU_ALPHA, SCALE=check.SELU_SCALE, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return y


def _selu_triton_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad * d selu/dx from the forward's input ``x``; the result is contiguous."""
    _check_backward(grad, x)
    if x.device.type != "cuda":
        return _torch_backward(grad, x)
    grad, x = grad.contiguous(), x.contiguous()
    result = torch.empty_like(x)
    n = x.numel()
    wrap_triton(selu_backward_kernel)[_grid(n)](
        grad, x, result, n, ALPHA=check.SELU_ALPHA, SCALE=check.SELU_SCALE, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return result


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])  # the backward needs x alone


def _selu_rule(ctx, grad):
    (x,) = ctx.saved_tensors
    return selu_triton_backward(grad, x)


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _selu_backward_rule(ctx, grad_grad_in):
    # grad_in = grad * f(x), f(x) = lambda for x > 0, lambda*alpha*e^x otherwise: so
    # d/dgrad = f(x), and d/dx = grad * lambda*alpha*e^x where x <= 0, else 0.
    grad, x = ctx.saved_tensors
    d_grad = selu_triton_backward(grad_grad_in, x)
    d_x = torch.where(x <= 0, selu_triton_backward(grad * grad_grad_in, x), 0)
    return d_grad, d_x


_registered = False


def register() -> bool:
    """Define ``selu_course::selu_triton`` and ``selu_course::selu_triton_backward`` (once: a
    second call does nothing) with their CPU kernels and autograd rules. Returns whether they
    exist, which they do wherever :func:`available`; elsewhere it defines nothing."""
    global _registered
    if _registered or not available():
        return _registered
    if not hasattr(torch.ops.selu_course, FORWARD):  # not already defined by an earlier import of this module
        forward = triton_op(ops.qualified(FORWARD), _selu_triton, mutates_args=())
        backward = triton_op(ops.qualified(BACKWARD), _selu_triton_backward, mutates_args=())
        forward.register_kernel("cpu")(_cpu_forward)
        backward.register_kernel("cpu")(_cpu_backward)
        forward.register_autograd(_selu_rule, setup_context=_save_input)
        backward.register_autograd(_selu_backward_rule, setup_context=_save_inputs)
    _registered = True
    return True
# endregion


def _cpu_forward(x: torch.Tensor) -> torch.Tensor:
    _check_dtype(FORWARD, x)
    return _torch_forward(x)


def _cpu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _check_backward(grad, x)
    return _torch_backward(grad, x)


# ----------------------------------------------------------------------------- the thin layer


def _require() -> None:
    if not register():
        raise RuntimeError(f"{ops.qualified(FORWARD)} {missing()}")


def selu_triton(x: torch.Tensor) -> torch.Tensor:
    """SELU by the Triton kernel (CUDA) or torch.selu (elsewhere); a contiguous result."""
    _require()
    return torch.ops.selu_course.selu_triton.default(x)


def selu_triton_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``grad * d selu/dx`` from the forward's input ``x``, by the Triton kernel on CUDA."""
    _require()
    return torch.ops.selu_course.selu_triton_backward.default(grad, x)
