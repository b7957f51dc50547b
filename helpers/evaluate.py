"""The course's judge of a KernelBench-style answer to the SELU problem (notebook 06, appendix A6).
``evaluate("answers/course.py")``, or ``evaluate({"mine": "mine.py", ...})``: timed in turns beside a copy.

An answer is a Python file that defines ``ModelNew`` (``x -> selu(x)``), as KernelBench takes it. It runs in a
process of its own (:mod:`helpers.answer_worker`). This process, the judge, draws every input from a seed the answer
never sees, into memory both processes share; it holds the clock, the float64 reference and the comparison. An
answer can replace any function in its own process and none here.

The checks, in order: small inputs of both signs, special values, odd shapes and views, each called twice
(``trials`` rounds of fresh ones, then :data:`USE_CALLS` more, as a benchmark's warm-up calls); the problem size,
untimed; then the timed calls at the problem size: every flushed call verified, and the last two of each
back-to-back run, read after it. Each failure is a named finding
(:data:`FINDINGS`); where an answer was right before, a replay of its first input tells a changed answer (``changes
with use``) from one wrong only at the problem size or only when timed."""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import math
import multiprocessing.forkserver
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing

from . import answer_worker, bench, check, env

WRONG_VALUES = "wrong values"
SIZE_DEPENDENT = "wrong at the problem size"
CALL_DEPENDENT = "changes with use"
TIMING_DEPENDENT = "wrong when timed"
PRECISION = "precision"
INPUT_MODIFIED = "input modified"
OUTPUT_ALIASES = "output aliases"
NONDETERMINISTIC = "nondeterministic"
WRONG_METADATA = "wrong dtype/shape/device"
NOT_PLAIN = "not a plain tensor"
RAISED = "raised"
CRASHED = "crashed or hung"
OTHER_STREAM = "work on another stream"
TIMER_PATCHED = "timer patched"
SYNC_PATCHED = "synchronization patched"
L2_PERSISTING = "L2 persistence set"
TOO_FAST = "faster than a copy"
FINDINGS = (WRONG_VALUES, SIZE_DEPENDENT, CALL_DEPENDENT, TIMING_DEPENDENT, PRECISION, INPUT_MODIFIED,
            OUTPUT_ALIASES, NONDETERMINISTIC, WRONG_METADATA, NOT_PLAIN, RAISED, CRASHED, OTHER_STREAM,
            TIMER_PATCHED, SYNC_PATCHED, L2_PERSISTING, TOO_FAST)
TIMED_FINDINGS = (TIMING_DEPENDENT, TOO_FAST)  # what only the timed calls can show

ANSWERS_DIR = env.REPO_ROOT / "answers"
COPY, EAGER = ANSWERS_DIR / "copy.py", ANSWERS_DIR / "eager.py"  # the yardstick and the problem's own model
_clock = time.perf_counter  # no answer runs in this process; bound here all the same
TRIALS = 3
USE_CALLS = (300, 600)  # after the trials, a secret number of calls in this range (a gated answer's threshold)
OFFICIAL, SPECIAL = "torch.rand", "special values"  # torch.rand alone never reaches SELU's negative branch
DISTRIBUTIONS = (OFFICIAL, *check.DEFAULT_DISTRIBUTIONS, SPECIAL)
SHAPES = ((7, 1027), (1, 1), (3, 5, 17), (), (4097,), (33, 31))  # odd sizes, one element, 0-d, 3-D
TRANSPOSED, STRIDED, OFFSET = "transposed", "every other column", "offset by one element"
LAYOUTS, VIEW_SHAPE = (TRANSPOSED, STRIDED, OFFSET), (33, 1027)
SMALL_NUMEL = 1 << 17  # the shared buffer the small inputs are views of
NARROWER = (torch.bfloat16, torch.float16, torch.float32)
FLUSH_BYTES = 256 * 2**20  # as triton.testing.do_bench: more than any Hopper L2 cache (50-60 MB)
ROUNDS, REPS, BACK_TO_BACK = 2, 5, (5, 10)  # back to back: a secret number of calls in this range
SUSPECT_MARGIN = 0.10  # a SELU moves a copy's bytes: more than 10% under the copy's fast end is suspect
TIMEOUT_S = 300  # one message to an answer (a first call may compile); past it the answer hung
CPU_NUMEL = 2**20  # the problem size on a CPU: enough for an answer gated at a million elements
STREAM_BUSY_MS = 0.2  # an idle device answers a synchronize in tens of microseconds
# Problem-size buffers: input, pristine and result here; an output and the one before it there; one spare
# for the contexts and the comparison's chunks.
PARENT_TENSORS = 6


@dataclass
class Finding:
    """One failed check: its name, the first case's message, and how many calls failed it."""

    name: str
    message: str
    count: int = 1


@dataclass
class Verdict:
    """Every finding of one answer, and its timed calls (ms); it passed when there are no findings."""

    name: str
    dtype: torch.dtype
    device: torch.device
    numel: int
    calls: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    flushed_ms: list[float] = field(default_factory=list)
    back_to_back_ms: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def names(self) -> list[str]:
        return [f.name for f in self.findings]

    def found(self, name: str, message: str) -> None:
        known = next((f for f in self.findings if f.name == name), None)
        if known:
            known.count += 1
        else:
            self.findings.append(Finding(name, message))

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED: " + ", ".join(self.names())
        return (f"{self.name}: {verdict} ({str(self.dtype).removeprefix('torch.')}, {self.numel:,} elements on "
                f"{self.device}, {self.calls} calls, {self.seconds:.1f} s)")

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        rows = "\n".join(f"| {f.name} | {f.count} | {f.message.replace('|', '/')} |" for f in self.findings)
        return f"**{self}**" + (f"\n\n| finding | calls | first case |\n|---|---:|---|\n{rows}" if rows else "")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(check._BITS_DTYPE[t.dtype])


def _view(buffers: dict, spec: tuple) -> torch.Tensor:
    base, size, stride, offset = spec
    return buffers[base].as_strided(size, stride, offset)


def _small_cases(trial: int, dtype: torch.dtype, generator: torch.Generator):
    """(where, values laid out as the answer gets them) of one trial: every distribution at an odd
    shape, then the three views; values are CPU tensors whose strides the shared buffer copies."""
    for i, distribution in enumerate(DISTRIBUTIONS):
        shape = SHAPES[(i + trial) % len(SHAPES)]
        if distribution == OFFICIAL:
            x = torch.rand(shape, generator=generator, dtype=torch.float64).to(dtype)
        elif distribution == SPECIAL:
            x = check.special_values(dtype, "cpu")
        else:
            x = check.make_input(distribution, shape, dtype, "cpu", generator)
        yield f"{distribution} {tuple(x.shape)} trial {trial}", x
    rows, cols = VIEW_SHAPE
    for i, layout in enumerate(LAYOUTS):
        distribution = check.DEFAULT_DISTRIBUTIONS[(i + trial) % len(check.DEFAULT_DISTRIBUTIONS)]
        if layout == TRANSPOSED:
            x = check.make_input(distribution, (cols, rows), dtype, "cpu", generator).t()
        elif layout == STRIDED:
            x = check.make_input(distribution, (rows, 2 * cols), dtype, "cpu", generator)[:, ::2]
        else:
            x = check.make_input(distribution, (rows * cols + 1,), dtype, "cpu", generator)[1:].view(rows, cols)
        yield f"{distribution} {VIEW_SHAPE} ({layout}) trial {trial}", x


def _narrower_match(x: torch.Tensor, y: torch.Tensor) -> torch.dtype | None:
    """The narrower dtype whose SELU ``y`` is (within that dtype's ulps), or None."""
    for narrow in NARROWER:
        if torch.finfo(narrow).eps <= torch.finfo(y.dtype).eps:
            continue
        y_narrow = y.to(narrow)
        if torch.equal(_bits(y_narrow.to(y.dtype)), _bits(y)) and check.agreement(
                y_narrow, check.selu_reference(x.to(narrow)).to(narrow)).within(check.MAX_ULP[narrow]):
            return narrow
    return None


def _compare(where: str, original: torch.Tensor, got: torch.Tensor, identity: bool, chunk: int = 1 << 26):
    """The first failing chunk's :class:`check.CaseResult` of ``got`` against SELU (or, for the
    copy, ``original`` itself) of ``original``, or None where every element is right."""
    original, got = original.reshape(-1), got.reshape(-1)
    for start in range(0, max(original.numel(), 1), chunk):
        x, y = original[start:start + chunk], got[start:start + chunk]
        reference = x.double() if identity else check.selu_reference(x)
        expected = reference.to(x.dtype)
        if torch.equal(_bits(y), _bits(expected)):
            continue  # correctly rounded everywhere: the common case, and far cheaper to tell
        if not identity and bool(((_bits(y).long() - _bits(expected).long()).abs() <= check.MAX_ULP[x.dtype])
                                 .logical_and_(y.isfinite()).logical_and_(expected.isfinite()).all()):
            continue  # finite, and each within its ulps of the reference's neighbour of the same sign
        # Near 0, exp(x) - 1 in place of expm1(x) (Inductor's SELU) loses the digits below one ulp of 1.0
        # in the dtype it computes in (float32 for 16-bit inputs): an absolute error that small is forgiven.
        atol = 2 * torch.finfo(torch.promote_types(x.dtype, torch.float32)).eps
        y = torch.where((y.double() - reference).abs() <= atol, expected, y)
        case = check._compare(where, "", x, y, reference, x.dtype, 0 if identity else check.MAX_ULP[x.dtype])
        if not case.passed:
            return case
    return None


class _Answer:
    """One answer's process, its verdict, and its first input (replayed to tell a changed answer)."""

    def __init__(self, name: str, path: Path, verdict: Verdict, judge: "_Judge"):
        self.name, self.verdict, self.judge = name, verdict, judge
        self.first = None  # (spec, values, bits of the first result)
        self.wrong_before, self.replayed = "", None  # the name of its first wrong result
        self.busy_ms = math.inf  # the least time the device stayed busy after the caller's stream was done
        self.connection, child = judge.context.Pipe()
        self.process = judge.context.Process(target=answer_worker.serve, args=(child, str(path)), daemon=True)
        self.process.start()
        child.close()
        self.alive = True
        self.connection.send(judge.buffers)  # sent, not passed to Process: nothing here keeps a reference
        first = self.ask_raw()
        if first is not None and self.reply(first, "import and build") is None:
            self.stop()  # it could not be imported or built: nothing to call

    def ask_raw(self, *message) -> dict | None:
        """The reply to ``message`` (no message: to the buffers sent first), or None where the process died or hung."""
        if not self.alive:
            return None
        try:
            if message:
                self.connection.send(message)
            if self.connection.poll(TIMEOUT_S):
                return self.connection.recv()
            what = f"no reply in {TIMEOUT_S} s"
        except (EOFError, OSError, BrokenPipeError):
            what = f"the process ended (exit code {self.process.exitcode})"
        self.verdict.found(CRASHED, f"{message[0] if message else 'start'}: {what}")
        self.stop()
        return None

    def reply(self, reply: dict | None, where: str) -> dict | None:
        """``reply``'s findings recorded; the reply, or None where there is no result to compare."""
        if reply is None:
            return None
        if reply.get("timers"):
            self.verdict.found(TIMER_PATCHED, f"{where}: replaced {', '.join(reply['timers'])} (put back; the judge's "
                                              f"clock is in another process)")
        if reply.get("syncs"):
            self.verdict.found(SYNC_PATCHED, f"{where}: replaced {', '.join(reply['syncs'])} (put back; the judge "
                                             f"waits with functions bound before the answer was imported)")
        if reply.get("l2_bytes"):
            self.verdict.found(L2_PERSISTING, f"{where}: set aside {reply['l2_bytes']:,} bytes of L2 for persisting "
                                              f"data (a cache that outlives the call; reset)")
        if "error" in reply:
            self.verdict.found(RAISED, f"{where}: {reply['error']}\n{reply.get('traceback', '')}")
            return None
        if "not_plain" in reply:
            self.verdict.found(NOT_PLAIN, f"{where}: returned a {reply['not_plain']}, not a torch.Tensor (a subclass "
                                          f"can compute when read, after the clock stops)")
            return None
        return reply

    def stop(self) -> None:
        if self.alive:
            with contextlib.suppress(OSError, BrokenPipeError):
                self.connection.send(("stop",))
            self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
            self.alive = False


def start_answer_server():
    """Start the server that forks each answer's process, in the background (it imports torch once, some
    seconds), so that a notebook's first evaluation finds it running; returns its multiprocessing context."""
    context = torch.multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["helpers.answer_worker"])
    threading.Thread(target=multiprocessing.forkserver.ensure_running, daemon=True).start()
    return context


class _Judge:
    """The buffers both processes share, the secret generator, and the checks of one dtype."""

    def __init__(self, dtype: torch.dtype, device: torch.device, numel: int, seed: int):
        self.dtype, self.device, self.numel = dtype, device, numel
        self.generator = torch.Generator().manual_seed(seed)
        self.device_generator = torch.Generator(device=device).manual_seed(seed + 1)
        self.context = start_answer_server()
        empty = lambda n: torch.empty(n, dtype=dtype, device=device)  # noqa: E731
        self.buffers = {"small": empty(SMALL_NUMEL), "big": empty(numel), "final": empty(max(numel, SMALL_NUMEL))}
        self.pristine = empty(numel)
        self.flush = torch.empty(FLUSH_BYTES if device.type == "cuda" else 0, dtype=torch.uint8, device=device)
        self.big_spec = ("big", (numel,), (1,), 0)

    def place(self, values: torch.Tensor) -> tuple:
        """``values`` written into the small buffer with their strides; the spec of that view."""
        spec = ("small", tuple(values.shape), tuple(values.stride()), values.storage_offset())
        _view(self.buffers, spec).copy_(values)
        self.written()
        return spec

    def written(self) -> None:
        """This process's writes done before the answer's process reads them (it has its own stream)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def fresh_big(self) -> None:
        """A fresh input of both signs at the problem size, and its pristine copy."""
        self.buffers["big"].normal_(generator=self.device_generator)
        self.pristine.copy_(self.buffers["big"])
        self.written()

    def judge(self, answer: _Answer, reply: dict | None, spec: tuple, original: torch.Tensor, where: str,
              phase: str, identity: bool = False) -> bool:
        """Whether the call ``reply`` reports is right: input, aliasing, metadata and values (the
        caller's view, then every stream's); each failure recorded under its name."""
        verdict = answer.verdict
        reply = answer.reply(reply, where)
        if reply is None:
            return False
        x = _view(self.buffers, spec)
        original = original.to(x.device)
        if not torch.equal(_bits(x), _bits(original)):
            verdict.found(INPUT_MODIFIED, f"{where}: the input's bits changed (computed in place into x)")
        if reply.get("aliases"):
            verdict.found(OUTPUT_ALIASES, f"{where}: the output shares memory with {reply['aliases']}")
        size, dtype, device = reply["meta"]
        expected = (tuple(x.shape), str(x.dtype).removeprefix("torch."), str(x.device))
        if (size, dtype, device) != expected:
            verdict.found(WRONG_METADATA, f"{where}: returned shape, dtype, device {(size, dtype, device)}, "
                                          f"expected {expected}")
            return False
        if "busy_ms" in reply:
            answer.busy_ms = min(answer.busy_ms, reply["busy_ms"])
        final = self.buffers["final"][:x.numel()].view(x.shape)
        wrong = _compare(where, original, final, identity)
        if wrong is None:
            return True
        self.wrong_values(answer, wrong, original, final, where, phase)
        return False

    def wrong_values(self, answer: _Answer, case, original, got, where: str, phase: str) -> None:
        """A wrong result, named for what it depends on: the answer changed since its first input
        (replayed, once), or it was right on every earlier check of another phase."""
        example = check.Failure(where, case.problem, *case.examples).lines(limit=1)[-1].strip()
        _, bad, _ = case.examples
        if phase == "small" and (bad.isfinite() & (bad != 0)).any():  # zeros or NaN say nothing of precision
            narrow = _narrower_match(original.cpu(), got.cpu())
            if narrow is not None:
                answer.verdict.found(PRECISION, f"{where}: the output is SELU computed in "
                                                f"{str(narrow).removeprefix('torch.')}, cast back")
        name = WRONG_VALUES
        if answer.replayed is None and answer.first:
            spec, values, bits = answer.first
            self.place(values)
            again = answer.reply(answer.ask_raw("call", spec), "replay of the first input")
            answer.replayed = again is not None and not torch.equal(_bits(self.buffers["final"][:values.numel()]).cpu(),
                                                                    bits)
        if answer.replayed:
            name = CALL_DEPENDENT
        elif answer.wrong_before:
            name = answer.wrong_before  # named once, by its first wrong result
        elif phase != "small":
            name = SIZE_DEPENDENT if phase == "problem size" else TIMING_DEPENDENT
        answer.wrong_before = name
        answer.verdict.found(name, f"{where}: {case.problem}; e.g. {example}")

    def check_small(self, answer: _Answer, where: str, values: torch.Tensor) -> None:
        spec = self.place(values)
        answer.verdict.calls += 1
        right = self.judge(answer, answer.ask_raw("call", spec), spec, values, where, "small")
        if answer.first is None and (values < 0).any():  # the replayed input must reach both branches
            answer.first = (spec, values, _bits(self.buffers["final"][:values.numel()]).to("cpu", copy=True)) \
                if right else False
        if right and answer.alive:  # the same input again, in memory of its own: the same bits?
            bits = _bits(self.buffers["final"][:values.numel()]).clone()
            answer.verdict.calls += 1
            if self.judge(answer, answer.ask_raw("call", spec), spec, values, f"{where}, second call", "small") \
                    and not torch.equal(bits, _bits(self.buffers["final"][:values.numel()])):
                answer.verdict.found(NONDETERMINISTIC, f"{where}: a second call on the same input gave other bits")

    def check(self, answer: _Answer, trials: int) -> None:
        """Every untimed check of one answer, until it has crashed."""
        for trial in range(trials):
            for where, values in _small_cases(trial, self.dtype, self.generator):
                if answer.alive:
                    self.check_small(answer, where, values)
        use_calls = USE_CALLS[0] + int(torch.randint(USE_CALLS[1] - USE_CALLS[0], (), generator=self.generator))
        for call in range(use_calls):
            if not answer.alive or answer.wrong_before:
                break
            values = check.make_input("normal", (1 + call % 4097,), self.dtype, "cpu", self.generator)
            spec = self.place(values)
            answer.verdict.calls += 1
            self.judge(answer, answer.ask_raw("call", spec), spec, values, f"normal ({values.numel()},) use call {call}",
                       "small")
        answer.ask_raw("forget", True)  # the small outputs it kept alive
        # region: busy
        for call in range(2):
            if answer.alive:
                self.fresh_big()
                answer.verdict.calls += 1
                self.judge(answer, answer.ask_raw("call", self.big_spec, self.device.type == "cuda"), self.big_spec,
                           self.pristine, f"normal ({self.numel:,},) problem size {call}", "problem size")
                answer.ask_raw("forget", True)
        if math.inf > answer.busy_ms > STREAM_BUSY_MS:  # the least of the calls: host work can stretch one reading
            answer.verdict.found(OTHER_STREAM, f"problem size: the device stayed busy at least {answer.busy_ms:.2f} ms "
                                               f"after the caller's stream was done (work left on another stream, "
                                               f"unfinished when the caller reads the result)")
        # endregion

    # region: timed
    def timed(self, answer: _Answer, calls: int) -> float | None:
        """Milliseconds per call of ``calls`` calls on a fresh input, L2 flushed, from this process's
        clock; the last two results verified after the run (None where one was wrong). The run's length
        is secret, so no call knows whether it will be checked."""
        self.fresh_big()
        self.flush.zero_()
        self.written()
        start = _clock()
        reply = answer.ask_raw("timed", self.big_spec, calls)
        ms = (_clock() - start) * 1e3 / calls
        if reply is None or not answer.reply(reply, "timed call"):
            return None
        if reply.get("aliased"):
            answer.verdict.found(OUTPUT_ALIASES, f"{calls} calls back to back: an output shared memory with the one "
                                                 f"before it (a cached result)")
        answer.verdict.calls += calls
        right = self.judge(answer, answer.ask_raw("collect", self.big_spec), self.big_spec, self.pristine,
                           f"timed call ({calls} back to back)" if calls > 1 else "timed call", "timed",
                           identity=answer.name == COPY_ROW)
        if right and calls > 1:  # the call before the last, read after the last: skipped work or overwritten
            right = self.judge(answer, answer.ask_raw("collect", self.big_spec, "earlier"), self.big_spec,
                               self.pristine, f"timed call {calls - 1} of {calls} back to back, read after the last",
                               "timed", identity=answer.name == COPY_ROW)
        answer.ask_raw("forget")  # its outputs freed: the next call reuses their memory, as a model's does
        return ms if right else None
    # endregion


COPY_ROW = "copy (x.clone())"


def evaluate(answers, *, dtype: torch.dtype = torch.float32, device=None, numel: int | None = None,
             trials: int = TRIALS, seed: int | None = None, timed: bool = True, rounds: int = ROUNDS):
    """Judge ``answers`` (a path, or a dict from name to path) as the module's docstring says: a :class:`Verdict` (a
    dict of them, the copy's under :data:`COPY_ROW`, where a dict was given). The seed is secret unless given. Rows
    take turns in the timed ``rounds`` (one on a CPU), so a slow spell falls on every row."""
    single = not isinstance(answers, dict)
    paths = {Path(answers).stem: Path(answers)} if single else {k: Path(v) for k, v in answers.items()}
    device = check._device(device)
    if dtype not in check.MAX_ULP:
        raise TypeError(f"evaluate: dtype must be one of {', '.join(map(str, check.MAX_ULP))}, got {dtype}")
    if device.type == "cuda":
        torch.cuda.empty_cache()  # memory this process cached is free for the answers' processes
    if numel is None:
        numel = env.problem_numel(dtype, tensors=PARENT_TENSORS)[0] if device.type == "cuda" else CPU_NUMEL
    judge = _Judge(dtype, device, numel, secrets.randbits(62) if seed is None else seed)
    rows = {**({COPY_ROW: COPY} if timed else {}), **paths}
    started, verdicts = {}, {}
    try:
        for name, path in rows.items():
            start = _clock()
            answer = started[name] = _Answer(name, path, Verdict(name, dtype, device, numel), judge)
            if name != COPY_ROW:
                judge.check(answer, trials)
            answer.verdict.seconds += _clock() - start
            verdicts[name] = answer.verdict
        if timed:
            _time_in_turns(judge, started, rounds if device.type == "cuda" else 1)
    finally:
        for answer in started.values():
            answer.stop()
        del judge, started
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return verdicts[next(iter(paths))] if single else verdicts


# region: turns
def _time_in_turns(judge: _Judge, answers: dict[str, _Answer], rounds: int) -> None:
    """Each answer's flushed and back-to-back calls, round after round; then the speed flags. The copy
    opens each round and closes it with a second back-to-back run: no flag rests on one run of the copy."""
    def turn(answer: _Answer, flushed_reps: int) -> None:
        start = _clock()
        if answer.alive and not answer.wrong_before:  # untimed, verified: its allocator holds again the two
            judge.timed(answer, 2)  # outputs a back-to-back run alternates between (the last turn freed them)
        for _ in range(flushed_reps):
            if answer.alive and not answer.wrong_before and (ms := judge.timed(answer, 1)) is not None:
                answer.verdict.flushed_ms.append(ms)
        calls = BACK_TO_BACK[0] + int(torch.randint(BACK_TO_BACK[1] - BACK_TO_BACK[0], (), generator=judge.generator))
        if answer.alive and not answer.wrong_before and (ms := judge.timed(answer, calls)) is not None:
            answer.verdict.back_to_back_ms.append(ms)
        answer.ask_raw("forget", True)  # its turn is over: its cached memory back to the device
        answer.verdict.seconds += _clock() - start

    for _ in range(rounds):
        for answer in answers.values():  # the copy first: it opens the round
            turn(answer, REPS)
        turn(answers[COPY_ROW], 0)  # and closes it, back to back only
    copy = answers[COPY_ROW].verdict
    if not copy.flushed_ms or judge.device.type != "cuda":  # a CPU's times only stand in for a GPU's
        return
    # The copy's fast end under each timer: back to back, its fastest run (two per round).
    copy_fast = {"flushed": float(np.quantile(copy.flushed_ms, 0.2)),
                 "back to back": min(copy.back_to_back_ms, default=0.0)}
    gbps = env.DATASHEET_BANDWIDTH_GBPS.get(bench.device_name(judge.device))
    bound_ms = bench.roofline_ms(judge.numel, judge.dtype, gbps) if gbps else None  # a SELU's bytes at the peak
    for name, answer in answers.items():
        for timer, ms in (("flushed", answer.verdict.flushed_ms), ("back to back", answer.verdict.back_to_back_ms)):
            if name != COPY_ROW and ms and float(np.median(ms)) < copy_fast[timer] * (1 - SUSPECT_MARGIN):
                answer.verdict.found(TOO_FAST, f"{timer}: median {np.median(ms):.3f} ms, more than {SUSPECT_MARGIN:.0%} "
                                               f"under the copy's fast end ({copy_fast[timer]:.3f} ms), which moves the "
                                               f"same bytes" + (f"; memory at the datasheet's peak needs {bound_ms:.3f} ms"
                                                                if bound_ms else ""))
# endregion


def speed_table(verdicts: dict[str, Verdict]) -> dict:
    """The timed rows of one :func:`evaluate` as a record: medians, p20-p80, and ratios to the copy."""
    copy_median = float(np.median(verdicts[COPY_ROW].flushed_ms)) if verdicts[COPY_ROW].flushed_ms else math.nan
    rows = []
    for name, v in verdicts.items():
        q = np.quantile(v.flushed_ms, [0.5, 0.2, 0.8]) if v.flushed_ms else [math.nan] * 3
        back = float(np.median(v.back_to_back_ms)) if v.back_to_back_ms else math.nan
        rows.append({"answer": name, "findings": v.names(), "median_ms": float(q[0]), "q20_ms": float(q[1]),
                     "q80_ms": float(q[2]), "back_to_back_ms": back, "x_copy": float(q[0]) / copy_median,
                     "fastest_back_to_back_ms": min(v.back_to_back_ms, default=math.nan), "seconds": v.seconds,
                     "calls": v.calls})
    any_verdict = next(iter(verdicts.values()))
    return {"device": bench.device_name(any_verdict.device), "device_slug": env.device_slug(any_verdict.device),
            "torch": torch.__version__, "dtype": bench.dtype_name(any_verdict.dtype), "numel": any_verdict.numel,
            "bytes": bench.bytes_moved(any_verdict.numel, any_verdict.dtype), "rows": rows}
