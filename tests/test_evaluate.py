"""helpers/evaluate.py: the judge of notebook 06 and appendix A6.

* Honest answers pass with no finding, in every dtype (on a GPU: torch.compile and the Triton
  operator too).
* Every cheat of the gallery (answers/cheats) is caught by the finding named for it; the naive
  KernelBench-style judge passes the ones the gallery says it passes.
* Each defence on its own: the answer's process cannot reach the judge's clock or inputs, a
  crash or a hang is a finding, behaviour that changes with size, use or timing is named so.
"""
from __future__ import annotations

import textwrap
import time

import pytest
import torch

from answers import gallery
from answers.gallery import CHEATS, HONEST, HONEST_NEEDS_GPU
from helpers import check, evaluate

DTYPE_IDS = lambda d: str(d).removeprefix("torch.")  # noqa: E731


def _answer(tmp_path, body: str, name: str = "answer") -> str:
    """An answer file whose ``ModelNew.forward(self, x)`` is ``body``."""
    path = tmp_path / f"{name}.py"
    path.write_text("import os, time\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n"
                    "    def forward(self, x):\n        self.calls += 1\n" + textwrap.indent(body, " " * 8) + "\n")
    return str(path)


@pytest.mark.parametrize("dtype", check.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", [n for n in HONEST if n not in HONEST_NEEDS_GPU])
def test_honest_answers_pass(name, dtype):
    verdict = evaluate.evaluate(str(HONEST[name]), dtype=dtype, device="cpu", timed=False)
    assert verdict.passed, verdict._repr_markdown_()
    assert str(verdict).startswith(f"{HONEST[name].stem}: PASSED")


@pytest.mark.parametrize("name", [n for n, c in CHEATS.items() if not c.needs_gpu])
def test_every_cpu_cheat_is_caught_by_name(name):
    cheat = CHEATS[name]
    verdict = evaluate.evaluate(str(cheat.path), device="cpu", trials=2)
    assert cheat.finding in verdict.names(), str(verdict)
    assert cheat.finding in verdict._repr_markdown_()


def test_the_naive_judge_passes_what_the_judge_catches():
    for name in ("scale_only", "size_gated", "call_gated", "partial", "patches_timer", "patched_sync", "timing_gated",
                 "overwrites_earlier_output"):
        naive = gallery.naive_judge(CHEATS[name].path, device="cpu", numel=2**20, trials=2, reps=2)
        assert naive.correct and naive.numel == 2**20, name
    assert not gallery.naive_judge(CHEATS["zeros"].path, device="cpu", numel=4096, trials=1, reps=1).correct
    assert evaluate.evaluate(str(CHEATS["scale_only"].path), device="cpu", timed=False, trials=1).names() == [
        evaluate.WRONG_VALUES]


def test_the_naive_judge_puts_back_what_an_answer_replaced():
    real = time.perf_counter, torch.cuda.synchronize
    gallery.naive_judge(CHEATS["patches_timer"].path, device="cpu", numel=64, trials=1, reps=1)
    gallery.naive_judge(CHEATS["patched_sync"].path, device="cpu", numel=64, trials=1, reps=1)
    assert (time.perf_counter, torch.cuda.synchronize) == real


def test_the_answer_cannot_reach_the_judges_clock_or_seed(tmp_path):
    """Patches stay in the answer's process, and the inputs differ from one evaluation to the next."""
    record = tmp_path / "first_inputs.txt"
    path = _answer(tmp_path, f"if self.calls == 1:\n    open({str(record)!r}, 'a').write(repr(x.sum().item()) + '\\n')\n"
                             "time.perf_counter = lambda: 0.0\nreturn torch.selu(x)")
    clock = time.perf_counter
    first = evaluate.evaluate(path, device="cpu", trials=1, timed=False)
    evaluate.evaluate(path, device="cpu", trials=1, timed=False)
    assert time.perf_counter is clock and evaluate._clock is clock
    assert first.names() == [evaluate.TIMER_PATCHED]
    sums = record.read_text().split()
    assert len(sums) == 2 and sums[0] != sums[1], sums


def test_wrong_values_say_where_and_low_precision_is_named():
    (wrong,) = evaluate.evaluate(str(CHEATS["scale_only"].path), device="cpu", trials=1, timed=False).findings
    assert "x = -" in wrong.message  # an example on SELU's negative branch, which torch.rand never reaches
    assert evaluate.PRECISION not in evaluate.evaluate(str(CHEATS["zeros"].path), device="cpu", trials=1,
                                                       timed=False).names()
    low = evaluate.evaluate(str(CHEATS["low_precision"].path), dtype=torch.float64, device="cpu", trials=1, timed=False)
    assert "computed in bfloat16" in next(f.message for f in low.findings if f.name == evaluate.PRECISION)


def test_input_layouts_reach_the_answer(tmp_path):
    """An answer that reads its input as if it were contiguous fails on the views."""
    path = _answer(tmp_path, "return torch.selu(torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), "
                             "x.storage_offset()))")
    verdict = evaluate.evaluate(path, device="cpu", trials=1, timed=False)
    (wrong,) = [f for f in verdict.findings if f.name == evaluate.WRONG_VALUES]
    assert any(layout in wrong.message for layout in evaluate.LAYOUTS), wrong.message


@pytest.mark.parametrize(("body", "finding"), [
    ("return torch.selu(x).double()", evaluate.WRONG_METADATA),
    ("return torch.selu(x).flatten()", evaluate.WRONG_METADATA),
    ("return 1 / 0", evaluate.RAISED),
    ("y = torch.selu(x)\nreturn torch.nextafter(y, y * 2) if self.calls % 2 else y", evaluate.NONDETERMINISTIC),
    ("os._exit(3)", evaluate.CRASHED),
    # Wrong at the problem size only when called again within half a millisecond: back to back.
    ("quick = time.monotonic() - getattr(self, 'last', 0.0) < 5e-4\n"
     "y = x * 2 if quick and x.numel() >= 2**20 else torch.selu(x)\n"
     "self.last = time.monotonic()\nreturn y", evaluate.TIMING_DEPENDENT),
], ids=["dtype", "shape", "raises", "nondeterministic", "crashes", "wrong when timed"])
def test_other_findings(tmp_path, body, finding):
    verdict = evaluate.evaluate(_answer(tmp_path, body), device="cpu", trials=1)
    assert verdict.names()[:1] == [finding], verdict._repr_markdown_()


def test_a_hung_answer_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate, "TIMEOUT_S", 2)
    start = time.perf_counter()
    verdict = evaluate.evaluate(_answer(tmp_path, "time.sleep(60)"), device="cpu", trials=1)
    assert verdict.names() == [evaluate.CRASHED] and "no reply in 2 s" in verdict.findings[0].message
    assert time.perf_counter() - start < 30


def test_an_answer_that_does_not_import_is_a_finding(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\nraise ImportError('no such kernel')\n")
    verdict = evaluate.evaluate(str(path), device="cpu")
    assert verdict.names() == [evaluate.RAISED] and "ImportError: no such kernel" in verdict.findings[0].message


def test_timed_rows_take_turns_beside_the_copy():
    verdicts = evaluate.evaluate({"torch.selu": str(HONEST["torch.selu"]), "cached": str(CHEATS["cached_output"].path)},
                                 device="cpu", trials=1, numel=4096)
    assert list(verdicts) == [evaluate.COPY_ROW, "torch.selu", "cached"]
    rounds = 1  # on a CPU
    assert len(verdicts["torch.selu"].flushed_ms) == rounds * evaluate.REPS
    assert len(verdicts["torch.selu"].back_to_back_ms) == rounds
    # the copy, the yardstick of "faster than a copy", runs back to back at both ends of each round
    assert len(verdicts[evaluate.COPY_ROW].back_to_back_ms) == 2 * rounds
    assert verdicts["cached"].flushed_ms == []  # wrong before timing: never timed
    table = evaluate.speed_table(verdicts)
    assert [r["answer"] for r in table["rows"]] == list(verdicts) and table["rows"][0]["x_copy"] == 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CHEATS))
def test_every_cheat_is_caught_by_name_on_the_gpu(name):
    cheat = CHEATS[name]
    # 2^28 elements: work left on another stream keeps the device busy well past STREAM_BUSY_MS
    verdict = evaluate.evaluate(str(cheat.path), device="cuda", trials=1, numel=2**28, timed=cheat.timed)
    assert cheat.finding in verdict.names(), str(verdict)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=DTYPE_IDS)
def test_honest_answers_pass_on_the_gpu(dtype):
    verdicts = evaluate.evaluate({name: str(path) for name, path in HONEST.items()}, dtype=dtype, device="cuda",
                                 trials=1, numel=2**26)
    # "faster than a copy" reads the timings, which a test must not judge (A6's records do); every
    # other finding is about what the answers computed, timed calls included.
    flagged = {name: [n for n in v.names() if n != evaluate.TOO_FAST] for name, v in verdicts.items()}
    assert not any(flagged.values()), "\n".join(v._repr_markdown_() for v in verdicts.values())


def test_the_comparison_forgives_ulps_and_nothing_else():
    """The comparison's fast path (every element finite and within its ulps) passes no result
    that the element-by-element check would fail. (Near 0 an absolute error of 2 eps is forgiven,
    sign of zero included: Inductor's SELU computes exp(x) - 1.)"""
    x = torch.linspace(-3, 3, 4099)
    expected = check.selu_reference(x).float()
    within = expected.view(torch.int32).add(check.MAX_ULP[torch.float32]).view(torch.float32)
    assert evaluate._compare("within", x, within, identity=False) is None
    beyond = expected.view(torch.int32).add(check.MAX_ULP[torch.float32] + 1).view(torch.float32)
    assert not evaluate._compare("beyond", x, beyond, identity=False).passed
    for problem, where, value in (("the wrong sign", 2, -1.0), ("inf for the largest float", 1, float("inf")),
                                  ("NaN for a number", 2, float("nan"))):
        x_edge = torch.tensor([0.0, torch.finfo(torch.float32).max / check.SELU_SCALE, 1.0])
        got = check.selu_reference(x_edge).float()
        got[where] = value
        assert not evaluate._compare(problem, x_edge, got, identity=False).passed, problem


def test_a_back_to_back_run_holds_one_earlier_output_during_each_call(tmp_path):
    # As a loop that keeps its last result: during each call at the problem size the caller holds one earlier
    # output, no more, so the timed loop's memory is a model's; the run's last two are read only after it.
    path = _answer(tmp_path, """
import weakref
y = torch.selu(x)
if x.numel() >= 2**20:  # problem-size outputs only: the judge keeps the small ones alive on purpose
    self.outputs = [ref for ref in getattr(self, "outputs", []) if ref() is not None]
    if len(self.outputs) > 1:
        raise RuntimeError(f"{len(self.outputs)} earlier outputs alive during a call")
    self.outputs.append(weakref.ref(y))
return y""")
    verdict = evaluate.evaluate(path, device="cpu", trials=1)
    assert verdict.passed and verdict.back_to_back_ms, str(verdict)
