"""Is a SELU kernel correct? A check against a float64 reference, on inputs that catch bugs.

>>> report = helpers.check.check_unary(ext.selu)          # doctest: +SKIP
>>> report                      # a table in Jupyter, one row per group of inputs
>>> report.first_failure()      # the first bad elements: x, what came out, what was expected
>>> report.assert_ok()          # in a test: AssertionError with the summary

Why not ``torch.allclose(f(x), ref(x))`` on ``torch.rand`` inputs? Because ``torch.rand`` is
never negative, so half of SELU is never run (:func:`naive_rand_check` shows that ``λ·x``
passes it), and because a relative tolerance hides the bugs that matter here: an
``exp(x) - 1`` that loses every digit near 0, flushed subnormals, a lost sign of zero,
NaN turned into a number. :func:`check_unary` instead

* draws fresh inputs for every trial from distributions aimed at each part of the
  function (:func:`make_input`), plus hand-picked special values (:func:`special_values`)
  and views whose data pointer is misaligned or whose shape is 2-D with odd sizes;
* runs sizes that are not multiples of any vector width, so that tails are exercised;
* poisons every output allocation with NaN (:func:`poisoned_outputs`), so an element
  that the kernel never writes cannot pass by accident;
* compares in units in the last place of the dtype (:func:`ulp_distance`) against the
  float64 reference rounded to that dtype, and separately requires NaN exactly where the
  reference is NaN, the same infinities, and the reference's sign wherever it is ±0.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from . import env

__all__ = [
    "SELU_ALPHA",
    "SELU_SCALE",
    "DEFAULT_SIZES",
    "DEFAULT_DISTRIBUTIONS",
    "MAX_ULP",
    "DTYPES",
    "harness_input",
    "assert_close_ulps",
    "assert_selu",
    "selu_reference",
    "selu_backward_reference",
    "selu_backward_from_output_reference",
    "BACKWARD_MAX_ULP",
    "BACKWARD_REFERENCES",
    "backward_underflow",
    "assert_selu_backward",
    "relu_reference",
    "special_values",
    "make_input",
    "ulp_distance",
    "poisoned_outputs",
    "check_unary",
    "naive_rand_check",
    "CaseResult",
    "CheckReport",
    "Failure",
    "Agreement",
    "agreement",
    "outcome",
]

# The constants of Klambauer et al. (2017), as torch uses them (Python floats: float64).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# Small sizes around every power of two a kernel might vectorise or unroll by (tails of
# 1..vector-1 elements), sizes that no block of threads divides (1000, 1023), and one
# element past 2^12 and 2^16 (a whole extra block or grid step for one element). Small
# enough that a default check takes a fraction of a second on a CPU.
DEFAULT_SIZES = (1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 127, 1000, 1023, 4097, 65537)
DEFAULT_DISTRIBUTIONS = ("normal", "wide_uniform", "tiny", "huge", "large_negative")

# The tolerance, in ulps of the output dtype, against the float64 reference rounded
# to that dtype: the one table that tests, notebooks and the harness all use.
# float32/float64: expm1 in glibc, SLEEF and CUDA is within an ulp, and multiplying by
# the rounded coefficient λ·α adds at most one more rounding, so an honest kernel is
# within 2. Measured: torch.selu and the course's CPU kernel on 10^8 inputs (random
# bit patterns, and dense draws from [-20, 0] and [-1e-3, 0]) stay within 2 ulp in
# float32 and float64, and torch.selu on the GPU is within 2 ulp on every float32
# input. Every real bug is off by thousands of ulps or more. float16/bfloat16: the
# course (and torch) computes in float32 and rounds once, so the result is the
# correctly rounded value or, when the exact value is within a float32 error of a
# tie, its neighbour: at most 1 ulp.
MAX_ULP = {torch.float32: 2, torch.float64: 2, torch.float16: 1, torch.bfloat16: 1}
DTYPES = tuple(MAX_ULP)
# The backward pass, against its float64 reference rounded to the dtype: grad·λα is
# rounded, then multiplied by a rounded exp (or y + λα is rounded, then multiplied),
# so float32 and float64 carry up to three roundings of the working precision;
# float16/bfloat16 compute in float32 and round once, as in the forward pass.
BACKWARD_MAX_ULP = {torch.float32: 3, torch.float64: 3, torch.float16: 1, torch.bfloat16: 1}

# How many views of each kind a check makes, and their sizes: odd, so no vector width
# divides them.
VIEW_OFFSETS = (1, 2, 3)
VIEW_NUMEL = 1000
VIEW_2D_SHAPE = (37, 29)
# How many bad elements a failing case keeps to show.
EXAMPLES_PER_CASE = 5

_BITS_DTYPE = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
_INT64_MAX = torch.iinfo(torch.int64).max


# ---------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------
def selu_reference(x: torch.Tensor) -> torch.Tensor:
    """SELU in float64: ``λ·x`` for ``x > 0``, ``λ·α·expm1(x)`` otherwise.

    ``expm1`` rather than ``exp(x) - 1``: near 0 the subtraction cancels every digit.
    ``x > 0`` (not ``x >= 0``) sends ``-0.0`` down the ``expm1`` branch, where
    ``expm1(-0.0) = -0.0`` keeps the sign, as torch.selu does; NaN fails the comparison
    and ``expm1(NaN)`` is NaN, so NaN propagates.
    """
    x = x.double()
    return torch.where(x > 0, SELU_SCALE * x, (SELU_SCALE * SELU_ALPHA) * torch.expm1(x))


def selu_backward_reference(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``grad * d selu/dx`` in float64, from the forward's input: ``grad·λ`` for ``x > 0``,
    ``grad·λα·eˣ`` otherwise. ``x > 0``, as in the forward: NaN gives NaN, and both
    zeros take ``λα·e⁰``."""
    grad, x = grad.double(), x.double()
    return torch.where(x > 0, grad * SELU_SCALE, grad * (SELU_SCALE * SELU_ALPHA) * torch.exp(x))


def selu_backward_from_output_reference(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The same from the forward's output ``y = selu(x)``: ``grad·λ`` for ``y > 0``,
    ``grad·(y + λα)`` otherwise (for x <= 0, λα·eˣ = y + λα), in float64.

    ``λα`` is taken rounded to the math type of ``y``'s dtype (float32 for the 16-
    and 32-bit types), as a kernel has it: where x is very negative, y is within
    rounding of −λα and the sum cancels, so the exact constant would measure the
    rounding of the constant rather than the kernel.
    """
    math_type = torch.float64 if y.dtype == torch.float64 else torch.float32
    coefficient = torch.tensor(SELU_SCALE, dtype=math_type) * torch.tensor(SELU_ALPHA, dtype=math_type)
    grad, y = grad.double(), y.double()
    return torch.where(y > 0, grad * SELU_SCALE, grad * (y + coefficient.double()))


def relu_reference(x: torch.Tensor) -> torch.Tensor:
    """ReLU in float64 as ``x < 0 ? 0 : x``: NaN propagates and ``relu(-0.0) = -0.0``.

    Written out rather than ``torch.relu`` because torch's own answer for -0.0 depends
    on the device (-0.0 on the CPU, +0.0 on CUDA, measured with torch 2.11): a
    reference must not change with the machine it runs on.
    """
    x = x.double()
    return torch.where(x < 0, torch.zeros_like(x), x)


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
def _subnormals(dtype: torch.dtype) -> tuple[float, float]:
    """(smallest subnormal, smallest normal) of a floating dtype.

    The smallest subnormal is ``tiny · eps``: the last of the ``1/eps`` binary digits of a
    subnormal's significand, at the smallest normal exponent.
    """
    info = torch.finfo(dtype)
    return info.tiny * info.eps, info.tiny


def special_values(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The values where SELU kernels go wrong, as a 1-D tensor of ``dtype`` on ``device``.

    ±0 (the sign must survive), ±inf, NaN; the smallest subnormal, a few larger subnormals
    and the largest, both signs (flushed by fast-math code); ±tiny; values near 0 where
    ``exp(x) - 1`` cancels and only ``expm1`` is right; ordinary values from ±eps to ±10;
    the negative values where ``exp`` underflows (float32 ``exp`` leaves the normal range
    below about -87.3 and reaches 0 below about -103.3); and ±max, where ``λ·x`` overflows
    to inf. Every value listed fits float16 (max 65504), so none needs clamping; those too
    small for a dtype (1e-30 in float16) round to ±0 or a subnormal, special values too.
    """
    info = torch.finfo(dtype)
    smallest, tiny = _subnormals(dtype)
    mantissa_bits = round(-np.log2(info.eps))
    magnitudes = [
        smallest,
        2 * smallest,
        tiny * 2.0 ** -(mantissa_bits // 2),
        tiny * 2.0**-1,
        tiny - smallest,  # the largest subnormal
        tiny,
        1e-30, 1e-10, 1e-7, 1e-5, 1e-3,  # expm1 territory: exp(x) - 1 loses these digits
        info.eps, 0.25, 0.5, 1.0, 2.0, 10.0,
        info.max / 2, info.max,
    ]
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan")]
    values += [v for m in magnitudes for v in (m, -m)]
    values += [-20.0, -88.5, -100.0, -104.0, -750.0, -1e4]  # exp underflows
    return torch.tensor(values, dtype=torch.float64).to(device=_device(device), dtype=dtype)


def _log_uniform(low: float, high: float, shape, generator: torch.Generator) -> torch.Tensor:
    """Magnitudes whose base-2 logarithm is uniform on [log2 low, log2 high], in float64.

    Base 2 because the ends used here (tiny, the smallest subnormal) are powers of two;
    the clamp keeps a rounding in ``exp2`` from stepping past either end.
    """
    lo, hi = float(np.log2(low)), float(np.log2(high))
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    return torch.exp2(lo + (hi - lo) * u).clamp(low, high)


def _random_sign(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    negative = torch.rand(x.shape, generator=generator, dtype=torch.float64) < 0.5
    return torch.where(negative, -x, x)


def make_input(
    distribution: str,
    shape,
    dtype: torch.dtype = torch.float32,
    device=None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A random input of ``shape``, drawn on the CPU in float64 and moved to ``device``/``dtype``.

    Drawing on the CPU from a seeded :class:`torch.Generator` makes an input the same
    whatever the device, so a failure on the GPU can be replayed anywhere.

    * ``"normal"``: N(0, 1), both branches of SELU in equal measure.
    * ``"wide_uniform"``: uniform on [-100, 100]; large positives and exp near underflow.
    * ``"tiny"``: random sign, magnitudes log-uniform on [1e-30, 1e-2] (the lower end raised
      to the smallest normal where the dtype does not reach 1e-30), where ``exp(x) - 1``
      cancels; one element in eight is instead a subnormal, log-uniform between the
      smallest subnormal and the smallest normal, for code that flushes them.
    * ``"huge"``: random sign, magnitudes log-uniform on [1, max/2] of the dtype.
    * ``"large_negative"``: uniform on [-1e4, -80], where exp underflows to 0 (within
      float16's range too).
    """
    if generator is None:
        generator = torch.Generator().manual_seed(_time_seed())
    info = torch.finfo(dtype)
    if distribution == "normal":
        x = torch.randn(shape, generator=generator, dtype=torch.float64)
    elif distribution == "wide_uniform":
        x = torch.rand(shape, generator=generator, dtype=torch.float64) * 200.0 - 100.0
    elif distribution == "tiny":
        smallest, tiny = _subnormals(dtype)
        normal = _log_uniform(max(1e-30, tiny), 1e-2, shape, generator)
        subnormal = _log_uniform(smallest, tiny, shape, generator)
        pick_subnormal = torch.rand(shape, generator=generator, dtype=torch.float64) < 1 / 8
        x = _random_sign(torch.where(pick_subnormal, subnormal, normal), generator)
    elif distribution == "huge":
        x = _random_sign(_log_uniform(1.0, info.max / 2, shape, generator), generator)
    elif distribution == "large_negative":
        x = -1e4 + (1e4 - 80.0) * torch.rand(shape, generator=generator, dtype=torch.float64)
    else:
        raise ValueError(
            f"unknown distribution {distribution!r}; choose from {', '.join(DEFAULT_DISTRIBUTIONS)}"
        )
    return x.to(device=_device(device), dtype=dtype)


def harness_input(
    numel: int = 4096,
    dtype: torch.dtype = torch.float32,
    device=None,
    seed: int = 0,
) -> torch.Tensor:
    """``numel`` elements for a test: the special values first, then equal shares of every
    distribution of :func:`make_input` (from one seeded generator, so a failure replays)."""
    generator = torch.Generator().manual_seed(seed)
    special = special_values(dtype, "cpu")
    rest = max(numel - special.numel(), 0)
    shares = [rest // len(DEFAULT_DISTRIBUTIONS) + (i < rest % len(DEFAULT_DISTRIBUTIONS))
              for i in range(len(DEFAULT_DISTRIBUTIONS))]
    parts = [special] + [make_input(d, (n,), dtype, "cpu", generator) for d, n in zip(DEFAULT_DISTRIBUTIONS, shares)]
    return torch.cat(parts)[:numel].to(_device(device))


def _time_seed() -> int:
    """A base seed that differs from call to call, so repeated checks see new inputs."""
    return time.time_ns() % 10**9


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else env.default_device()


# ---------------------------------------------------------------------------------------
# Units in the last place
# ---------------------------------------------------------------------------------------
def _ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Bit patterns of ``x`` as int64 keys whose order is the order of the floats.

    IEEE floats of one sign are ordered like their bit patterns read as integers, so a
    non-negative float keeps its pattern, and a negative one (sign bit set) is mapped to
    ``-(magnitude bits) - 1``. That puts -0.0 at -1, one step below +0.0 at 0: -0 and +0
    are different floats, one ulp apart, so a lost sign of zero shows as 1 ulp and the
    distance between ±x counts every float in between, both zeros included.
    """
    bits_dtype = _BITS_DTYPE.get(x.dtype)
    if bits_dtype is None:
        raise TypeError(f"ulp_distance: expected float16, bfloat16, float32 or float64, got {x.dtype}")
    bits = x.view(bits_dtype).to(torch.int64)
    magnitude_mask = torch.iinfo(bits_dtype).max  # every bit but the sign
    return torch.where(bits >= 0, bits, -(bits & magnitude_mask) - 1)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many floats of ``a``'s dtype lie between ``a`` and ``b``, as int64 (elementwise).

    ``b`` is first rounded to ``a``'s dtype, so with ``b`` the float64 reference, 0 means
    ``a`` is the correctly rounded result. -0.0 and +0.0 count as one ulp apart (see
    :func:`_ordered_bits`); a distance too large for int64 (only float64 values of
    opposite signs near ±max) saturates at 2^63 - 1. NaN and ±inf get meaningless
    distances (inf is "one past max"): callers compare those positions separately.
    """
    ka = _ordered_bits(a)
    kb = _ordered_bits(b.to(a.dtype))
    diff = ka - kb
    # int64 subtraction wraps only when the keys have opposite signs; it has wrapped when
    # the result's sign differs from the true difference's, which is the sign of ka.
    wrapped = ((ka >= 0) != (kb >= 0)) & ((diff >= 0) != (ka >= 0))
    return torch.where(wrapped, torch.full_like(diff, _INT64_MAX), diff.abs())


def assert_close_ulps(actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, max_ulp: int) -> None:
    """For tests: ``actual`` equals ``expected`` (rounded to actual's dtype) within ``max_ulp``,
    with NaN, infinities and the sign of zero exactly; the message shows the first bad ``x``."""
    assert actual.shape == expected.shape, (tuple(actual.shape), tuple(expected.shape))
    a = actual.reshape(-1)
    e = expected.reshape(-1).to(device=a.device, dtype=a.dtype)
    xs = x.reshape(-1).to(a.device)
    a_nan, e_nan = a.isnan(), e.isnan()
    numbers = ~(a_nan | e_nan)
    bad = (a_nan != e_nan) | (numbers & ((a.isinf() | e.isinf()) & (a != e)))
    bad |= numbers & (ulp_distance(a, e) > max_ulp)  # counts a lost sign of zero as 1 ulp...
    bad |= numbers & (e == 0) & (a.signbit() != e.signbit())  # ...so check it directly too
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {a.numel()} elements beyond {max_ulp} ulp (or NaN, inf, sign of 0 wrong); "
            f"first at index {i}: x={xs[i].item()!r}, got {a[i].item()!r}, expected {e[i].item()!r}"
        )


BACKWARD_REFERENCES = {"selu_backward": selu_backward_reference,
                       "selu_backward_from_output": selu_backward_from_output_reference}


def backward_underflow(op: str, saved: torch.Tensor) -> torch.Tensor:
    """Where a backward result carries only a few significant bits by construction (a bool mask).

    From the input, ``grad·λα`` is multiplied by eˣ, and where eˣ falls below the smallest
    normal number of the math type (float32 for the 16- and 32-bit types) it is rounded on
    the subnormal grid: the product keeps that coarse rounding, scaled by |grad·λα|. torch's
    formula does the same. From the output no such step exists (an empty mask).
    """
    s = saved.detach().cpu().double()
    if op != "selu_backward":
        return torch.zeros_like(s, dtype=torch.bool)
    math_type = torch.float64 if saved.dtype == torch.float64 else torch.float32
    return (s <= 0) & (torch.exp(s) < torch.finfo(math_type).tiny)


def assert_selu_backward(actual: torch.Tensor, op: str, grad: torch.Tensor, saved: torch.Tensor,
                         x: torch.Tensor | None = None) -> None:
    """For tests: ``actual`` is the backward ``op`` (``"selu_backward"`` from the input,
    ``"selu_backward_from_output"`` from the output) of ``grad`` and ``saved``, within
    :data:`BACKWARD_MAX_ULP` of the float64 reference, NaN, infinities and signs of zero exact.

    Where :func:`backward_underflow` holds, the result must instead have the reference's
    sign and be no larger than |grad·λα| times the smallest normal number of the math type,
    plus the final rounding. ``x`` is the forward's input, shown in a failure's message.
    """
    expected = BACKWARD_REFERENCES[op](grad.cpu(), saved.cpu())
    x = saved if x is None else x
    underflow = backward_underflow(op, saved)
    kept = ~underflow
    got = actual.cpu()
    assert_close_ulps(got[kept], expected[kept], x.cpu()[kept], BACKWARD_MAX_ULP[saved.dtype])
    if underflow.any():
        math_type = torch.float64 if saved.dtype == torch.float64 else torch.float32
        tiny, out = torch.finfo(math_type).tiny, torch.finfo(saved.dtype)
        small, want = got.double()[underflow], expected[underflow]
        limit = grad.cpu().double()[underflow].abs() * (SELU_SCALE * SELU_ALPHA) * tiny + out.tiny * out.eps
        assert (small.abs() <= limit).all() and ((small == 0) | (small.sign() == want.sign())).all(), (
            "an element where e^x underflows is larger than |grad*lambda*alpha| * tiny, or has the wrong sign")


def assert_selu(actual: torch.Tensor, x: torch.Tensor) -> None:
    """For tests: ``actual`` is selu(x) within :data:`MAX_ULP`, against the float64
    reference computed on the CPU (independent of the GPU's math library)."""
    assert actual.dtype == x.dtype, (actual.dtype, x.dtype)
    assert_close_ulps(actual, selu_reference(x.cpu()), x, MAX_ULP[x.dtype])


# ---------------------------------------------------------------------------------------
# Poisoned outputs
# ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Within this block, every newly allocated floating tensor starts full of NaN.

    torch fills uninitialised memory (``torch.empty``, ``empty_like``, the outputs of its
    own ops, and ``at::empty_like`` inside the course's operators, which go through the
    same allocator functions) when deterministic algorithms are on and
    ``torch.utils.deterministic.fill_uninitialized_memory`` is set: NaN for floating
    dtypes, the largest value for integers. An element that a kernel never writes is
    then NaN, where the reference is not, and the check fails, instead of passing on
    whatever a previous correct run left in the recycled memory. ``warn_only=True``: an
    op with no deterministic implementation warns instead of raising. The previous
    settings are restored on exit. (The first call imports the compiler's
    configuration, which ``torch.use_deterministic_algorithms`` also sets: a second or so.)
    """
    was_enabled = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_enabled, warn_only=was_warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = was_filling


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------
def _format_value(value: float, dtype: torch.dtype) -> str:
    """The shortest decimal that reads back as the same value of ``dtype``."""
    if dtype == torch.float64:
        return repr(value)
    if dtype == torch.float16:
        return str(np.float16(value))
    return str(np.float32(value))  # float32, and bfloat16 (whose values are all float32s)


@dataclass
class CaseResult:
    """One input (a distribution at one size in one trial, the special values, or a view).

    Error columns are over elements where output and expected value are both finite:
    ``max_abs`` and ``max_rel`` against the float64 reference, to give the scale
    (``max_rel`` only where the reference is a normal number of the dtype: a correctly
    rounded subnormal can be 50% off), and ``max_ulp`` against the reference rounded to
    the dtype, which is what passes or fails. ``None`` where the output could not be
    compared at all.
    """

    name: str
    group: str
    shape: tuple[int, ...]
    passed: bool
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: int | None = None
    nan_match: bool = True
    inf_match: bool = True
    zero_sign: bool = True
    mismatches: int = 0
    problem: str = ""
    # Up to EXAMPLES_PER_CASE bad elements (CPU tensors of the dtype): x, got, expected.
    examples: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)


@dataclass
class Failure:
    """The first bad elements of the first failing case, to look at.

    Unpacks as ``x, got, expected`` (CPU tensors of the checked dtype; ``expected`` is the
    float64 reference rounded to it); empty when the case failed as a whole (an exception,
    a wrong shape).
    """

    case: str
    problem: str
    x: torch.Tensor
    got: torch.Tensor
    expected: torch.Tensor

    def __iter__(self):
        return iter((self.x, self.got, self.expected))

    def lines(self, limit: int = EXAMPLES_PER_CASE) -> list[str]:
        """The case and its problem, then one line per bad element (at most ``limit``)."""
        dtype = self.x.dtype
        rows = [f"{self.case}: {self.problem}"]
        for x, got, expected, ulp in zip(
            self.x.tolist(), self.got.tolist(), self.expected.tolist(), _ulps_or_none(self.got, self.expected)
        ):
            far = f"  ({ulp:,} ulp)" if ulp is not None else ""
            rows.append(
                f"  x = {_format_value(x, dtype)}  ->  got {_format_value(got, dtype)}, "
                f"expected {_format_value(expected, dtype)}{far}"
            )
            if len(rows) > limit:
                break
        return rows

    def __repr__(self) -> str:
        return "\n".join(self.lines())


def _ulps_or_none(got: torch.Tensor, expected: torch.Tensor) -> list[int | None]:
    """ulp distances where both are finite (None elsewhere), for display."""
    finite = torch.isfinite(got) & torch.isfinite(expected)
    return [u if ok else None for u, ok in zip(ulp_distance(got, expected).tolist(), finite.tolist())]


@dataclass
class Worst:
    """The worst of every case: what a summary line shows."""

    max_abs: float | None
    max_rel: float | None
    max_ulp: int | None
    nan_match: bool
    inf_match: bool
    zero_sign: bool
    failing: list[str]


def _max_or_none(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _fmt(value, spec: str = ".2g") -> str:
    return "-" if value is None else format(value, spec)


def _ok(flag: bool) -> str:
    return "ok" if flag else "WRONG"


@dataclass
class CheckReport:
    """Every case of one :func:`check_unary` call; prints as a summary, shows as a table."""

    name: str
    dtype: torch.dtype
    device: torch.device
    seed: int
    max_ulp: int
    cases: list[CaseResult]
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases)

    @property
    def worst(self) -> Worst:
        return Worst(
            max_abs=_max_or_none(c.max_abs for c in self.cases),
            max_rel=_max_or_none(c.max_rel for c in self.cases),
            max_ulp=_max_or_none(c.max_ulp for c in self.cases),
            nan_match=all(c.nan_match for c in self.cases),
            inf_match=all(c.inf_match for c in self.cases),
            zero_sign=all(c.zero_sign for c in self.cases),
            failing=[c.name for c in self.cases if not c.passed],
        )

    def failing_cases(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def first_failure(self) -> Failure | None:
        """The first failing case's bad elements (see :class:`Failure`); None if all passed."""
        for case in self.cases:
            if not case.passed:
                if case.examples is not None:
                    x, got, expected = case.examples
                else:
                    x = got = expected = torch.empty(0, dtype=self.dtype)
                return Failure(case.name, case.problem, x, got, expected)
        return None

    def assert_ok(self) -> "CheckReport":
        """Raise AssertionError with the summary unless every case passed; return self."""
        if not self.passed:
            raise AssertionError("\n" + str(self))
        return self

    # -- display --------------------------------------------------------------------
    def _headline(self) -> str:
        failing = len(self.failing_cases())
        verdict = f"FAILED {failing} of {len(self.cases)} cases" if failing else f"passed {len(self.cases)} cases"
        return (
            f"{self.name}: {verdict}  ({str(self.dtype).replace('torch.', '')} on {self.device}, "
            f"seed {self.seed}, tolerance {self.max_ulp} ulp, {self.seconds:.2f} s)"
        )

    def _worst_line(self) -> str:
        w = self.worst
        return (
            f"worst: abs err {_fmt(w.max_abs)}, rel err {_fmt(w.max_rel)}, {_fmt(w.max_ulp, ',')} ulp; "
            f"NaN pattern {_ok(w.nan_match)}, ±inf {_ok(w.inf_match)}, sign of zero {_ok(w.zero_sign)}"
        )

    def _abs_err_note(self) -> str | None:
        """Why a passing report may show a huge absolute error: it comes from the largest
        inputs, where one ulp is itself huge; the verdict is in ulps."""
        worst = self.worst.max_abs
        if worst is None or not worst > 1.0:
            return None
        info = torch.finfo(self.dtype)
        top = torch.tensor(info.max, dtype=self.dtype)
        ulp_at_top = float(top) - float(torch.nextafter(top, torch.zeros_like(top)))
        return (f"(abs err grows with the value: next to the largest {str(self.dtype).replace('torch.', '')}, "
                f"{info.max:.3g}, one ulp is {ulp_at_top:.3g}; the verdict is in ulps)")

    def _groups(self) -> dict[str, list[CaseResult]]:
        groups: dict[str, list[CaseResult]] = {}
        for case in self.cases:
            groups.setdefault(case.group, []).append(case)
        return groups

    def __str__(self) -> str:
        lines = [self._headline(), "  " + self._worst_line()]
        if (note := self._abs_err_note()) is not None:
            lines.append("  " + note)
        failing_groups = []
        for group, cases in self._groups().items():
            bad = [c for c in cases if not c.passed]
            if bad:
                worst_ulp = _max_or_none(c.max_ulp for c in bad)
                far = f" ({worst_ulp:.2g} ulp)" if worst_ulp is not None and worst_ulp > self.max_ulp else ""
                failing_groups.append(f"{group} {len(bad)}/{len(cases)}{far}")
        if failing_groups:
            lines.append("  failing: " + ", ".join(failing_groups))
        failure = self.first_failure()
        if failure is not None:
            first, *elements = failure.lines(limit=3)
            lines += ["  first failing case, " + first] + ["  " + line for line in elements]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        rows = [
            "| inputs | cases | failed | max abs err | max rel err | max ulp | NaN | ±inf | sign of 0 | bad elements | first problem |",
            "|---|---:|---:|---:|---:|---:|:-:|:-:|:-:|---:|---|",
        ]
        for group, cases in self._groups().items():
            bad = [c for c in cases if not c.passed]
            rows.append(
                f"| {group} | {len(cases)} | {len(bad)} "
                f"| {_fmt(_max_or_none(c.max_abs for c in cases))} "
                f"| {_fmt(_max_or_none(c.max_rel for c in cases))} "
                f"| {_fmt(_max_or_none(c.max_ulp for c in cases), ',')} "
                f"| {_ok(all(c.nan_match for c in cases))} | {_ok(all(c.inf_match for c in cases))} "
                f"| {_ok(all(c.zero_sign for c in cases))} | {sum(c.mismatches for c in cases):,} "
                f"| {(bad[0].name + ': ' + bad[0].problem).replace('|', '/') if bad else ''} |"
            )
        text = f"**{self._headline()}**\n\n" + "\n".join(rows)
        if (note := self._abs_err_note()) is not None:
            text += f"\n\n*{note}*"
        failure = self.first_failure()
        if failure is not None:
            text += "\n\nFirst bad elements:\n\n```\n" + repr(failure) + "\n```"
        return text


# ---------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------
def _compare(name, group, x, y, reference_out, dtype, max_ulp) -> CaseResult:
    """Element-by-element comparison of ``y`` with the float64 ``reference_out``."""
    expected = reference_out.to(dtype)
    got_nan, expected_nan = torch.isnan(y), torch.isnan(expected)
    finite = torch.isfinite(y) & torch.isfinite(expected)
    nan_bad = got_nan != expected_nan
    unwritten_like = got_nan & ~expected_nan  # what a poisoned, never-written element looks like
    inf_bad = (torch.isinf(y) | torch.isinf(expected)) & ~(got_nan | expected_nan) & (y != expected)
    zero_bad = (expected == 0) & ~got_nan & (torch.signbit(y) != torch.signbit(expected))
    ulp = torch.where(finite, ulp_distance(y, expected), 0)
    ulp_bad = ulp > max_ulp
    bad = nan_bad | inf_bad | zero_bad | ulp_bad

    abs_err = torch.where(finite, (y.double() - reference_out).abs(), 0.0)
    # Relative error only where the reference is a normal number of the dtype: below that
    # the spacing of floats is fixed, so even a correctly rounded subnormal is off by up
    # to 50% relative, which would hide the figure that says how many digits are right.
    normal = finite & (reference_out.abs() >= torch.finfo(dtype).tiny)
    rel_err = torch.where(normal, abs_err / reference_out.abs(), 0.0)
    # One transfer for every number the case needs (one synchronisation on a GPU).
    stats = torch.stack([
        abs_err.max(), rel_err.max(), ulp.max().double(),
        nan_bad.sum(), unwritten_like.sum(), inf_bad.sum(), zero_bad.sum(), ulp_bad.sum(), bad.sum(),
    ]).tolist()
    max_abs, max_rel, worst_ulp = stats[0], stats[1], int(stats[2])
    n_nan, n_unwritten, n_inf, n_zero, n_ulp, n_bad = (int(v) for v in stats[3:])

    problems = []
    if n_unwritten:
        problems.append(f"{n_unwritten} NaN where a number was expected (unwritten? outputs start as NaN)")
    if n_nan - n_unwritten:
        problems.append(f"{n_nan - n_unwritten} numbers where NaN was expected")
    if n_inf:
        problems.append(f"{n_inf} wrong ±inf")
    if n_zero:
        problems.append(f"{n_zero} wrong sign of zero")
    if n_ulp:
        problems.append(f"{n_ulp} beyond {max_ulp} ulp (max {worst_ulp:,})")
    examples = None
    if n_bad:
        where = bad.reshape(-1).nonzero().squeeze(1)[:EXAMPLES_PER_CASE]
        examples = tuple(t.reshape(-1)[where].cpu() for t in (x, y, expected))
    return CaseResult(
        name=name, group=group, shape=tuple(x.shape), passed=n_bad == 0,
        max_abs=max_abs, max_rel=max_rel, max_ulp=worst_ulp,
        nan_match=n_nan == 0, inf_match=n_inf == 0, zero_sign=n_zero == 0, mismatches=n_bad,
        problem=f"{n_bad:,} of {x.numel():,} elements wrong: " + "; ".join(problems) if n_bad else "",
        examples=examples,
    )


def _run_case(fn, reference, name, group, x, dtype, max_ulp) -> CaseResult:
    """Run ``fn`` on ``x`` with poisoned outputs and compare; never raises for fn's errors."""
    def failed(problem: str) -> CaseResult:
        return CaseResult(name=name, group=group, shape=tuple(x.shape), passed=False, problem=problem)

    x_before = x.clone()
    reference_out = reference(x.double())
    try:
        with poisoned_outputs():
            y = fn(x)
        if x.is_cuda:
            # Kernel errors are reported at the next synchronisation: make it this case's.
            torch.cuda.synchronize(x.device)
    except Exception as error:  # a learner's kernel may raise anything; report it as a failed case
        message = str(error).strip().splitlines()
        return failed(f"raised {type(error).__name__}: {message[0] if message else ''}")

    if not isinstance(y, torch.Tensor):
        return failed(f"returned {type(y).__name__}, not a tensor")
    wrong = [
        f"{what} {got}, expected {want}"
        for what, got, want in (("shape", tuple(y.shape), tuple(x.shape)),
                                ("dtype", y.dtype, x.dtype), ("device", y.device, x.device))
        if got != want
    ]
    if wrong:
        return failed("returned " + "; ".join(wrong))
    bits = _BITS_DTYPE[dtype]
    if not torch.equal(x.view(bits), x_before.view(bits)):  # bitwise, so NaN inputs compare equal
        return failed("modified its input")
    return _compare(name, group, x, y, reference_out, dtype, max_ulp)


def check_unary(
    fn: Callable[[torch.Tensor], torch.Tensor],
    reference: Callable[[torch.Tensor], torch.Tensor] = selu_reference,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
    trials: int = 3,
    seed: int | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    distributions: Sequence[str] = DEFAULT_DISTRIBUTIONS,
    include_special: bool = True,
    include_views: bool = True,
    max_ulp: int | None = None,
    name: str | None = None,
) -> CheckReport:
    """Check an elementwise ``fn`` against a float64 ``reference`` on inputs that catch bugs.

    For every trial, size and distribution a fresh input ``x`` (seed ``seed + trial``;
    ``seed`` from the clock unless given, and printed in the report so a failure can be
    replayed), ``y = fn(x)`` with every allocation poisoned with NaN, and ``y`` must have
    ``x``'s shape, dtype and device, leave ``x`` unchanged, and match
    ``reference(x.double())`` rounded to ``dtype``: NaN exactly where it is NaN, the same
    infinities, the same sign where it is ±0, and within ``max_ulp`` ulps elsewhere
    (default :data:`MAX_ULP`). Once per check, :func:`special_values`; once per
    trial, views of a fresh input (special values followed by normal draws): at element
    offsets 1, 2, 3, whose data pointers are not aligned to a vector, and a 2-D odd shape.
    An ``fn`` that raises is a failed case with the exception's message.
    """
    device = _device(device)
    if dtype not in MAX_ULP:
        raise TypeError(f"check_unary: dtype must be one of {', '.join(map(str, MAX_ULP))}, got {dtype}")
    if any(n < 1 for n in sizes):
        raise ValueError(f"check_unary: sizes must be positive, got {list(sizes)}")
    max_ulp = MAX_ULP[dtype] if max_ulp is None else max_ulp
    seed = _time_seed() if seed is None else seed
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    start = time.perf_counter()

    cases = []

    def run(case_name: str, group: str, x: torch.Tensor) -> None:
        cases.append(_run_case(fn, reference, case_name, group, x, dtype, max_ulp))

    if include_special:
        run("special values", "special", special_values(dtype, device))
    for trial in range(trials):
        generator = torch.Generator().manual_seed(seed + trial)
        for distribution in distributions:
            for n in sizes:
                run(f"{distribution} n={n} trial {trial}", distribution,
                    make_input(distribution, (n,), dtype, device, generator))
        if include_views:
            specials = special_values(dtype, device)
            rows, cols = VIEW_2D_SHAPE
            fill = max(VIEW_NUMEL + max(VIEW_OFFSETS), rows * cols + 1) - specials.numel()
            base = torch.cat([specials, make_input("normal", (fill,), dtype, device, generator)])
            for k in VIEW_OFFSETS:
                run(f"view at offset {k} (n={VIEW_NUMEL}) trial {trial}", "views", base[k:k + VIEW_NUMEL])
            run(f"2-D view {VIEW_2D_SHAPE} at offset 1 trial {trial}", "views",
                base[1:1 + rows * cols].view(rows, cols))

    return CheckReport(name=name, dtype=dtype, device=device, seed=seed, max_ulp=max_ulp,
                       cases=cases, seconds=time.perf_counter() - start)


# region: naive_check
def naive_rand_check(
    fn: Callable[[torch.Tensor], torch.Tensor],
    reference: Callable[[torch.Tensor], torch.Tensor] = selu_reference,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
    shape: tuple[int, ...] = (4096,),
    trials: int = 1,
    atol: float = 1e-8,
    rtol: float = 1e-5,
) -> bool:
    """What a naive test does: ``torch.allclose(fn(x), reference(x), atol, rtol)`` on
    ``torch.rand`` inputs, ``trials`` times (``allclose``'s own tolerances unless given;
    KernelBench-style judges use 1e-2 for both, see :mod:`helpers.kernelbench`).

    ``torch.rand`` draws from [0, 1): never negative, so SELU's ``expm1`` branch never runs,
    and ``λ·x`` passes. Shown next to :func:`check_unary`, which fails it. In KernelBench's
    order: the reference first, then ``fn`` on the same tensor, then every stream of the
    device synchronised before comparing. An ``fn`` that overwrites its input, or that
    leaves its work on a stream of its own, passes.
    """
    for _ in range(trials):
        x = torch.rand(shape, dtype=dtype, device=_device(device))
        expected = reference(x.double()).to(dtype)
        got = fn(x)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        if not torch.allclose(got, expected, atol=atol, rtol=rtol):
            return False
    return True
# endregion


# ---------------------------------------------------------------------------------------
# Agreement with another implementation, and what a function does with an input
# ---------------------------------------------------------------------------------------
AGREEMENT_CHUNK = 1 << 26  # elements per step: bounds the int64 temporaries of a huge tensor


@dataclass(frozen=True)
class Agreement:
    """How one result compares with another of the same dtype, element by element.

    ``identical`` counts elements equal bit for bit (NaN counts as equal to NaN, whatever
    its payload); ``max_ulp`` is the largest :func:`ulp_distance` over the elements that
    are NaN in neither (0 when there are none); ``nan_match`` says NaN is in the same
    places in both.
    """

    numel: int
    identical: int
    max_ulp: int
    nan_match: bool

    @property
    def identical_pct(self) -> float:
        return 100.0 * self.identical / self.numel if self.numel else 100.0

    def within(self, max_ulp: int) -> bool:
        """NaN in the same places, and every other element within ``max_ulp`` ulps."""
        return self.nan_match and self.max_ulp <= max_ulp

    def __str__(self) -> str:
        nan = "NaN in the same places" if self.nan_match else "NaN in DIFFERENT places"
        return (f"{self.identical_pct:.4g}% of {self.numel:,} elements identical, "
                f"max {self.max_ulp:,} ulp, {nan}")


def agreement(actual: torch.Tensor, expected: torch.Tensor, chunk: int = AGREEMENT_CHUNK) -> Agreement:
    """``actual`` against ``expected`` (same shape and floating dtype), in ulps of that dtype.

    For claims such as "identical to torch eager, or within 1 ulp": unlike
    :func:`check_unary`, which compares with the float64 reference, this compares two
    implementations with each other. The tensors are compared ``chunk`` elements at a
    time, so a tensor of billions of elements needs only chunk-sized temporaries.
    """
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise ValueError(
            f"agreement: compare tensors of one shape and dtype, got {tuple(actual.shape)} {actual.dtype} "
            f"and {tuple(expected.shape)} {expected.dtype}"
        )
    bits = _BITS_DTYPE.get(actual.dtype)
    if bits is None:
        raise TypeError(f"agreement: expected float16, bfloat16, float32 or float64, got {actual.dtype}")
    a, e = actual.reshape(-1), expected.reshape(-1).to(actual.device)
    identical, worst, nan_match = 0, 0, True
    for start in range(0, a.numel(), chunk):
        x, y = a[start:start + chunk], e[start:start + chunk]
        x_nan, y_nan = x.isnan(), y.isnan()
        identical += int(((x.view(bits) == y.view(bits)) | (x_nan & y_nan)).sum())
        nan_match = nan_match and torch.equal(x_nan, y_nan)
        numbers = ~(x_nan | y_nan)
        if numbers.any():
            worst = max(worst, int(ulp_distance(x[numbers], y[numbers]).max()))
    return Agreement(numel=a.numel(), identical=identical, max_ulp=worst, nan_match=nan_match)


def outcome(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    reference: Callable[[torch.Tensor], torch.Tensor] = torch.selu,
    *,
    max_ulp: int = 1,
    reference_name: str = "torch.selu",
) -> str:
    """What ``fn(x)`` does, in one line: the error it raises, or how its result compares
    with ``reference(x)``.

    For tables of bad input (integer, bool or complex tensors, a tensor on the wrong
    device, non-contiguous or empty tensors): each gets a clear error or a correct
    result, and this says which. A result is "correct" when it has the reference's
    shape, dtype and device, NaN where it has NaN, and every other element within
    ``max_ulp`` ulps of it; "WRONG" otherwise.
    """
    try:
        y = fn(x)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)  # a kernel's error is reported here, not later
    except Exception as error:  # any error is an outcome to report, not to raise
        lines = str(error).strip().splitlines()
        return f"error: {type(error).__name__}: {lines[0] if lines else ''}"
    if not isinstance(y, torch.Tensor):
        return f"WRONG: returned {type(y).__name__}, not a tensor"
    try:
        expected = reference(x)
    except Exception as error:
        lines = str(error).strip().splitlines()
        return f"a result, but {reference_name} raises {type(error).__name__}: {lines[0] if lines else ''}"
    got, want = (y.shape, y.dtype, y.device), (expected.shape, expected.dtype, expected.device)
    if got != want:
        return f"WRONG: shape, dtype, device {tuple(got[0])}, {got[1]}, {got[2]}; {reference_name} gives " \
               f"{tuple(want[0])}, {want[1]}, {want[2]}"
    if y.numel() == 0:
        return f"correct result: an empty tensor of shape {tuple(y.shape)}, as {reference_name} gives"
    match = agreement(y, expected)
    if not match.within(max_ulp):
        return f"WRONG result against {reference_name}: {match}"
    if match.identical == match.numel:
        return f"correct result: identical to {reference_name}"
    return f"correct result: within {match.max_ulp} ulp of {reference_name} ({match.identical_pct:.4g}% identical)"


# --------------------------------------------------------------------------- every input


FP32_PATTERNS = 1 << 32
EXHAUSTIVE_CHUNK = 1 << 27  # fp32 bit patterns per step: 512 MiB of input, a few GiB of temporaries


def every_16_bit_value(dtype: torch.dtype, device=None) -> torch.Tensor:
    """All 65,536 values of ``dtype`` (float16 or bfloat16), NaNs and infinities included, in bit order."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"every_16_bit_value: expected float16 or bfloat16, got {dtype}")
    return torch.arange(-(2**15), 2**15, dtype=torch.int32, device=_device(device)).to(torch.int16).view(dtype)


def fp32_bit_patterns(start: int, stop: int, stride: int = 1, device=None) -> torch.Tensor:
    """The float32 values whose bit patterns, read as unsigned, run from ``start`` to ``stop`` by ``stride``."""
    unsigned = torch.arange(start, stop, stride, dtype=torch.int64, device=_device(device))
    signed = torch.where(unsigned >= 2**31, unsigned - 2**32, unsigned)  # the same 32 bits as int32
    return signed.to(torch.int32).view(torch.float32)


@dataclass(frozen=True)
class Exhaustive:
    """One operator against torch on every input of a dtype (or on every ``stride``-th fp32 pattern)."""

    dtype: torch.dtype
    inputs: int  # how many were tried
    differ_from_torch: int  # results whose bits differ from torch's (NaN = NaN)
    max_ulp_vs_torch: int
    max_ulp_vs_float64: int  # against the float64 reference rounded to dtype; 0 = correctly rounded
    beyond_1_ulp_vs_float64: int  # results more than 1 ulp from the correctly rounded one
    nan_match: bool  # NaN exactly where torch has NaN
    seconds: float

    @property
    def identical(self) -> bool:
        return self.differ_from_torch == 0 and self.nan_match

    def __str__(self) -> str:
        same = "bit-identical to torch" if self.identical else (
            f"{self.differ_from_torch:,} differ from torch (max {self.max_ulp_vs_torch} ulp)")
        return (f"{str(self.dtype).removeprefix('torch.')}: {self.inputs:,} inputs, {same}; max {self.max_ulp_vs_float64} ulp from "
                f"the correctly rounded result, {self.beyond_1_ulp_vs_float64:,} beyond 1 ulp ({self.seconds:.1f} s)")


def exhaustive(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dtype: torch.dtype,
    device=None,
    *,
    fp32_stride: int = 1,
    reference: Callable[[torch.Tensor], torch.Tensor] = torch.selu,
) -> Exhaustive:
    """``fn`` on every input of ``dtype``: all 65,536 of fp16 or bf16; for float32, the 2^32 bit
    patterns taken ``fp32_stride`` apart (1: all of them, about a second on a GPU; a CPU samples).

    Each input is compared bit for bit with ``reference`` (torch eager on the same device)
    and in ulps with SELU computed in float64 and rounded to ``dtype``. Outputs are poisoned
    (NaN) before each call, so an element never written cannot agree by accident.
    """
    device = _device(device)
    start = time.perf_counter()
    if dtype == torch.float32:
        chunks = [(lo, min(lo + EXHAUSTIVE_CHUNK * fp32_stride, FP32_PATTERNS))
                  for lo in range(0, FP32_PATTERNS, EXHAUSTIVE_CHUNK * fp32_stride)]
        inputs = (fp32_bit_patterns(lo, hi, fp32_stride, device) for lo, hi in chunks)
    else:
        inputs = iter([every_16_bit_value(dtype, device)])
    tried = differ = beyond = worst_torch = worst_exact = 0
    nan_match = True
    for x in inputs:
        with poisoned_outputs():
            ours = fn(x)
        theirs = reference(x)
        match = agreement(ours, theirs)
        tried += match.numel
        differ += match.numel - match.identical
        worst_torch = max(worst_torch, match.max_ulp)
        nan_match = nan_match and match.nan_match
        numbers = ~(ours.isnan() | x.isnan())
        ulps = ulp_distance(ours[numbers], selu_reference(x[numbers]))
        if ulps.numel():
            worst_exact = max(worst_exact, int(ulps.max()))
            beyond += int((ulps > 1).sum())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return Exhaustive(dtype, tried, differ, worst_torch, worst_exact, beyond, nan_match, time.perf_counter() - start)
