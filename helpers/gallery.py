"""Notebook 06's tables: the cheats judged twice, the honest answers in every dtype, and
every answer timed by two timers.

>>> gallery.cheats_table("cuda")                 # naive check and harness, cheat by cheat  # doctest: +SKIP
>>> gallery.honest_table("cuda")                 # the answers that must pass, every dtype    # doctest: +SKIP
>>> table, shown = gallery.speed()               # measured on this GPU, or the committed H100 table  # doctest: +SKIP

The harness is :mod:`helpers.evaluate`; the cheats are :mod:`helpers.cheats`.
"""
from __future__ import annotations

import torch

from . import check, cheats, env, evaluate, kernelbench, results, triton_selu
from .report import Markdown, _table

SPEED_FILE = "06_speed.json"
NAIVE_SHAPE = (64, 1027)
# The cheats that aim at the timer rather than the values: timed beside the honest answers.
TIMING_CHEATS = ("Zeros", "CachedOutput", "PatchesTimer", "SideStream")


def _naive(model: torch.nn.Module, device: torch.device) -> bool:
    """The naive KernelBench-style check, with any clock the answer replaces put back."""
    with evaluate._watched_timers(lambda *_: None, "naive check"):
        return kernelbench.naive_judge(model, NAIVE_SHAPE, device)


def cheats_table(device=None) -> Markdown:
    """Each cheat of :data:`helpers.cheats.GALLERY` through the naive check and through the
    harness (float32): whether each passes, what the harness found, and its first case for
    the finding that names the cheat."""
    device = check._device(device)
    rows = []
    for name, cheat in cheats.GALLERY.items():
        if cheat.needs_cuda and device.type != "cuda":
            rows.append([name, "needs a CUDA GPU: not run here", "", "", ""])
            continue
        naive = _naive(cheat.model(), device)
        verdict = evaluate.evaluate(cheat.model(), device=device)
        named = next((f for f in verdict.findings if f.name == cheat.finding), None)
        rows.append([name, "passes" if naive else "FAILS", ", ".join(verdict.names()) or "PASSED",
                     "yes" if named else "**NO**", (named.message if named else "").replace("|", "/")])
    lines = _table(["cheat", "naive check", "harness findings", "named for the cheat", "first case"],
                   ["---", "---", "---", "---", "---"], rows)
    return Markdown(f"*{device.type}, float32; naive check: torch.rand {NAIVE_SHAPE}, allclose 1e-2, "
                    f"{kernelbench.NAIVE_TRIALS} trial*\n\n" + "\n".join(lines))


def honest_answers(device=None) -> dict[str, torch.nn.Module]:
    """The answers that must pass: the problem's own model, the course's ``ModelNew``, and the
    Triton operator where Triton and a GPU are here."""
    answers = {"Model (torch.selu)": kernelbench.Model(), "ModelNew (the course's operator)": kernelbench.ModelNew()}
    if check._device(device).type == "cuda" and triton_selu.register():
        answers["selu_triton (the Triton operator)"] = triton_selu.selu_triton
    return answers


def honest_table(device=None, dtypes=check.DTYPES) -> Markdown:
    """Every honest answer through the harness in every dtype: the verdict and how many calls
    it took."""
    device = check._device(device)
    rows = []
    for name, answer in honest_answers(device).items():
        for dtype in dtypes:
            verdict = evaluate.evaluate(answer, dtype=dtype, device=device)
            outcome = "PASSED" if verdict.passed else "FAILED: " + "; ".join(f.message for f in verdict.findings)
            rows.append([name, str(dtype).removeprefix("torch."), verdict.calls, outcome.replace("|", "/")])
    lines = _table(["answer", "dtype", "calls", "harness"], ["---", "---", "---:", "---"], rows)
    return Markdown(f"*{device.type}, {evaluate.TRIALS} trials each*\n\n" + "\n".join(lines))


def timed_answers(device=None) -> dict:
    """What :func:`speed` times: the honest answers but the problem's model (eager is a row
    of its own), and the cheats that aim at the timer."""
    device = check._device(device)
    answers = {name: answer for name, answer in honest_answers(device).items() if not name.startswith("Model ")}
    for name in TIMING_CHEATS:
        cheat = cheats.GALLERY[name]
        if not cheat.needs_cuda or device.type == "cuda":
            answers[f"{name} (cheat)"] = cheat.model()
    return answers


def measure_speed(device=None) -> dict:
    """:func:`helpers.evaluate.measure_speed` of :func:`timed_answers` at float32's problem size."""
    return evaluate.measure_speed(timed_answers(device), device=check._device(device))


def speed() -> tuple[dict, Markdown]:
    """On a GPU, :func:`measure_speed` (saved as ``06_speed.json``). Elsewhere, the same
    measured on this CPU at a small size, not saved: the rows show how the timers work, and
    the GPUs' committed tables (:func:`reference_speed_tables`) show the numbers that matter."""
    if env.can_build_cuda():
        table, source = results.here_or_reference_table(measure_speed, SPEED_FILE)
    else:
        numel, why = env.problem_numel(torch.float32)
        table = evaluate.measure_speed(timed_answers("cpu"), device="cpu", numel=numel)
        source = f"measured in this run on the CPU: {why}"
    return table, Markdown(f"*{source}*\n\n{evaluate.speed_table(table)}")


def reference_speed_tables(slugs: tuple[str, ...] = ("h100", "h200")) -> Markdown:
    """The committed timing tables of each GPU, one after the other."""
    parts = []
    for slug in slugs:
        table = results.load_table(SPEED_FILE, slug)
        parts.append(f"**{slug.upper()}**, committed\n\n{evaluate.speed_table(table)}" if table is not None
                     else f"**{slug.upper()}**: no committed table yet")
    return Markdown("\n\n".join(parts))


# region: suspects
# Exercise 1's three answers, each wrong in one way (or not): which finding does the harness report?
def exp_minus_one(x: torch.Tensor) -> torch.Tensor:
    """SELU with ``exp(x) - 1`` in place of ``expm1(x)``, in the input's dtype."""
    return check.SELU_SCALE * torch.where(x > 0, x, check.SELU_ALPHA * (torch.exp(x) - 1))


def in_float64(x: torch.Tensor) -> torch.Tensor:
    """SELU computed in float64, and returned so."""
    return torch.selu(x.double())


def all_but_the_last(x: torch.Tensor) -> torch.Tensor:
    """SELU of every element but the last, into a fresh tensor."""
    y = torch.empty_like(x)
    y.view(-1)[:-1] = torch.selu(x.reshape(-1)[:-1])
    return y


SUSPECTS = {"exp_minus_one": exp_minus_one, "in_float64": in_float64, "all_but_the_last": all_but_the_last}
# endregion
