"""An evaluation of a KernelBench-style answer to the SELU problem that cheating cannot fool
(notebook 06), and the table of the course's report (appendix A5, the README).

>>> verdict = evaluate(answer)          # every finding, by name  # doctest: +SKIP
>>> table = measure_speed({"mine": answer})   # two timers, beside a copy and eager  # doctest: +SKIP

Each failed check is a named :class:`Finding`: ``wrong values`` (against a float64 reference
in ulps, on fresh inputs of both signs, special values, odd shapes and views, with every
allocation poisoned with NaN), ``precision`` (SELU computed in a narrower dtype), ``input
modified``, ``output aliases`` (the input or an earlier output), ``nondeterministic``, ``wrong
dtype/shape/device``, ``raised``, ``work on another stream`` (the result read as the caller's
stream sees it; on a GPU, the device idle once that stream is) and ``timer patched`` (the
clocks a benchmark reads, put back).
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch

from . import bench, check, env, results


WRONG_VALUES = "wrong values"
PRECISION = "precision"
INPUT_MODIFIED = "input modified"
OUTPUT_ALIASES = "output aliases"
NONDETERMINISTIC = "nondeterministic"
WRONG_METADATA = "wrong dtype/shape/device"
RAISED = "raised"
OTHER_STREAM = "work on another stream"
TIMER_PATCHED = "timer patched"
FINDINGS = (WRONG_VALUES, PRECISION, INPUT_MODIFIED, OUTPUT_ALIASES, NONDETERMINISTIC, WRONG_METADATA, RAISED,
            OTHER_STREAM, TIMER_PATCHED)

_clock = time.perf_counter  # bound when this module loads: an answer that replaces time.perf_counter does not reach it
TRIALS = 5  # rounds of fresh inputs per evaluation; KernelBench's default is one
# The problem's own input first, then every distribution of the course's harness:
# torch.rand alone never reaches SELU's negative branch.
OFFICIAL = "torch.rand"
SPECIAL = "special values"
DISTRIBUTIONS = (OFFICIAL, *check.DEFAULT_DISTRIBUTIONS, SPECIAL)
# Odd sizes (no vector width divides them), one element, 0-d and 3-D; a different one each trial.
SHAPES = ((7, 1027), (1, 1), (3, 5, 17), (), (4097,), (33, 31))
# Views, each once per trial: transposed (dense, not contiguous), every other column (gaps),
# one element in (not 16-byte aligned). An answer that assumes a contiguous input fails here.
TRANSPOSED, STRIDED, OFFSET = "transposed", "every other column", "offset by one element"
LAYOUTS = (TRANSPOSED, STRIDED, OFFSET)
VIEW_SHAPE = (33, 1027)
# The stream check (GPU): on one 2 GB input, whose SELU keeps a GPU busy for a millisecond,
# the device must be idle (an empty synchronize: tens of microseconds) once the caller's
# stream is done. Host work can stretch one reading; work left on another stream is there
# every time: read with the garbage collector off, the least of up to STREAM_CHECK_TRIES calls.
STREAM_CHECK_BYTES = 2 * 2**30
STREAM_BUSY_MS = 0.2
STREAM_CHECK_TRIES = 3
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

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED: " + ", ".join(self.names())
        return (f"{self.name}: {verdict} ({str(self.dtype).removeprefix('torch.')} on {self.device}, "
                f"{self.trials} trials, {self.calls} calls, seed {self.seed})")

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        if self.passed:
            return f"**{self}**"
        rows = [[f.name, f.count, f.message.replace("|", "/")] for f in self.findings]
        return f"**{self}**\n\n" + results.markdown_table(["finding", "calls", "first case"], rows, align=["---", "---:", "---"])


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


def _view(distribution: str, layout: str, dtype, device, generator) -> torch.Tensor:
    """A :data:`VIEW_SHAPE` input of ``distribution``, laid out as ``layout`` says."""
    rows, cols = VIEW_SHAPE
    if layout == TRANSPOSED:
        return _input(distribution, (cols, rows), dtype, device, generator).t()
    if layout == STRIDED:
        return _input(distribution, (rows, 2 * cols), dtype, device, generator)[:, ::2]
    return _input(distribution, (rows * cols + 1,), dtype, device, generator)[1:].view(rows, cols)


def _copy_in_layout(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` with its sizes, strides and storage offset, in memory of its own: the
    second call of the determinism check gets the same input, laid out the same way (torch's
    own CPU SELU rounds a strided input differently from a contiguous one)."""
    span = x.storage_offset() + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride())) + 1
    base = torch.empty(span if x.numel() else x.storage_offset(), dtype=x.dtype, device=x.device)
    return base.as_strided(x.shape, x.stride(), x.storage_offset()).copy_(x)


# region: call
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
# endregion


def _raised(where: str, error: Exception) -> str:
    """The finding's message for an answer that raised: where, the exception's type and first line."""
    lines = str(error).strip().splitlines()
    return f"{where}: {type(error).__name__}: {lines[0] if lines else ''}"


@contextlib.contextmanager
def _no_garbage_collection() -> Iterator[None]:
    """Python's garbage collector off for the block (and back as it was)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _stream_check(model_new, dtype: torch.dtype, device: torch.device, seed: int,
                  found: Callable[[str, str], None]) -> None:
    """Whether the device is still busy once the caller's stream is done with ``model_new(x)``
    on one :data:`STREAM_CHECK_BYTES` input, in each of up to :data:`STREAM_CHECK_TRIES` calls
    (reported to ``found`` when the least of them is over :data:`STREAM_BUSY_MS`)."""
    numel = STREAM_CHECK_BYTES // dtype.itemsize
    # Drawn on the GPU: a billion normal numbers take seconds on the CPU.
    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(numel, generator=generator, device=device, dtype=torch.float32).to(dtype)
    where = f"normal ({numel:,},) stream check"
    torch.cuda.synchronize(device)
    busy_ms, tries = math.inf, 0
    try:
        with _watched_timers(found, where):
            while tries < STREAM_CHECK_TRIES and busy_ms > STREAM_BUSY_MS:
                y = model_new(x)
                torch.cuda.current_stream(device).synchronize()
                # No garbage collection inside the reading, as timeit does: the harness keeps every
                # earlier output alive, and a collection there would be read as a busy device.
                with _no_garbage_collection():
                    start = _clock()
                    torch.cuda.synchronize(device)
                    busy_ms = min(busy_ms, (_clock() - start) * 1e3)
                tries += 1
                del y
    except Exception as error:  # an answer may raise anything: report it
        found(RAISED, _raised(where, error))
        return
    del x
    if busy_ms > STREAM_BUSY_MS:
        found(OTHER_STREAM, f"{where}: the device stayed busy at least {busy_ms:.2f} ms after the caller's stream "
                            f"was done, in each of {tries} calls (work left on another stream, unfinished when the "
                            f"caller reads the result; a timing cheat)")


def evaluate(model_new: Callable[[torch.Tensor], torch.Tensor], *, dtype: torch.dtype = torch.float32, device=None,
             trials: int = TRIALS, seed: int = 0) -> Verdict:
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
        cases = [(d, SHAPES[(i + trial) % len(SHAPES)], None) for i, d in enumerate(DISTRIBUTIONS)]
        others = check.DEFAULT_DISTRIBUTIONS
        cases += [(others[(i + trial) % len(others)], VIEW_SHAPE, layout) for i, layout in enumerate(LAYOUTS)]
        for distribution, shape, layout in cases:
            if layout is None:
                x = _input(distribution, shape, dtype, device, generator)
            else:
                x = _view(distribution, layout, dtype, device, generator)
            where = f"{distribution} {tuple(x.shape)}{f' ({layout})' if layout else ''} trial {trial}"
            original = _copy_in_layout(x)
            reference = check.selu_reference(original)
            calls += 1
            try:
                with _watched_timers(found, where):
                    y, seen, changed = _call(model_new, x)
            except Exception as error:  # an answer may raise anything: report it
                found(RAISED, _raised(where, error))
                continue
            if not isinstance(y, torch.Tensor):
                found(WRONG_METADATA, f"{where}: returned {type(y).__name__}, not a tensor")
                continue
            if changed:
                found(OTHER_STREAM, f"{where}: the result changed after the current stream finished (work left "
                                    f"on another stream, unfinished when the caller reads it; a timing cheat)")
            if not torch.equal(_bits(x), _bits(original)):
                found(INPUT_MODIFIED, f"{where}: the input's bits changed (computed in place into x: a check "
                                      f"that computes its reference first never looks at x again)")
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
                    again, _, _ = _call(model_new, _copy_in_layout(original))
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

    if device.type == "cuda":
        calls += 1
        _stream_check(model_new, dtype, device, seed, found)
    name = getattr(model_new, "__name__", None) or type(model_new).__name__
    return Verdict(name=name, dtype=dtype, device=device, trials=trials, seed=seed, calls=calls,
                   findings=list(findings.values()))


# --------------------------------------------------------------------------- timing
#
# The harness's timer waits for every stream of the device (a host clock around
# torch.cuda.synchronize: CUDA events time one stream), flushes the L2 cache before every
# call as triton.testing.do_bench does, and reads a clock bound when this module loaded.
# Rows take turns, round after round, so that a slow spell falls on every row.

FLUSH_BYTES = 256 * 2**20  # as triton.testing.do_bench: more than any Hopper L2 cache (50-60 MB)
TIMING_ROUNDS = 3
TIMING_REPS = 10
# A SELU moves the bytes a copy moves: an answer this far below the copy's fast end is suspect.
SUSPECT_MARGIN = 0.10
IMPOSSIBLE = "impossible"
SUSPECT = "suspect"
COPY_ROW = "copy (x.clone())"
EAGER_ROW = "torch.selu (eager)"


def _synchronize_every_stream(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# region: timers
def harness_times(fn: Callable[[torch.Tensor], object], x: torch.Tensor, reps: int, flush: torch.Tensor) -> list[float]:
    """Milliseconds of each of ``reps`` calls ``fn(x)``: the L2 cache flushed, every stream
    idle, then the clock from the call to when every stream of the device is idle again."""
    times = []
    for _ in range(reps):
        flush.zero_()
        _synchronize_every_stream(x.device)
        start = _clock()
        fn(x)
        _synchronize_every_stream(x.device)
        times.append((_clock() - start) * 1e3)
    return times


def naive_times(fn: Callable[[torch.Tensor], object], x: torch.Tensor, reps: int) -> list[float]:
    """What a naive timer reads: ``time.perf_counter`` looked up at each call (whatever it is
    by then), the L2 cache left warm, and only the current stream waited for."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(x)
        if x.is_cuda:
            torch.cuda.current_stream(x.device).synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times
# endregion


def _quantiles(times: list[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile, as the course's benchmarks take them."""
    timing = bench._timing_from_samples(np.asarray(times, dtype=float), n=len(times), method="harness")
    return timing.median_ms, timing.q20_ms, timing.q80_ms


def speed_flags(ms: float, copy_ms: float, eager_ms: float, nbytes: int, datasheet_gbps: float | None) -> list[str]:
    """Why a time of ``ms`` cannot, or can hardly, be an honest SELU of these ``nbytes``;
    ``copy_ms`` is the copy's fast end (its 20th percentile), ``eager_ms`` eager's median."""
    flags = []
    if datasheet_gbps is not None:
        bound_ms = bench.roofline_ms(nbytes // 2, torch.uint8, datasheet_gbps)  # nbytes: read + write
        if ms < bound_ms:
            flags.append(f"{IMPOSSIBLE}: {ms:.3f} ms is faster than moving its {nbytes / 1e9:.2f} GB at the "
                         f"datasheet's {datasheet_gbps / 1e3:.2f} TB/s allows ({bound_ms:.3f} ms)")
    if ms < copy_ms * (1 - SUSPECT_MARGIN):
        flags.append(f"{SUSPECT}: {eager_ms / ms:.2f}× eager, where the copy roofline allows "
                     f"{eager_ms / copy_ms:.2f}× (a copy moves the same bytes in {copy_ms:.3f} ms)")
    return flags


def _row(table: dict, answer: str) -> dict:
    return next(r for r in table["rows"] if r["answer"] == answer)


def row_flags(table: dict, row: dict, timer: str = "harness") -> list[str]:
    """:func:`speed_flags` of one row of :func:`measure_speed`'s table, as ``timer``
    ("harness" or "naive") read it, against the copy and eager as that timer read them.
    The copy's bound is its 20th percentile: a copy that sometimes runs slow (a shared
    host, a busy allocator) must not make an honest answer look faster than memory allows."""
    prefix = "" if timer == "harness" else "naive_"
    copy, eager = _row(table, COPY_ROW), _row(table, EAGER_ROW)
    return speed_flags(row[f"{prefix}median_ms"], copy[f"{prefix}q20_ms"], eager[f"{prefix}median_ms"],
                       table["bytes"], table["datasheet_gbps"])


def measure_speed(answers: dict[str, Callable[[torch.Tensor], torch.Tensor]], *, dtype: torch.dtype = torch.float32,
                  device=None, numel: int | None = None, rounds: int = TIMING_ROUNDS, reps: int = TIMING_REPS,
                  seed: int = 0) -> dict:
    """Each answer timed by the harness's timer and by a naive one, beside the copy and
    ``torch.selu``, on one input of both signs (the problem size of ``dtype`` by default);
    a table (dict) with every row's median and 20th and 80th percentiles for each timer
    (:func:`row_flags` reads the flags from it)."""
    device = check._device(device)
    if numel is None:
        numel, _ = env.problem_numel(dtype, tensors=6)
    x = bench.random_input(numel, dtype, device, seed=seed)
    pristine = x.clone()
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    rows = {COPY_ROW: torch.clone, EAGER_ROW: torch.selu, **answers}
    harness: dict[str, list[float]] = {name: [] for name in rows}
    naive: dict[str, list[float]] = {name: [] for name in rows}
    ignore = lambda *_: None  # noqa: E731  (correctness reports a patched clock; here it is only put back)
    for _ in range(rounds):
        for name, fn in rows.items():
            with _watched_timers(ignore, name):
                fn(x)  # the first call: compiles, allocates, caches, patches
                _synchronize_every_stream(device)
                naive[name] += naive_times(fn, x, reps)
                harness[name] += harness_times(fn, x, reps, flush)
            if not torch.equal(_bits(x), _bits(pristine)):
                x.copy_(pristine)  # an answer that writes into x: the next row gets the same input
    del flush
    nbytes = bench.bytes_moved(numel, dtype)
    datasheet = env.DATASHEET_BANDWIDTH_GBPS.get(bench.device_name(device)) if device.type == "cuda" else None
    table_rows = []
    for name in rows:
        median, q20, q80 = _quantiles(harness[name])
        naive_median, naive_q20, naive_q80 = _quantiles(naive[name])
        table_rows.append({"answer": name, "median_ms": median, "q20_ms": q20, "q80_ms": q80,
                           "naive_median_ms": naive_median, "naive_q20_ms": naive_q20, "naive_q80_ms": naive_q80})
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "dtype": bench.dtype_name(dtype), "numel": numel, "bytes": nbytes, "datasheet_gbps": datasheet,
            "rounds": rounds, "reps": reps, "rows": table_rows}
