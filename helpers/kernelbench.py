"""The course's operator as a KernelBench answer, and two ways of judging one.

KernelBench poses each problem as a module ``Model`` with ``get_inputs()`` and
``get_init_inputs()``; an answer is a drop-in ``ModelNew`` with the same
constructor and forward. Its level-1 problem ``27_SELU_`` is ``torch.selu`` of one
tensor drawn with ``torch.rand``. Here the same interface is written for the
course's reference shape, and the answer is the course's operator, gradients
included.

:func:`judge` runs two judges on an answer: a naive one, as a KernelBench-style
evaluation does by default (``torch.allclose`` with absolute and relative
tolerances of 1e-2, on ``torch.rand`` inputs, one trial), and the course's
harness (:func:`helpers.check.check_unary`: a float64 reference in ulps, both
signs, special values, odd sizes, views, poisoned outputs). Notebook 06 builds an
evaluation on the second.
"""
from __future__ import annotations

import torch

from . import check, env, ops
from .report import Markdown, _table

BATCH_SIZE, DIM = env.REFERENCE_SHAPE
# KernelBench-style defaults: the tolerances of its correctness check, and its default trial count.
NAIVE_ATOL = NAIVE_RTOL = 1e-2
NAIVE_TRIALS = 1


# region: answer
class Model(torch.nn.Module):
    """The problem: SELU of one tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.selu(x)


class ModelNew(torch.nn.Module):
    """The answer: the same forward on the course's operator, which has a backward
    (notebook 04) and runs on the CPU and the GPU alike."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.selu_vectorized(x)
# endregion


class ScaleOnly(torch.nn.Module):
    """WRONG ON PURPOSE: ``λ·x``, SELU without its negative branch. It is right for every
    input ``torch.rand`` can draw."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * check.SELU_SCALE


def get_inputs(shape: tuple[int, ...] = (BATCH_SIZE, DIM), device=None) -> list[torch.Tensor]:
    """The problem's input, drawn as the problem draws it: ``torch.rand``, in [0, 1)."""
    return [torch.rand(shape, device=device)]


def get_init_inputs() -> list:
    """The constructor's arguments: none."""
    return []


def naive_judge(model_new: torch.nn.Module, shape: tuple[int, ...], device=None, trials: int = NAIVE_TRIALS) -> bool:
    """A KernelBench-style check: ``allclose(atol=rtol=1e-2)`` against SELU on
    :func:`get_inputs`'s ``torch.rand``, ``trials`` times."""
    return check.naive_rand_check(model_new, device=device, shape=shape, trials=trials, atol=NAIVE_ATOL,
                                  rtol=NAIVE_RTOL)


def judge(answers: dict[str, torch.nn.Module], device=None, shape: tuple[int, ...] = (64, 1027)) -> Markdown:
    """Both judges on each answer, as a table: the naive check, and the harness's verdict
    with its worst case."""
    rows = []
    for name, model in answers.items():
        naive = naive_judge(model, shape, device)
        report = check.check_unary(model, dtype=torch.float32, device=device, trials=2, seed=0, name=name)
        verdict = "passes" if report.passed else f"FAILS ({len(report.worst.failing)} cases, e.g. " \
                                                 f"{report.worst.failing[0]})"
        rows.append([name, "passes" if naive else "FAILS", verdict])
    lines = _table(["answer", f"naive check (torch.rand, allclose 1e-2, {NAIVE_TRIALS} trial)", "course harness"],
                   ["---", "---", "---"], rows)
    return Markdown("\n".join(lines))


def gradients_agree(device=None, shape: tuple[int, ...] = (64, 1027), seed: int = 0) -> str:
    """``ModelNew``'s input gradient against ``Model``'s, on inputs of both signs, in one line."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator).mul_(4).to(device)
    grad = torch.randn(shape, generator=generator).to(device)
    gradients = []
    for model in (Model(), ModelNew()):
        leaf = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(model(leaf), leaf, grad)
        gradients.append(g)
    return f"ModelNew's input gradient against Model's (torch.selu under torch autograd): {check.agreement(*gradients)}"
