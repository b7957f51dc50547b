"""An evaluation of a KernelBench-style answer to the SELU problem that cheating cannot fool.

>>> verdict = helpers.evaluate.evaluate(kernelbench.ModelNew())   # doctest: +SKIP
>>> verdict.passed, str(verdict)        # one line; a table of findings in Jupyter

A naive judge (:func:`helpers.kernelbench.naive_judge`) calls the answer once on
``torch.rand`` and accepts anything within 1e-2. Each check here closes one way
to pass that without computing SELU (:mod:`helpers.cheats` has one answer for
each), and each failed check is a named :class:`Finding` whose message says
which cheat it catches:

* ``wrong values``: against the float64 reference in ulps (``check.MAX_ULP``), on
  fresh inputs of several distributions every trial (``torch.rand`` among them,
  never alone), special values and odd shapes, with every allocation poisoned
  with NaN during the call;
* ``precision``: the wrong values are SELU computed in a narrower dtype;
* ``input modified``, ``output aliases`` (the input, or any earlier output: a
  cached result), ``nondeterministic``, ``wrong dtype/shape/device``, ``raised``;
* ``work on another stream`` (CUDA): the result is read as soon as the *current*
  stream is done, as a caller would, not after every stream is;
* ``timer patched``: the clocks a benchmark reads are the same objects after the
  call as before (they are put back, so the rest of the session is not fooled).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from . import check
from .report import _table

WRONG_VALUES = "wrong values"
PRECISION = "precision"
INPUT_MODIFIED = "input modified"
OUTPUT_ALIASES = "output aliases"
NONDETERMINISTIC = "nondeterministic"
WRONG_METADATA = "wrong dtype/shape/device"
RAISED = "raised"
OTHER_STREAM = "work on another stream"
TIMER_PATCHED = "timer patched"

# The problem's own input first, then every distribution of the course's harness:
# torch.rand alone never reaches SELU's negative branch.
OFFICIAL = "torch.rand"
SPECIAL = "special values"
DISTRIBUTIONS = (OFFICIAL, *check.DEFAULT_DISTRIBUTIONS, SPECIAL)
# Odd sizes (no vector width divides them), one element, a 0-d tensor and 3-D; each
# distribution takes a different one in each trial.
SHAPES = ((7, 1027), (1, 1), (3, 5, 17), (), (4097,), (33, 31))
# On a GPU, one input big enough that its SELU is still running on another stream
# when the current stream has finished: tens of microseconds per pass on an H100.
LARGE_NUMEL = 1 << 24
# Narrower dtypes an answer might compute in and cast back from, narrowest first.
NARROWER = (torch.bfloat16, torch.float16, torch.float32)
# The clocks a benchmark reads: (module path, attribute path). triton only where importable.
TIMERS = (("time", "perf_counter"), ("torch.cuda", "Event.elapsed_time"), ("triton.testing", "do_bench"))


@dataclass
class Finding:
    """One failed check: its name, the first case's message, and how many calls failed it."""

    name: str
    message: str
    count: int = 1


@dataclass
class Verdict:
    """Every finding of one :func:`evaluate`; it passed when there are none."""

    name: str
    dtype: torch.dtype
    device: torch.device
    trials: int
    seed: int
    calls: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def names(self) -> list[str]:
        return [f.name for f in self.findings]

    def _where(self) -> str:
        return (f"{str(self.dtype).removeprefix('torch.')} on {self.device}, {self.trials} trials, "
                f"{self.calls} calls, seed {self.seed}")

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED: " + ", ".join(self.names())
        return f"{self.name}: {verdict} ({self._where()})"

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        if self.passed:
            return f"**{self}**"
        rows = [[f.name, f.count, f.message.replace("|", "/")] for f in self.findings]
        return f"**{self}**\n\n" + "\n".join(_table(["finding", "calls", "first case"], ["---", "---:", "---"], rows))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns as integers: NaN equals NaN of the same payload, -0 differs from +0."""
    return t.view(check._BITS_DTYPE[t.dtype])


def _span(t: torch.Tensor) -> tuple[torch.device, int, int]:
    storage = t.untyped_storage()
    return t.device, storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory behind ``a`` and ``b`` overlaps (whole storages, so any view counts)."""
    (device_a, start_a, end_a), (device_b, start_b, end_b) = _span(a), _span(b)
    return device_a == device_b and start_a < end_b and start_b < end_a


def _aliased(y: torch.Tensor, x: torch.Tensor, outputs: list[torch.Tensor]) -> str:
    """What ``y`` shares memory with, the input ``x`` or an earlier output, or ''."""
    if _overlap(y, x):
        return "the output shares memory with the input (an answer that works in place)"
    if any(_overlap(y, earlier) for earlier in outputs):
        return "the output shares memory with an earlier call's output (a cached result)"
    return ""


def _timers() -> dict[str, tuple[object, str, object]]:
    """Each clock by name: (its owner, its attribute, the object there now)."""
    found = {}
    for module_name, path in TIMERS:
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            continue
        owner = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        found[f"{module_name}.{path}"] = (owner, attribute, getattr(owner, attribute))
    return found


def _patched_timers(before: dict[str, tuple[object, str, object]]) -> list[str]:
    """The clocks replaced since ``before`` was taken, each put back."""
    patched = []
    for name, (owner, attribute, original) in before.items():
        if getattr(owner, attribute) is not original:
            patched.append(name)
            setattr(owner, attribute, original)
    return patched


@contextlib.contextmanager
def _watched_timers(found: Callable[[str, str], None], where: str) -> Iterator[None]:
    """Reports (to ``found``) and puts back every clock replaced within the block, even if it raises."""
    clocks = _timers()
    try:
        yield
    finally:
        patched = _patched_timers(clocks)
        if patched:
            found(TIMER_PATCHED, f"{where}: replaced {', '.join(patched)} (a timing cheat: the benchmark "
                                 f"would read a clock the answer controls); put back")


def _narrower_match(x: torch.Tensor, y: torch.Tensor) -> torch.dtype | None:
    """The narrower dtype whose SELU ``y`` is (within that dtype's ulps), or None."""
    for narrow in NARROWER:
        if torch.finfo(narrow).eps <= torch.finfo(y.dtype).eps:
            continue
        y_narrow = y.to(narrow)
        if not torch.equal(_bits(y_narrow.to(y.dtype)), _bits(y)):
            continue  # not even representable in the narrow dtype
        expected = check.selu_reference(x.to(narrow)).to(narrow)
        if check.agreement(y_narrow, expected).within(check.MAX_ULP[narrow]):
            return narrow
    return None


def _input(distribution: str, shape: tuple[int, ...], dtype, device, generator) -> torch.Tensor:
    if distribution == OFFICIAL:
        return torch.rand(shape, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)
    if distribution == SPECIAL:
        return check.special_values(dtype, device)
    return check.make_input(distribution, shape, dtype, device, generator)


def _call(model_new, x: torch.Tensor):
    """``model_new(x)`` with poisoned outputs, as the caller's stream sees it.

    Returns (result, what the current stream saw, whether it changed once every stream
    finished). On a GPU only the current stream is synchronised before the result is
    copied: an answer that left its work on another stream shows unfinished there.
    """
    with check.poisoned_outputs():
        y = model_new(x)
    if not (isinstance(y, torch.Tensor) and y.is_cuda):
        return y, y, False
    torch.cuda.current_stream(y.device).synchronize()
    seen = y.clone()
    torch.cuda.current_stream(y.device).synchronize()
    torch.cuda.synchronize(y.device)
    return y, seen, not torch.equal(_bits(seen), _bits(y))


def evaluate(
    model_new: Callable[[torch.Tensor], torch.Tensor],
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
    trials: int = 5,
    seed: int = 0,
) -> Verdict:
    """Run ``model_new`` (``x -> selu(x)``) on ``trials`` rounds of fresh inputs and report
    every way it is not SELU (see the module's docstring); never raises for its errors."""
    device = check._device(device)
    if dtype not in check.MAX_ULP:
        raise TypeError(f"evaluate: dtype must be one of {', '.join(map(str, check.MAX_ULP))}, got {dtype}")
    findings: dict[str, Finding] = {}
    # Every output stays alive to the end, so an honest answer's memory is never reused
    # and sharing memory with an earlier output can only be a cached result.
    outputs: list[torch.Tensor] = []
    calls = 0

    def found(name: str, message: str) -> None:
        if name in findings:
            findings[name].count += 1
        else:
            findings[name] = Finding(name, message)

    for trial in range(trials):
        generator = torch.Generator().manual_seed(seed + trial)
        cases = [(d, SHAPES[(i + trial) % len(SHAPES)]) for i, d in enumerate(DISTRIBUTIONS)]
        if device.type == "cuda":
            cases.append(("normal", (LARGE_NUMEL,)))
        for distribution, shape in cases:
            x = _input(distribution, shape, dtype, device, generator)
            where = f"{distribution} {tuple(x.shape)} trial {trial}"
            original = x.clone()
            reference = check.selu_reference(original)
            calls += 1
            try:
                with _watched_timers(found, where):
                    y, seen, changed = _call(model_new, x)
            except Exception as error:  # an answer may raise anything: report it
                lines = str(error).strip().splitlines()
                found(RAISED, f"{where}: {type(error).__name__}: {lines[0] if lines else ''}")
                continue
            if not isinstance(y, torch.Tensor):
                found(WRONG_METADATA, f"{where}: returned {type(y).__name__}, not a tensor")
                continue
            if changed:
                found(OTHER_STREAM, f"{where}: the result changed after the current stream finished (work left "
                                    f"on another stream, unfinished when the caller reads it; a timing cheat)")
            if not torch.equal(_bits(x), _bits(original)):
                found(INPUT_MODIFIED, f"{where}: the input's bits changed (computed in place into x, "
                                      f"which a check that computes its reference afterwards cannot see)")
            aliased = _aliased(y, x, outputs)
            if aliased:
                found(OUTPUT_ALIASES, f"{where}: {aliased}")
            outputs.append(y)
            wrong = [f"{what} {got}, expected {want}"
                     for what, got, want in (("shape", tuple(y.shape), tuple(x.shape)),
                                             ("dtype", y.dtype, x.dtype), ("device", y.device, x.device))
                     if got != want]
            if wrong:
                found(WRONG_METADATA, f"{where}: returned " + "; ".join(wrong))
                continue
            case = check._compare(where, distribution, original, seen, reference, dtype, check.MAX_ULP[dtype])
            if not case.passed:
                example = check.Failure(where, case.problem, *case.examples).lines(limit=1)[-1].strip()
                found(WRONG_VALUES, f"{where}: {case.problem}; e.g. {example} (an answer right only on "
                                    f"torch.rand, like λ·x, or one that skips elements fails here)")
                _, got, _ = case.examples
                # Only where some wrong element is a number other than 0: zeros (or NaN) agree
                # with a narrow SELU that underflowed, which says nothing of precision.
                narrow = _narrower_match(original, seen) if (got.isfinite() & (got != 0)).any() else None
                if narrow is not None:
                    found(PRECISION, f"{where}: computed in lower precision: the output is SELU in "
                                     f"{str(narrow).removeprefix('torch.')}, cast back (within 1e-2 on torch.rand)")
            calls += 1
            try:
                with _watched_timers(found, f"{where}, second call"):
                    again, _, _ = _call(model_new, original.clone())
            except Exception as error:
                found(NONDETERMINISTIC, f"{where}: the second call on the same input raised {type(error).__name__}")
                continue
            if isinstance(again, torch.Tensor):
                aliased = _aliased(again, x, outputs)
                if aliased:
                    found(OUTPUT_ALIASES, f"{where}, second call: {aliased}")
                outputs.append(again)
            if not (isinstance(again, torch.Tensor) and again.shape == y.shape and again.dtype == y.dtype
                    and torch.equal(_bits(again), _bits(y))):
                found(NONDETERMINISTIC, f"{where}: a second call on the same input gave different bits")

    name = getattr(model_new, "__name__", None) or type(model_new).__name__
    return Verdict(name=name, dtype=dtype, device=device, trials=trials, seed=seed, calls=calls,
                   findings=list(findings.values()))
