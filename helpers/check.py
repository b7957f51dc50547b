"""Is a SELU kernel correct? :func:`check_unary` compares it with a float64 reference on inputs that catch bugs.

Not ``torch.allclose`` on ``torch.rand``: that is never negative, so half of SELU never runs
(:func:`naive_rand_check` passes ``λ·x``), and a relative tolerance hides a cancelling ``exp(x) - 1``, flushed
subnormals, a lost sign of zero. So: fresh inputs of both signs, special values, odd sizes, misaligned views,
outputs poisoned with NaN, and ulps with NaN, ±inf and the sign of zero exact."""
from __future__ import annotations

import contextlib
import time
from collections import namedtuple
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from . import env

# The constants of Klambauer et al. (2017), as torch uses them (Python floats: float64).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# Tails of 1..vector-1 elements around every power of two a kernel might vectorise by, sizes no
# block divides, and one element past 2^12 and 2^16; small enough for a fraction of a second on a CPU.
DEFAULT_SIZES = (1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 127, 1000, 1023, 4097, 65537)
DEFAULT_DISTRIBUTIONS = ("normal", "wide_uniform", "tiny", "huge", "large_negative")

# Ulps of the output dtype from the float64 reference rounded to it. float32/64: expm1 is within an ulp, the
# product with the rounded λ·α adds one rounding (torch.selu and the course's kernels stay within 2 on 10^8
# inputs; real bugs are off by thousands). float16/bfloat16 compute in float32 and round once: 1 ulp.
MAX_ULP = {torch.float32: 2, torch.float64: 2, torch.float16: 1, torch.bfloat16: 1}
DTYPES = tuple(MAX_ULP)
# The backward pass rounds up to three times in float32/64 (grad·λα, exp, the product).
BACKWARD_MAX_ULP = {torch.float32: 3, torch.float64: 3, torch.float16: 1, torch.bfloat16: 1}

# Views of odd sizes at element offsets that no vector width divides.
VIEW_OFFSETS, VIEW_NUMEL, VIEW_2D_SHAPE = (1, 2, 3), 1000, (37, 29)
EXAMPLES_PER_CASE = 5  # bad elements a failing case keeps to show

_OK = {True: "ok", False: "WRONG"}
_BITS_DTYPE = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
               torch.float64: torch.int64}


def selu_reference(x: torch.Tensor) -> torch.Tensor:
    """SELU in float64. ``expm1``, not ``exp(x) - 1``, which cancels near 0; ``x > 0`` sends -0.0
    to ``expm1(-0.0) = -0.0`` (the sign kept, as torch.selu does) and lets NaN propagate."""
    x = x.double()
    return torch.where(x > 0, SELU_SCALE * x, (SELU_SCALE * SELU_ALPHA) * torch.expm1(x))


def selu_backward_reference(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``grad * selu'(x)`` in float64: ``grad·λ`` for ``x > 0``, ``grad·λα·eˣ`` otherwise."""
    grad, x = grad.double(), x.double()
    return torch.where(x > 0, grad * SELU_SCALE, grad * (SELU_SCALE * SELU_ALPHA) * torch.exp(x))


def selu_backward_from_output_reference(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The same from ``y = selu(x)``: ``grad·(y + λα)`` where ``y <= 0``. λα is rounded to the kernel's
    math type, as a kernel has it: where y ≈ −λα the sum cancels, and the exact one would measure the constant."""
    math_type = torch.float64 if y.dtype == torch.float64 else torch.float32  # 16-bit types compute in float32
    coefficient = torch.tensor(SELU_SCALE, dtype=math_type) * torch.tensor(SELU_ALPHA, dtype=math_type)
    grad, y = grad.double(), y.double()
    return torch.where(y > 0, grad * SELU_SCALE, grad * (y + coefficient.double()))


def relu_reference(x: torch.Tensor) -> torch.Tensor:
    """ReLU in float64 as ``x < 0 ? 0 : x`` (NaN propagates, relu(-0.0) = -0.0): torch.relu's
    sign of zero depends on the device, and a reference must not."""
    x = x.double()
    return torch.where(x < 0, torch.zeros_like(x), x)


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else env.default_device()


def special_values(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Where SELU kernels go wrong, both signs: ±0, ±inf, NaN, subnormals (flushed by fast math), values near 0
    (``exp(x) - 1`` cancels), ordinary ones, where ``exp`` underflows, and ±max (``λ·x`` overflows)."""
    info = torch.finfo(dtype)
    smallest, tiny, mantissa_bits = info.tiny * info.eps, info.tiny, round(-np.log2(info.eps))
    magnitudes = [
        smallest, 2 * smallest, tiny * 2.0 ** -(mantissa_bits // 2), tiny * 2.0**-1, tiny - smallest, tiny,
        1e-30, 1e-10, 1e-7, 1e-5, 1e-3,  # exp(x) - 1 loses these digits
        info.eps, 0.25, 0.5, 1.0, 2.0, 10.0, info.max / 2, info.max,
    ]
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan")]
    values += [v for m in magnitudes for v in (m, -m)]
    values += [-20.0, -88.5, -100.0, -104.0, -750.0, -1e4]  # float32 exp leaves the normals below -87.3
    return torch.tensor(values, dtype=torch.float64).to(device=_device(device), dtype=dtype)


def _log_uniform(low: float, high: float, shape, generator: torch.Generator) -> torch.Tensor:
    """Magnitudes whose log2 is uniform on [log2 low, log2 high], in float64 (clamped against rounding)."""
    lo, hi = float(np.log2(low)), float(np.log2(high))
    return torch.exp2(lo + (hi - lo) * torch.rand(shape, generator=generator, dtype=torch.float64)).clamp(low, high)


def _random_sign(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.where(torch.rand(x.shape, generator=generator, dtype=torch.float64) < 0.5, -x, x)


def make_input(distribution: str, shape, dtype: torch.dtype = torch.float32, device=None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """A random input, drawn on the CPU in float64 (so a GPU failure replays anywhere): ``"normal"``
    N(0, 1); ``"wide_uniform"`` [-100, 100]; ``"tiny"`` log-uniform on [1e-30, 1e-2], one in eight a
    subnormal; ``"huge"`` log-uniform on [1, max/2]; ``"large_negative"`` [-1e4, -80], where exp underflows."""
    generator = generator or torch.Generator().manual_seed(time.time_ns() % 10**9)
    info = torch.finfo(dtype)
    if distribution == "normal":
        x = torch.randn(shape, generator=generator, dtype=torch.float64)
    elif distribution == "wide_uniform":
        x = torch.rand(shape, generator=generator, dtype=torch.float64) * 200.0 - 100.0
    elif distribution == "tiny":
        normal = _log_uniform(max(1e-30, info.tiny), 1e-2, shape, generator)
        subnormal = _log_uniform(info.tiny * info.eps, info.tiny, shape, generator)
        pick_subnormal = torch.rand(shape, generator=generator, dtype=torch.float64) < 1 / 8
        x = _random_sign(torch.where(pick_subnormal, subnormal, normal), generator)
    elif distribution == "huge":
        x = _random_sign(_log_uniform(1.0, info.max / 2, shape, generator), generator)
    elif distribution == "large_negative":
        x = -1e4 + (1e4 - 80.0) * torch.rand(shape, generator=generator, dtype=torch.float64)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DEFAULT_DISTRIBUTIONS)}")
    return x.to(device=_device(device), dtype=dtype)


def harness_input(numel: int = 4096, dtype: torch.dtype = torch.float32, device=None, seed: int = 0) -> torch.Tensor:
    """``numel`` elements for a test: the special values, then equal seeded shares of every distribution."""
    generator = torch.Generator().manual_seed(seed)
    special = special_values(dtype, "cpu")
    rest, kinds = max(numel - special.numel(), 0), len(DEFAULT_DISTRIBUTIONS)
    shares = [rest // kinds + (i < rest % kinds) for i in range(kinds)]
    drawn = [make_input(d, (n,), dtype, "cpu", generator) for d, n in zip(DEFAULT_DISTRIBUTIONS, shares)]
    return torch.cat([special, *drawn])[:numel].to(_device(device))


def _bits_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in _BITS_DTYPE:
        raise TypeError(f"expected float16, bfloat16, float32 or float64, got {dtype}")
    return _BITS_DTYPE[dtype]


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many steps between neighbouring floats of ``a``'s dtype lie from ``a`` to ``b`` rounded to it, as int64:
    0 against the float64 reference means correctly rounded. NaN and ±inf get meaningless distances."""
    bits_dtype = _bits_dtype(a.dtype)
    # Keys ordered like the floats: a negative one maps to -magnitude - 1, so -0.0 is one step below
    # +0.0 (a lost sign of zero is 1 ulp) and ±x are as far apart as the floats between them.
    ka, kb = (torch.where(k >= 0, k, -(k & torch.iinfo(bits_dtype).max) - 1)
              for k in (t.view(bits_dtype).to(torch.int64) for t in (a, b.to(a.dtype))))
    diff = ka - kb
    # Only keys of opposite signs can wrap (float64 near ±max), and then diff's sign differs from ka's.
    wrapped = ((ka >= 0) != (kb >= 0)) & ((diff >= 0) != (ka >= 0))
    return torch.where(wrapped, torch.iinfo(torch.int64).max, diff.abs())


def assert_close_ulps(actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, max_ulp: int) -> None:
    """For tests: ``actual`` within ``max_ulp`` of ``expected`` rounded to its dtype, with NaN,
    infinities and the sign of zero exact; the message shows the first bad ``x``."""
    assert actual.shape == expected.shape, (tuple(actual.shape), tuple(expected.shape))
    case = _compare("", "", x.to(actual.device), actual, expected.to(actual.device), actual.dtype, max_ulp)
    if not case.passed:
        raise AssertionError(f"{case.problem}; first: {Failure('', '', *case.examples).lines(1)[1].strip()}")


def assert_selu(actual: torch.Tensor, x: torch.Tensor) -> None:
    """For tests: ``actual`` is selu(x) within :data:`MAX_ULP` of the float64 reference, computed on the CPU."""
    assert actual.dtype == x.dtype, (actual.dtype, x.dtype)
    assert_close_ulps(actual, selu_reference(x.cpu()), x, MAX_ULP[x.dtype])


def assert_selu_backward(actual: torch.Tensor, op: str, grad: torch.Tensor, saved: torch.Tensor,
                         x: torch.Tensor | None = None) -> None:
    """For tests: ``actual`` is ``op`` (``"selu_backward"`` from the input or ``"selu_backward_from_output"``)
    of ``grad`` and ``saved``, within :data:`BACKWARD_MAX_ULP`; ``x`` is shown in a failure's message.
    From the input, where eˣ is subnormal in the math type it keeps only a few bits (in torch's formula
    too): there the result must have the reference's sign and be at most |grad·λα|·tiny."""
    reference = {"selu_backward": selu_backward_reference,
                 "selu_backward_from_output": selu_backward_from_output_reference}[op]
    expected, got, s = reference(grad.cpu(), saved.cpu()), actual.cpu(), saved.detach().cpu().double()
    tiny = torch.finfo(torch.float64 if saved.dtype == torch.float64 else torch.float32).tiny
    underflow = (s <= 0) & (torch.exp(s) < tiny) if op == "selu_backward" else torch.zeros_like(s, dtype=torch.bool)
    kept = ~underflow
    assert_close_ulps(got[kept], expected[kept], (saved if x is None else x).cpu()[kept], BACKWARD_MAX_ULP[saved.dtype])
    if underflow.any():
        out = torch.finfo(saved.dtype)
        small, want = got.double()[underflow], expected[underflow]
        limit = grad.cpu().double()[underflow].abs() * (SELU_SCALE * SELU_ALPHA) * tiny + out.tiny * out.eps
        assert (small.abs() <= limit).all() and ((small == 0) | (small.sign() == want.sign())).all(), (
            "an element where e^x underflows is larger than |grad*lambda*alpha| * tiny, or has the wrong sign")


@contextlib.contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Within this block every new floating tensor (``torch.empty``, ``at::empty_like`` in an operator)
    starts full of NaN, so an element a kernel never writes fails instead of passing on what recycled
    memory held (torch's deterministic mode, ``warn_only``, with ``fill_uninitialized_memory``)."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]


def _format_value(value: float, dtype: torch.dtype) -> str:
    """The shortest decimal that reads back as the same value of ``dtype`` (bfloat16's are float32s)."""
    return repr(value) if dtype == torch.float64 else str((np.float16 if dtype == torch.float16 else np.float32)(value))


# One input (a distribution at one size in one trial, the special values, or a view). max_ulp is over elements
# finite in both, None when the output could not be compared; examples: up to EXAMPLES_PER_CASE bad elements
# (CPU tensors of the dtype) as (x, got, expected).
CaseResult = namedtuple("CaseResult", "name group passed max_ulp nan_match inf_match zero_sign mismatches problem "
                        "examples", defaults=(None, True, True, True, 0, "", None))


@dataclass
class Failure:
    """The first bad elements of a failing case; unpacks as ``x, got, expected`` (expected: the
    reference rounded to the dtype), empty when the case failed as a whole (an exception, a shape)."""

    case: str
    problem: str
    x: torch.Tensor
    got: torch.Tensor
    expected: torch.Tensor

    def __iter__(self):
        return iter((self.x, self.got, self.expected))

    def lines(self, limit: int = EXAMPLES_PER_CASE) -> list[str]:
        """The case and its problem, then one line per bad element (at most ``limit``)."""
        x, got, expected = self.x[:limit], self.got[:limit], self.expected[:limit]
        ulps = torch.where(got.isfinite() & expected.isfinite(), ulp_distance(got, expected), -1).tolist()
        rows, dtype = [f"{self.case}: {self.problem}"], got.dtype
        for x_i, got_i, expected_i, ulp in zip(x.tolist(), got.tolist(), expected.tolist(), ulps):
            rows.append(f"  x = {_format_value(x_i, x.dtype)}  ->  got {_format_value(got_i, dtype)}, expected "
                        f"{_format_value(expected_i, dtype)}" + (f"  ({ulp:,} ulp)" if ulp >= 0 else ""))
        return rows

    def __repr__(self) -> str:
        return "\n".join(self.lines())


# The worst over some cases: what a summary line or a table row shows.
Worst = namedtuple("Worst", "max_ulp nan_match inf_match zero_sign failing")


def _worst(cases: Sequence[CaseResult]) -> Worst:
    return Worst(max((c.max_ulp for c in cases if c.max_ulp is not None), default=None),
                 all(c.nan_match for c in cases), all(c.inf_match for c in cases),
                 all(c.zero_sign for c in cases), [c.name for c in cases if not c.passed])


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
        return _worst(self.cases)

    def failing_cases(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def first_failure(self) -> Failure | None:
        """The first failing case's bad elements; None if every case passed."""
        failing, empty = self.failing_cases(), torch.empty(0, dtype=self.dtype)
        return Failure(failing[0].name, failing[0].problem, *(failing[0].examples or (empty,) * 3)) if failing else None

    def assert_ok(self) -> "CheckReport":
        """Raise AssertionError with the summary unless every case passed; return self."""
        if not self.passed:
            raise AssertionError("\n" + str(self))
        return self

    def _summary(self) -> list[str]:
        failing, w = len(self.failing_cases()), self.worst
        verdict = f"FAILED {failing} of {len(self.cases)} cases" if failing else f"passed {len(self.cases)} cases"
        return [f"{self.name}: {verdict}  ({str(self.dtype).removeprefix('torch.')} on {self.device}, seed "
                f"{self.seed}, tolerance {self.max_ulp} ulp, {self.seconds:.2f} s)",
                f"worst: {'-' if w.max_ulp is None else f'{w.max_ulp:,}'} ulp; NaN pattern {_OK[w.nan_match]}, "
                f"±inf {_OK[w.inf_match]}, sign of zero {_OK[w.zero_sign]}"]

    def _groups(self) -> dict[str, list[CaseResult]]:
        return {case.group: [c for c in self.cases if c.group == case.group] for case in self.cases}

    def __str__(self) -> str:
        headline, worst = self._summary()
        lines = [headline, "  " + worst]
        failing = [f"{group} {len(bad)}/{len(cases)}" for group, cases in self._groups().items()
                   if (bad := [c for c in cases if not c.passed])]
        if failing:
            lines.append("  failing: " + ", ".join(failing))
        if (failure := self.first_failure()) is not None:
            first, *elements = failure.lines(limit=3)
            lines += ["  first failing case, " + first] + ["  " + line for line in elements]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        headline, worst = self._summary()
        rows = ["| inputs | cases | failed | max ulp | bad elements | first problem |", "|---|---:|---:|---:|---:|---|"]
        for group, cases in self._groups().items():
            w, bad = _worst(cases), next((c for c in cases if not c.passed), None)
            ulp = "-" if w.max_ulp is None else f"{w.max_ulp:,}"
            rows.append(f"| {group} | {len(cases)} | {len(w.failing)} | {ulp} | {sum(c.mismatches for c in cases):,} | "
                        f"{(bad.name + ': ' + bad.problem).replace('|', '/') if bad else ''} |")
        text = f"**{headline}**\n\n{worst}\n\n" + "\n".join(rows)
        if (failure := self.first_failure()) is not None:
            text += "\n\nFirst bad elements:\n\n```\n" + repr(failure) + "\n```"
        return text


def _compare(name, group, x, y, reference_out, dtype, max_ulp) -> CaseResult:
    """``y`` against the float64 ``reference_out`` rounded to ``dtype``, element by element."""
    expected = reference_out.to(dtype)
    if y.numel() == 0:
        return CaseResult(name=name, group=group, passed=True, max_ulp=0)
    got_nan, expected_nan = y.isnan(), expected.isnan()
    numbers = ~(got_nan | expected_nan)
    ulp = torch.where(y.isfinite() & expected.isfinite(), ulp_distance(y, expected), 0)
    # NaN, ±inf and the sign of zero must be exact: a tolerance in ulps would forgive a lost sign of zero (1 ulp).
    kinds = {
        "NaN where a number was expected (unwritten? outputs start as NaN)": got_nan & ~expected_nan,
        "numbers where NaN was expected": expected_nan & ~got_nan,
        "wrong ±inf": numbers & (y.isinf() | expected.isinf()) & (y != expected),
        "wrong sign of zero": numbers & (expected == 0) & (y.signbit() != expected.signbit()),
        f"beyond {max_ulp} ulp": ulp > max_ulp,
    }
    bad = torch.stack(list(kinds.values())).any(0)
    # One transfer for every count (one synchronisation on a GPU).
    counts = torch.stack([ulp.max(), bad.sum(), *(m.sum() for m in kinds.values())]).tolist()
    worst_ulp, n_bad, *n = (int(v) for v in counts)
    problems = "; ".join(f"{count} {kind}" for kind, count in zip(kinds, n) if count) + (
        f" (max {worst_ulp:,})" if n[4] else "")
    where = bad.reshape(-1).nonzero().squeeze(1)[:EXAMPLES_PER_CASE]
    examples = tuple(t.reshape(-1)[where].cpu() for t in (x, y, expected)) if n_bad else None
    return CaseResult(name=name, group=group, passed=n_bad == 0, max_ulp=worst_ulp,
                      nan_match=n[0] + n[1] == 0, inf_match=n[2] == 0, zero_sign=n[3] == 0,
                      mismatches=n_bad, examples=examples,
                      problem=f"{n_bad:,} of {x.numel():,} elements wrong: {problems}" if n_bad else "")


def _call(fn, x: torch.Tensor):
    """``fn(x)`` with poisoned outputs, synchronised on a GPU so that a kernel's error shows here;
    the exception instead of the result if it raised (a learner's kernel may raise anything)."""
    try:
        with poisoned_outputs():
            y = fn(x)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        return y
    except Exception as error:
        return error


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _wrong_metadata(y: torch.Tensor, like: torch.Tensor) -> str:
    return "; ".join(f"{what} {got}, expected {want}" for what, got, want in (
        ("shape", tuple(y.shape), tuple(like.shape)), ("dtype", y.dtype, like.dtype), ("device", y.device, like.device))
        if got != want)


def check_unary(fn: Callable[[torch.Tensor], torch.Tensor], reference: Callable = selu_reference, *,
                dtype: torch.dtype = torch.float32, device=None, trials: int = 3, seed: int | None = None,
                sizes: Sequence[int] = DEFAULT_SIZES, distributions: Sequence[str] = DEFAULT_DISTRIBUTIONS,
                include_special: bool = True, include_views: bool = True, name: str | None = None) -> CheckReport:
    """Check an elementwise ``fn`` against a float64 ``reference`` on the special values, then per trial (seed
    ``seed + trial``, from the clock unless given) every size of every distribution and misaligned and 2-D views.
    ``fn(x)`` must keep ``x``'s shape, dtype and device, leave ``x`` unchanged, and match the reference: NaN,
    infinities and signs of zero exactly, within :data:`MAX_ULP` elsewhere."""
    device = _device(device)
    if dtype not in MAX_ULP:
        raise TypeError(f"check_unary: dtype must be one of {', '.join(map(str, MAX_ULP))}, got {dtype}")
    max_ulp = MAX_ULP[dtype]
    seed = time.time_ns() % 10**9 if seed is None else seed
    start, cases = time.perf_counter(), []

    def run(case_name: str, group: str, x: torch.Tensor) -> None:
        x_before, reference_out = x.clone(), reference(x.double())
        y = _call(fn, x)
        if isinstance(y, Exception):
            problem = f"raised {_first_line(y)}"
        elif not isinstance(y, torch.Tensor):
            problem = f"returned {type(y).__name__}, not a tensor"
        elif wrong := _wrong_metadata(y, x):
            problem = "returned " + wrong
        elif not torch.equal(x.view(_BITS_DTYPE[dtype]), x_before.view(_BITS_DTYPE[dtype])):
            problem = "modified its input"  # compared bitwise, so NaN inputs compare equal
        else:
            return cases.append(_compare(case_name, group, x, y, reference_out, dtype, max_ulp))
        cases.append(CaseResult(name=case_name, group=group, passed=False, problem=problem))

    if include_special:
        run("special values", "special", special_values(dtype, device))
    for trial in range(trials):
        generator = torch.Generator().manual_seed(seed + trial)
        for distribution in distributions:
            for n in sizes:
                run(f"{distribution} n={n} trial {trial}", distribution,
                    make_input(distribution, (n,), dtype, device, generator))
        if include_views:
            specials, (rows, cols) = special_values(dtype, device), VIEW_2D_SHAPE
            fill = max(VIEW_NUMEL + max(VIEW_OFFSETS), rows * cols + 1) - specials.numel()
            base = torch.cat([specials, make_input("normal", (fill,), dtype, device, generator)])
            for k in VIEW_OFFSETS:
                run(f"view at offset {k} (n={VIEW_NUMEL}) trial {trial}", "views", base[k:k + VIEW_NUMEL])
            run(f"2-D view {VIEW_2D_SHAPE} at offset 1 trial {trial}", "views",
                base[1:1 + rows * cols].view(rows, cols))
    return CheckReport(name=name or getattr(fn, "__name__", None) or type(fn).__name__, dtype=dtype, device=device,
                       seed=seed, max_ulp=max_ulp, cases=cases, seconds=time.perf_counter() - start)


def naive_rand_check(fn: Callable[[torch.Tensor], torch.Tensor], reference: Callable = selu_reference, *,
                     dtype: torch.dtype = torch.float32, device=None) -> bool:
    """What a naive test does, for contrast with :func:`check_unary`: ``torch.allclose`` on ``torch.rand``
    inputs, never negative, so ``λ·x`` passes (as does an ``fn`` that overwrites its input)."""
    x = torch.rand(4096, dtype=dtype, device=_device(device))
    expected = reference(x.double()).to(dtype)  # before fn, which may overwrite x
    got = fn(x)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    return torch.allclose(got, expected)


class Agreement(namedtuple("Agreement", "numel identical max_ulp nan_match")):
    """One result against another of the same dtype: elements identical bit for bit (NaN = NaN),
    the largest ulp distance where neither is NaN, and whether NaN is in the same places."""

    @property
    def identical_pct(self) -> float:
        return 100.0 * self.identical / self.numel if self.numel else 100.0

    def within(self, max_ulp: int) -> bool:
        return self.nan_match and self.max_ulp <= max_ulp

    def __str__(self) -> str:
        nan = "NaN in the same places" if self.nan_match else "NaN in DIFFERENT places"
        return f"{self.identical_pct:.4g}% of {self.numel:,} elements identical, max {self.max_ulp:,} ulp, {nan}"


def agreement(actual: torch.Tensor, expected: torch.Tensor, chunk: int = 1 << 26) -> Agreement:
    """``actual`` against another implementation's ``expected`` (same shape and dtype), in ulps,
    ``chunk`` elements at a time so billions of elements need only chunk-sized temporaries."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise ValueError(f"agreement: compare tensors of one shape and dtype, got {tuple(actual.shape)} "
                         f"{actual.dtype} and {tuple(expected.shape)} {expected.dtype}")
    bits = _bits_dtype(actual.dtype)
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


def outcome(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *, max_ulp: int = 1) -> str:
    """What ``fn(x)`` does, in one line, for tables of bad input: the error it raises, or whether its
    result is correct (torch.selu's shape, dtype, device and NaN, within ``max_ulp``) or WRONG."""
    y = _call(fn, x)
    if isinstance(y, Exception):
        return f"error: {_first_line(y)}"
    if not isinstance(y, torch.Tensor):
        return f"WRONG: returned {type(y).__name__}, not a tensor"
    try:
        expected = torch.selu(x)
    except Exception as error:  # torch may refuse what fn accepts
        return f"a result, but torch.selu raises {_first_line(error)}"
    if wrong := _wrong_metadata(y, expected):
        return f"WRONG: returned {wrong} (as torch.selu gives)"
    if y.numel() == 0:
        return f"correct result: an empty tensor of shape {tuple(y.shape)}, as torch.selu gives"
    match = agreement(y, expected)
    if not match.within(max_ulp):
        return f"WRONG result against torch.selu: {match}"
    if match.identical == match.numel:
        return f"correct result: identical to torch.selu"
    return f"correct result: within {match.max_ulp} ulp of torch.selu ({match.identical_pct:.4g}% identical)"


def every_16_bit_value(dtype: torch.dtype, device=None) -> torch.Tensor:
    """All 65,536 values of float16 or bfloat16, NaNs and infinities included, in bit order."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"every_16_bit_value: expected float16 or bfloat16, got {dtype}")
    return torch.arange(-(2**15), 2**15, dtype=torch.int32, device=_device(device)).to(torch.int16).view(dtype)


def fp32_bit_patterns(start: int, stop: int, stride: int = 1, device=None) -> torch.Tensor:
    """The float32 values whose bit patterns, read as unsigned, run from ``start`` to ``stop`` by ``stride``."""
    unsigned = torch.arange(start, stop, stride, dtype=torch.int64, device=_device(device))
    signed = torch.where(unsigned >= 2**31, unsigned - 2**32, unsigned)  # the same 32 bits as int32
    return signed.to(torch.int32).view(torch.float32)


class Exhaustive(namedtuple("Exhaustive", "dtype inputs differ_from_torch max_ulp_vs_torch max_ulp_vs_float64 "
                                           "beyond_1_ulp_vs_float64 nan_match seconds")):
    """One operator on every input of a dtype: results whose bits differ from torch's (NaN = NaN) and by how
    much, how far from the correctly rounded float64 SELU, and whether NaN is where torch has it."""

    @property
    def identical(self) -> bool:
        return self.differ_from_torch == 0 and self.nan_match


def exhaustive(fn: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype, device=None, *,
               fp32_stride: int = 1) -> Exhaustive:
    """``fn`` on every fp16 or bf16 value, or on every ``fp32_stride``-th of the 2^32 float32 patterns
    (1: all, about a second on a GPU), with poisoned outputs: bit for bit against torch.selu on the same
    device, and in ulps against the float64 SELU."""
    device, start = _device(device), time.perf_counter()
    if dtype == torch.float32:
        step = (1 << 27) * fp32_stride  # 512 MiB of input per step, a few GiB of temporaries
        inputs = (fp32_bit_patterns(lo, min(lo + step, 2**32), fp32_stride, device) for lo in range(0, 2**32, step))
    else:
        inputs = iter([every_16_bit_value(dtype, device)])
    tried = differ = beyond = worst_torch = worst_exact = 0
    nan_match = True
    for x in inputs:
        with poisoned_outputs():
            ours = fn(x)
        match = agreement(ours, torch.selu(x))
        tried, differ = tried + match.numel, differ + match.numel - match.identical
        worst_torch, nan_match = max(worst_torch, match.max_ulp), nan_match and match.nan_match
        numbers = ~(ours.isnan() | x.isnan())
        ulps = ulp_distance(ours[numbers], selu_reference(x[numbers]))
        if ulps.numel():
            worst_exact, beyond = max(worst_exact, int(ulps.max())), beyond + int((ulps > 1).sum())
    return Exhaustive(dtype, tried, differ, worst_torch, worst_exact, beyond, nan_match, time.perf_counter() - start)
