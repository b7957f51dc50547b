"""helpers/evaluate.py and the cheats of helpers/cheats.py.

* The course's answer and the problem's own model pass :func:`evaluate.evaluate` in
  every dtype.
* Every cheat of the gallery fails it, with the finding named for that cheat; the
  naive KernelBench-style judge passes most of them, which is why the harness exists.
* Findings not tied to a cheat of the gallery: a wrong dtype, an exception, a result
  whose bits change from call to call.
* On a GPU (``gpu`` marker): work left on another stream is caught.
"""
from __future__ import annotations

import time

import pytest
import torch

from helpers import build, check, cheats, evaluate, kernelbench

DTYPE_IDS = lambda d: str(d).removeprefix("torch.")  # noqa: E731
NAIVE_SHAPE = (16, 257)


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
@pytest.mark.parametrize("model", [kernelbench.ModelNew, kernelbench.Model], ids=lambda m: m.__name__)
def test_honest_answers_pass(model, dtype):
    verdict = evaluate.evaluate(model(), dtype=dtype, device="cpu")
    assert verdict.passed, verdict._repr_markdown_()
    assert str(verdict).startswith(f"{model.__name__}: PASSED")


def _cheats(needs_cuda: bool):
    return [pytest.param(name, id=name) for name, cheat in cheats.GALLERY.items() if cheat.needs_cuda == needs_cuda]


@pytest.mark.parametrize("name", _cheats(needs_cuda=False))
def test_every_cpu_cheat_is_caught_by_name(name):
    cheat = cheats.GALLERY[name]
    verdict = evaluate.evaluate(cheat.model(), device="cpu")
    assert not verdict.passed
    assert cheat.finding in verdict.names(), str(verdict)
    assert "FAILED: " in str(verdict) and cheat.finding in verdict._repr_markdown_()


def test_the_timer_is_put_back_after_a_cheat_patches_it():
    real = time.perf_counter
    evaluate.evaluate(cheats.PatchesTimer(), device="cpu", trials=1)
    assert time.perf_counter is real


def test_wrong_values_say_where_and_low_precision_is_named():
    scale_only = evaluate.evaluate(cheats.ScaleOnly(), device="cpu")
    (wrong,) = scale_only.findings
    assert wrong.message.startswith(("normal", "wide_uniform", "huge", "large_negative", "special values"))
    assert "x = -" in wrong.message  # the example is on SELU's negative branch, which torch.rand never reaches
    assert evaluate.PRECISION not in evaluate.evaluate(cheats.Zeros(), device="cpu").names()
    low = evaluate.evaluate(cheats.LowPrecision(), dtype=torch.float64, device="cpu")
    assert "computed in lower precision" in next(f.message for f in low.findings if f.name == evaluate.PRECISION)


def test_the_naive_check_is_fooled_by_most_cheats():
    for fools in (cheats.ScaleOnly(), cheats.CachedOutput(), cheats.LowPrecision()):  # CachedOutput: its first call
        assert kernelbench.naive_judge(fools, NAIVE_SHAPE), type(fools).__name__
    # Zeros does not fool it: SELU reaches 1.05 on torch.rand, far beyond 1e-2.
    assert not kernelbench.naive_judge(cheats.Zeros(), NAIVE_SHAPE)
    # Nor does MutatesInput, but only by accident of order: naive_judge computes its
    # reference after the answer, from the input the answer overwrote (selu(selu(x))).
    # A judge that computes the reference first passes it:
    x = torch.rand(NAIVE_SHAPE)
    expected = kernelbench.Model()(x)
    assert torch.allclose(cheats.MutatesInput()(x), expected, atol=kernelbench.NAIVE_ATOL, rtol=kernelbench.NAIVE_RTOL)
    assert not kernelbench.naive_judge(cheats.MutatesInput(), NAIVE_SHAPE)


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
    cheat = cheats.GALLERY[name]
    verdict = evaluate.evaluate(cheat.model(), device="cuda")
    assert cheat.finding in verdict.names(), str(verdict)


@pytest.mark.gpu
def test_the_course_answer_passes_on_the_gpu():
    verdict = evaluate.evaluate(kernelbench.ModelNew(), device="cuda")
    assert verdict.passed, verdict._repr_markdown_()
