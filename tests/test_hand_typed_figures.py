"""No measured-looking figure is typed by hand into a notebook's prose.

A time, a bandwidth or a percentage written into a markdown cell goes stale the day
the notebook runs on another GPU or another torch; the numbers belong in cell
outputs, read from the run's records. Allowed: goals (a figure after ≤, ≥, "at least"
or "at most"), and figures whose sentence says what they are: a datasheet value, an
assumption, arithmetic, or a prediction that a cell then checks.
"""
from __future__ import annotations

import json
import re

import pytest

import run_notebooks

NOTEBOOKS = run_notebooks.notebooks()  # the main path and the appendices
# A number with the unit of a measurement, or a ratio to a peer ("1.04× the copy").
MEASURED = re.compile(
    r"(?P<number>\d[\d,]*(?:\.\d+)?(?:\s*[–-]\s*\d[\d,]*(?:\.\d+)?)?)\s*"
    r"(?P<unit>ms\b|µs\b|us\b|ns\b|GB/s|TB/s|GiB/s|%|×\s*(?:the\s+)?(?:copy|eager|faster|slower|torch))"
)
GOAL_BEFORE = re.compile(r"(≤|≥|<|>|at least|at most|no more than|within|sleeps for|goal[^.]*?)\s*$")
SAYS_WHAT_IT_IS = re.compile(r"datasheet|assum|arithmetic|predict|20–80%|20th|80th", re.IGNORECASE)


def _sentence(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n\n", 0, start))
    right = min((i for i in (text.find(". ", end), text.find("\n\n", end)) if i != -1), default=len(text))
    return text[left + 1:right]


def hand_typed_figures(text: str) -> list[str]:
    """The measured-looking figures of a markdown text that nothing marks as allowed."""
    found = []
    for match in MEASURED.finditer(text):
        before = text[max(0, match.start() - 40):match.start()]
        if GOAL_BEFORE.search(before) or SAYS_WHAT_IT_IS.search(_sentence(text, match.start(), match.end())):
            continue
        found.append(match.group(0))
    return found


def test_the_detector_flags_measurements_and_passes_what_says_what_it_is():
    assert hand_typed_figures("The kernel takes 4.25 ms, at 3,029 GB/s.") == ["4.25 ms", "3,029 GB/s"]
    assert hand_typed_figures("It reaches 73–78% of the copy.") == ["73–78%"]
    assert hand_typed_figures("ours is 1.04× the copy here") == ["1.04× the copy"]
    assert hand_typed_figures("The goal: ≤ 1.01 × copy, and at least 0.95 × eager.") == []
    assert hand_typed_figures("no more than 2% slower; a gap within 1% is a tie") == []
    assert hand_typed_figures("an answer whose first call sleeps for 50 ms") == []  # the example's own constant
    assert hand_typed_figures("About 3.35 TB/s of memory bandwidth (datasheet figures).") == []
    assert hand_typed_figures("Take 0.7 µs (an assumption).") == []
    assert hand_typed_figures("the 20–80% band of one size") == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_hand_typed_figures_in_markdown(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    offending = {i: figures for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"
                 and (figures := hand_typed_figures("".join(cell["source"])))}
    assert not offending, f"{notebook.name}: measured-looking figures typed into markdown cells {offending}"
