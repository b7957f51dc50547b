"""WRONG ON PURPOSE: answers to the SELU problem that cheat, each the shortest real form of
one cheat, and the finding of :func:`helpers.evaluate.evaluate` that catches it.

>>> for name, (cheat, finding, needs_cuda) in GALLERY.items(): ...   # doctest: +SKIP
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch

from . import evaluate
from .kernelbench import ScaleOnly

# The real clock, taken once, so that PatchesTimer called twice still halves it once.
_perf_counter = time.perf_counter


# region: gallery
class Zeros(torch.nn.Module):
    """``zeros_like(x)``: the cheapest answer. A check that compares only with a loose
    absolute tolerance, or only where SELU is near 0, passes it; on ``torch.rand`` the
    naive judge does not (SELU reaches 1.05 there)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


class CachedOutput(torch.nn.Module):
    """Computes SELU once and returns that same tensor for every later input: a benchmark
    that calls it in a loop times nothing, and a check that runs one trial sees a right
    answer."""

    def __init__(self) -> None:
        super().__init__()
        self.cached: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cached is None:
            self.cached = torch.selu(x)
        return self.cached


class MutatesInput(torch.nn.Module):
    """``torch.selu_(x)``: right values, no allocation, but the caller's input is gone. A
    check that computes its reference first and never looks at the input again passes it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.selu_(x)


class LowPrecision(torch.nn.Module):
    """Computes in bfloat16 and casts back: half the bytes of float32 on the GPU, within
    2^-9 relative, so an ``allclose`` of 1e-2 passes it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.selu(x.bfloat16()).to(x.dtype)


class SideStream(torch.nn.Module):
    """GPU only: launches SELU on a stream of its own and returns without making the
    current stream wait for it. A timer on the current stream measures almost nothing,
    and a check that calls ``torch.cuda.synchronize()`` (every stream) before comparing
    sees the right values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stream = torch.cuda.Stream(x.device)
        stream.wait_stream(torch.cuda.current_stream(x.device))  # x is ready: the values come out right
        with torch.cuda.stream(stream):
            return torch.selu(x)


def _halved_perf_counter() -> float:
    return _perf_counter() / 2


class PatchesTimer(torch.nn.Module):
    """Computes SELU correctly, but replaces ``time.perf_counter`` with a clock that runs at
    half speed and never puts it back: every later timing in the process reads half the
    time. No check of values can see it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.perf_counter = _halved_perf_counter
        return torch.selu(x)
# endregion


class Cheat(NamedTuple):
    model: type[torch.nn.Module]
    finding: str  # the finding evaluate() must report
    needs_cuda: bool


GALLERY = {
    "ScaleOnly": Cheat(ScaleOnly, evaluate.WRONG_VALUES, False),
    "Zeros": Cheat(Zeros, evaluate.WRONG_VALUES, False),
    "CachedOutput": Cheat(CachedOutput, evaluate.OUTPUT_ALIASES, False),
    "MutatesInput": Cheat(MutatesInput, evaluate.INPUT_MODIFIED, False),
    "LowPrecision": Cheat(LowPrecision, evaluate.PRECISION, False),
    "SideStream": Cheat(SideStream, evaluate.OTHER_STREAM, True),
    "PatchesTimer": Cheat(PatchesTimer, evaluate.TIMER_PATCHED, False),
}
