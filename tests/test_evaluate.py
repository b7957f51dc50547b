"""helpers/evaluate.py: the harness of notebook 06.

* The problem's own model and the course's operator pass :func:`evaluate.evaluate` in every
  dtype.
* Every cheat of notebook 06 fails it, with the finding named for that cheat (the cheats are
  written again here, as the notebook writes them).
* Findings not tied to a cheat: a wrong dtype, an exception, bits that change from call to call.
* On a GPU (``gpu`` marker): work left on another stream is caught.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import pytest
import torch

from helpers import build, check, evaluate

DTYPE_IDS = lambda d: str(d).removeprefix("torch.")  # noqa: E731
_real_perf_counter = time.perf_counter


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.selu(x)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.ops.selu_course.selu_vectorized(x)


class ScaleOnly(torch.nn.Module):
    def forward(self, x):
        return x * check.SELU_SCALE


class Zeros(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


class CachedOutput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cached = None

    def forward(self, x):
        if self.cached is None:
            self.cached = torch.selu(x)
        return self.cached


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        return torch.selu_(x)


class LowPrecision(torch.nn.Module):
    def forward(self, x):
        return torch.selu(x.bfloat16()).to(x.dtype)


class SideStream(torch.nn.Module):
    def forward(self, x):
        stream = torch.cuda.Stream(x.device)
        stream.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(stream):
            return torch.selu(x)


class PatchesTimer(torch.nn.Module):
    def forward(self, x):
        time.perf_counter = lambda: _real_perf_counter() / 2
        return torch.selu(x)


class Cheat(NamedTuple):
    model: type
    finding: str
    needs_cuda: bool


CHEATS = {
    "ScaleOnly": Cheat(ScaleOnly, evaluate.WRONG_VALUES, False),
    "Zeros": Cheat(Zeros, evaluate.WRONG_VALUES, False),
    "CachedOutput": Cheat(CachedOutput, evaluate.OUTPUT_ALIASES, False),
    "MutatesInput": Cheat(MutatesInput, evaluate.INPUT_MODIFIED, False),
    "LowPrecision": Cheat(LowPrecision, evaluate.PRECISION, False),
    "SideStream": Cheat(SideStream, evaluate.OTHER_STREAM, True),
    "PatchesTimer": Cheat(PatchesTimer, evaluate.TIMER_PATCHED, False),
}


@pytest.fixture(scope="module", autouse=True)
def registered():
    return build.load("selu_vectorized")


@pytest.fixture(autouse=True)
def real_perf_counter():
    """Puts back time.perf_counter after every test, even one whose evaluate() failed: a
    cheat that patches it would otherwise halve every later timing in the session."""
    real = time.perf_counter
    yield
    time.perf_counter = real


@pytest.mark.parametrize("dtype", check.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("model", [ModelNew, Model], ids=lambda m: m.__name__)
def test_honest_answers_pass(model, dtype):
    verdict = evaluate.evaluate(model(), dtype=dtype, device="cpu")
    assert verdict.passed, verdict._repr_markdown_()
    assert str(verdict).startswith(f"{model.__name__}: PASSED")


def _cheats(needs_cuda: bool):
    return [pytest.param(name, id=name) for name, cheat in CHEATS.items() if cheat.needs_cuda == needs_cuda]


@pytest.mark.parametrize("name", _cheats(needs_cuda=False))
def test_every_cpu_cheat_is_caught_by_name(name):
    cheat = CHEATS[name]
    verdict = evaluate.evaluate(cheat.model(), device="cpu")
    assert not verdict.passed
    assert cheat.finding in verdict.names(), str(verdict)
    assert "FAILED: " in str(verdict) and cheat.finding in verdict._repr_markdown_()


def test_the_timer_is_put_back_after_a_cheat_patches_it():
    real = time.perf_counter
    evaluate.evaluate(PatchesTimer(), device="cpu", trials=1)
    assert time.perf_counter is real


def test_wrong_values_say_where_and_low_precision_is_named():
    scale_only = evaluate.evaluate(ScaleOnly(), device="cpu")
    (wrong,) = scale_only.findings
    assert wrong.message.startswith(("normal", "wide_uniform", "huge", "large_negative", "special values"))
    assert "x = -" in wrong.message  # the example is on SELU's negative branch, which torch.rand never reaches
    assert evaluate.PRECISION not in evaluate.evaluate(Zeros(), device="cpu").names()
    low = evaluate.evaluate(LowPrecision(), dtype=torch.float64, device="cpu")
    assert "computed in lower precision" in next(f.message for f in low.findings if f.name == evaluate.PRECISION)


def test_input_layouts_reach_the_answer():
    """An answer that reads its input as if it were contiguous fails on the views."""
    def flat(x):
        return torch.selu(torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset()))

    verdict = evaluate.evaluate(flat, device="cpu", trials=1)
    (wrong,) = [f for f in verdict.findings if f.name == evaluate.WRONG_VALUES]
    assert any(layout in wrong.message for layout in evaluate.LAYOUTS), wrong.message
    assert flat(torch.ones(3, 4)).equal(torch.selu(torch.ones(3, 4)))  # right on a contiguous input


class _Jitter(torch.nn.Module):
    """Within the ulp tolerance every time, but one ulp further from 0 on every other call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = check.selu_reference(x).to(x.dtype)
        return torch.nextafter(y, y * 2) if self.calls % 2 else y


@pytest.mark.parametrize(("model", "finding"), [
    (lambda x: torch.selu(x).double(), evaluate.WRONG_METADATA),
    (lambda x: torch.selu(x).flatten(), evaluate.WRONG_METADATA),
    (lambda x: [torch.selu(x)], evaluate.WRONG_METADATA),
    (lambda x: 1 / 0, evaluate.RAISED),
    (_Jitter(), evaluate.NONDETERMINISTIC),
], ids=["dtype", "shape", "not a tensor", "raises", "nondeterministic"])
def test_other_findings(model, finding):
    verdict = evaluate.evaluate(model, device="cpu", trials=2)
    assert verdict.names() == [finding], str(verdict)


@pytest.mark.gpu
@pytest.mark.parametrize("name", _cheats(needs_cuda=True))
def test_every_gpu_cheat_is_caught_by_name(name):
    cheat = CHEATS[name]
    verdict = evaluate.evaluate(cheat.model(), device="cuda")
    assert cheat.finding in verdict.names(), str(verdict)


@pytest.mark.gpu
def test_the_course_answer_passes_on_the_gpu():
    verdict = evaluate.evaluate(ModelNew(), device="cuda")
    assert verdict.passed, verdict._repr_markdown_()


# --------------------------------------------------------------------------- timing

def test_flags_are_read_against_the_copys_fast_end():
    row = lambda answer, ms, q20: {"answer": answer, "median_ms": ms, "q20_ms": q20, "q80_ms": ms,  # noqa: E731
                                   "naive_median_ms": ms, "naive_q20_ms": q20, "naive_q80_ms": ms}
    # A copy that ran slow in some calls (median 3.38, fast end 3.02): an answer at 3.00 is honest,
    # though more than 10% below the copy's median.
    table = {"bytes": 12 * 10**9, "datasheet_gbps": 4800.0,
             "rows": [row(evaluate.COPY_ROW, 3.38, 3.02), row(evaluate.EAGER_ROW, 3.39, 3.05), row("ok", 3.00, 3.00),
                      row("fast", 2.0, 2.0)]}
    assert evaluate.row_flags(table, table["rows"][2]) == []
    assert [f.split(":")[0] for f in evaluate.row_flags(table, table["rows"][3], "naive")] == [
        evaluate.IMPOSSIBLE, evaluate.SUSPECT]


def test_speed_flags():
    nbytes = 2 * 10**9  # 2 GB: 0.597 ms at 3.35 TB/s
    assert evaluate.speed_flags(1.0, copy_ms=1.0, eager_ms=1.1, nbytes=nbytes, datasheet_gbps=3350.0) == []
    suspect = evaluate.speed_flags(0.85, copy_ms=1.0, eager_ms=1.1, nbytes=nbytes, datasheet_gbps=None)
    assert [f.split(":")[0] for f in suspect] == [evaluate.SUSPECT]
    assert "1.29× eager, where the copy roofline allows 1.10×" in suspect[0]
    both = evaluate.speed_flags(0.5, copy_ms=1.0, eager_ms=1.1, nbytes=nbytes, datasheet_gbps=3350.0)
    assert [f.split(":")[0] for f in both] == [evaluate.IMPOSSIBLE, evaluate.SUSPECT]
    assert "(0.597 ms)" in both[0]


def test_timing_flags_a_cached_output_and_puts_the_clock_back():
    real = time.perf_counter
    table = evaluate.measure_speed({"CachedOutput": CachedOutput(), "PatchesTimer": PatchesTimer()},
                                   device="cpu", numel=1 << 20, rounds=1, reps=3)
    rows = {r["answer"]: r for r in table["rows"]}
    assert list(rows) == [evaluate.COPY_ROW, evaluate.EAGER_ROW, "CachedOutput", "PatchesTimer"]
    assert any(f.startswith(evaluate.SUSPECT) for f in evaluate.row_flags(table, rows["CachedOutput"]))
    assert time.perf_counter is real
    assert evaluate._clock is real


def test_timing_gives_a_writing_answer_the_same_input_every_row():
    seen = []

    def records(x):
        seen.append(x.clone())
        return torch.selu_(x)

    evaluate.measure_speed({"writes": records, "reads": lambda x: seen.append(x.clone()) or torch.selu(x)},
                           device="cpu", numel=1 << 10, rounds=1, reps=1)
    assert torch.equal(seen[0], seen[-1])  # the first call of "writes" and the last of "reads"


@pytest.mark.gpu
def test_the_side_stream_cheat_fools_only_the_naive_timer():
    table = evaluate.measure_speed({"SideStream": SideStream(), "ModelNew": ModelNew()},
                                   device="cuda", numel=1 << 28, rounds=1, reps=5)
    rows = {r["answer"]: r for r in table["rows"]}
    assert not evaluate.row_flags(table, rows["SideStream"]), rows["SideStream"]
    assert evaluate.row_flags(table, rows["SideStream"], "naive"), rows["SideStream"]
    assert not evaluate.row_flags(table, rows["ModelNew"]), rows["ModelNew"]  # an honest answer is not flagged


class _FakeStream:
    def synchronize(self):
        pass


def _stream_check_with_device_waits(monkeypatch, waits_ms):
    """evaluate._stream_check on the CPU, with a device whose torch.cuda.synchronize() takes
    each of ``waits_ms`` in turn (after the first, which only settles the device)."""
    now, waits = [0.0], iter([0.0, *waits_ms])
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: now.__setitem__(0, now[0] + next(waits) / 1e3))
    monkeypatch.setattr(evaluate, "_clock", lambda: now[0])
    monkeypatch.setattr(evaluate, "STREAM_CHECK_BYTES", 4096)
    calls, found = [], []
    evaluate._stream_check(lambda x: calls.append(x) or x.clone(), torch.float32, torch.device("cpu"), 0,
                           lambda kind, message: found.append((kind, message)))
    return calls, found


def test_the_stream_check_takes_the_least_of_its_tries(monkeypatch):
    # One slow reading, as when the host runs something else for a moment: the next call is idle.
    calls, found = _stream_check_with_device_waits(monkeypatch, [0.21, 0.01])
    assert len(calls) == 2 and found == []
    # Work left on another stream keeps the device busy after every call.
    calls, found = _stream_check_with_device_waits(monkeypatch, [1.4, 1.3, 1.5])
    assert len(calls) == evaluate.STREAM_CHECK_TRIES == 3
    assert [kind for kind, _ in found] == [evaluate.OTHER_STREAM]
    assert "at least 1.30 ms" in found[0][1] and "in each of 3 calls" in found[0][1]
    # An idle device at once: one call.
    calls, found = _stream_check_with_device_waits(monkeypatch, [0.01])
    assert len(calls) == 1 and found == []


def test_the_stream_check_reads_with_the_garbage_collector_off(monkeypatch):
    import gc

    states = []
    monkeypatch.setattr(evaluate, "_clock", lambda: states.append(gc.isenabled()) or 0.0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(evaluate, "STREAM_CHECK_BYTES", 4096)
    assert gc.isenabled()
    evaluate._stream_check(lambda x: x.clone(), torch.float32, torch.device("cpu"), 0, lambda *a: None)
    assert states == [False, False] and gc.isenabled()
