"""The committed notebooks are what a learner opens: each is checked as JupyterLab and a reader see it.

* the metadata JupyterLab writes on first open (kernelspec display name, language_info),
  so that opening a notebook does not modify a tracked file;
* a learner's structure: objectives at the top, a summary, exercises;
* executed top to bottom (execution counts in order, every code cell run), with no error
  output outside a cell tagged ``raises-exception``, no stderr output (progress bars,
  warnings) and no absolute path of the machine that ran it.
"""
from __future__ import annotations

import re

import nbformat
import pytest

import run_notebooks

NOTEBOOKS = run_notebooks.notebooks()  # the main path and the appendices
SECTIONS = {
    "objectives": re.compile(r"^#+ .*(what you will learn|objectives|goals)", re.I | re.M),
    "summary": re.compile(r"^#+ .*(summary|takeaways)", re.I | re.M),
    "exercises": re.compile(r"^#+ .*exercise", re.I | re.M),
}
# A path of the machine that executed the notebook: a home, a scratch or a root-level work folder.
ABSOLUTE_PATH = re.compile(r"(?<![\w.])(/home/|/root/|/tmp/|/work/|/Users/|/opt/|[A-Z]:\\\\)\w")


def output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join([output.evalue, *output.traceback])
    return "\n".join(str(output.data.get(kind, "")) for kind in ("text/plain", "text/markdown", "text/html"))


@pytest.fixture(params=NOTEBOOKS, ids=lambda path: path.stem)
def notebook(request):
    return nbformat.read(request.param, as_version=4)


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5


def test_metadata_is_what_jupyterlab_writes(notebook):
    spec = notebook.metadata.kernelspec
    assert (spec.name, spec.display_name, spec.language) == ("python3", "Python 3 (ipykernel)", "python")
    assert notebook.metadata.language_info.get("version"), "language_info has no version"
    assert notebook.nbformat == 4 and notebook.nbformat_minor >= 5 and all("id" in cell for cell in notebook.cells)


def test_a_learners_structure(notebook):
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    missing = [name for name, heading in SECTIONS.items() if not heading.search(markdown)]
    assert not missing, f"no {', '.join(missing)} heading"
    first_heading = next(i for i, cell in enumerate(notebook.cells) if SECTIONS["objectives"].search(cell.source))
    assert first_heading <= 2, "the objectives come at the top"


def test_executed_top_to_bottom_without_noise(notebook):
    counts = [cell.execution_count for cell in notebook.cells if cell.cell_type == "code"]
    assert None not in counts, "a code cell was never run"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                assert "raises-exception" in cell.metadata.get("tags", []), f"cell {i}: {output.ename}"
            assert not (output.output_type == "stream" and output.name == "stderr"), \
                f"cell {i}: stderr output {output.text[:80]!r}"
            found = ABSOLUTE_PATH.search(output_text(output))
            assert found is None, f"cell {i}: an absolute path in its output: {found.group(0)!r}"
