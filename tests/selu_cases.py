"""Inputs, reference and comparison shared by the kernel tests (CPU and GPU).

The reference is SELU in float64, rounded once to the dtype under test; results
are compared in units in the last place (ulps) of that dtype, with NaN, the
sign of zero and infinities required to match exactly.
"""
from __future__ import annotations

import torch

ALPHA = 1.6732632423543772848170429916717
SCALE = 1.0507009873554804934193349852946
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
TAIL_SIZES = tuple(range(1, 18))  # every remainder modulo 8 (the widest pack), and more

# Ulps allowed against the float64 reference rounded to the dtype. fp32/fp64:
# expm1 is within an ulp, and the coefficient alpha * scale is rounded to the
# dtype and multiplied in it, as torch does. fp16/bf16: computed in float and
# rounded once, which is within an ulp of the correctly rounded value.
MAX_ULPS = {torch.float32: 2, torch.float64: 2, torch.float16: 1, torch.bfloat16: 1}

_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def selu_reference(x: torch.Tensor) -> torch.Tensor:
    """SELU in float64: torch.where(x > 0, scale * x, scale * alpha * expm1(x))."""
    x = x.double()
    return torch.where(x > 0, SCALE * x, SCALE * ALPHA * torch.expm1(x))


def special_values(dtype: torch.dtype) -> torch.Tensor:
    """The inputs where SELU kernels go wrong, representable in ``dtype``."""
    finfo = torch.finfo(dtype)
    smallest_subnormal = finfo.smallest_normal * finfo.eps
    values = [
        0.0, -0.0, float("inf"), float("-inf"), float("nan"),
        smallest_subnormal, -smallest_subnormal, finfo.smallest_normal / 2, -finfo.smallest_normal / 2,
        finfo.smallest_normal, -finfo.smallest_normal, finfo.max, -finfo.max,
        1e-6, -1e-6, 1e-3, -1e-3, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0,
        -20.0, -88.0, -88.8, -100.0, -1e4, 60000.0, 1e30,
    ]
    return torch.tensor(values, dtype=torch.float64).to(dtype)


def make_input(dtype: torch.dtype, numel: int = 4096, seed: int = 0) -> torch.Tensor:
    """``numel`` values of both signs: the special values, then normal, small and large ones."""
    generator = torch.Generator().manual_seed(seed)
    special = special_values(dtype)
    count = max(numel - special.numel(), 0)
    magnitudes = 10.0 ** torch.empty(count, dtype=torch.float64).uniform_(-8, 2, generator=generator)
    signs = torch.where(torch.rand(count, generator=generator) < 0.5, -1.0, 1.0).double()
    values = torch.cat([special.double(), signs * magnitudes])[:numel]
    return values.to(dtype)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """How many representable values of the dtype lie between actual and expected (float64)."""

    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(_BITS[t.dtype]).to(torch.int64)
        magnitude = bits & (2 ** (8 * t.element_size() - 1) - 1)
        return torch.where(bits < 0, -magnitude, magnitude)  # monotonic in the value

    a, b = ordered(actual), ordered(expected)
    # Same sign: exact in int64. Opposite signs: a - b could overflow int64, and
    # the distance is the sum of the magnitudes (in float64: huge is huge enough).
    same_sign = (a < 0) == (b < 0)
    return torch.where(same_sign, (a - b).abs().double(), a.abs().double() + b.abs().double())


def assert_close_ulps(actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, max_ulps: int) -> None:
    """actual == expected within ``max_ulps``; NaN, infinities and signs (of zero too) exactly.

    ``expected`` has actual's dtype; ``x`` is the input, for the message. The
    comparison runs on actual's device.
    """
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    device = actual.device
    actual, expected, x = actual.flatten(), expected.to(device).flatten(), x.to(device).flatten()

    def first_failure(bad: torch.Tensor, what: str) -> str:
        i = int(bad.nonzero()[0])
        return (f"{int(bad.sum())} of {bad.numel()} elements {what}; first at index {i}: "
                f"x={x[i].item()!r}, got {actual[i].item()!r}, expected {expected[i].item()!r}")

    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), first_failure(actual.isnan() != nan, "differ in NaN-ness")
    finite = ~nan
    bad_inf = (actual.isinf() != expected.isinf()) & finite
    assert not bad_inf.any(), first_failure(bad_inf, "differ in infinity")
    bad_sign = (actual.signbit() != expected.signbit()) & finite
    assert not bad_sign.any(), first_failure(bad_sign, "have the wrong sign (or sign of zero)")
    far = (ulp_distance(actual, expected) > max_ulps) & finite
    assert not far.any(), first_failure(far, f"are more than {max_ulps} ulp off")


def assert_selu(actual: torch.Tensor, x: torch.Tensor) -> None:
    """``actual`` is selu(x), within MAX_ULPS of the float64 reference."""
    assert actual.dtype == x.dtype
    expected = selu_reference(x.cpu()).to(x.dtype)  # on the CPU: independent of the GPU's math library
    assert_close_ulps(actual, expected, x, MAX_ULPS[x.dtype])
