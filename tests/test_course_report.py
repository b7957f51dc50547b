"""The course report's table (helpers/results.py), which appendix A5 and the README show.

* Every ratio is taken against the copy of the record's own run, and a missing row shows as
  a dash, not as a number.
* The README's table is the one the committed records of results/<device>/06_report.json
  give. After a new GPU run, rewrite it with
  ``UPDATE_README=1 .venv/bin/python -m pytest tests/test_course_report.py -k readme``.
"""
from __future__ import annotations

import os
import re

import pytest
import torch

from helpers import env, results

README = env.REPO_ROOT / "README.md"
# The README's generated table lies between these two lines.
TABLE_START = "The table (generated from `results/<device>/06_report.json`; a test keeps it in step):\n\n"
TABLE_END = "\nThe same stages and peers against size"


def record(variant, op, dtype, run, gbps):
    """A record of 1e9 bytes moved at ``gbps``."""
    return {"variant": variant, "op": op, "dtype": dtype, "run": run, "gbps": gbps, "numel": 8, "bytes": 10**9,
            "median_ms": 1e3 / gbps, "config": None}


def table(device="a GPU"):
    records = [record("copy", "forward", "float32", "r1", 100.0), record("selu_vectorized", "forward", "float32", "r1", 99.0),
               record("torch_eager", "forward", "float32", "r1", 98.0),
               # another run's copy must not be the yardstick of run r1's records
               record("copy", "forward", "float32", "r2", 50.0), record("selu_naive", "forward", "float32", "r2", 10.0),
               record("copy", "step", "float32", "r4", 100.0), record("selu_course_autograd", "step", "float32", "r4", 95.0)]
    return {"device": device, "source": "test", "records": records}


def test_ratios_are_within_a_run_and_missing_rows_show_a_dash():
    found = {"h100": table()}
    assert results.report_pct_of_copy(found["h100"], "forward", "float32", "selu_naive") == pytest.approx(20.0)
    assert results.report_pct_of_copy(found["h100"], "forward", "float32", "selu_vectorized") == pytest.approx(99.0)
    assert results.report_pct_of_copy(found["h100"], "forward", "float16", "selu_vectorized") is None
    text = str(results.report_table(found, dtypes=(torch.float32, torch.float16)))
    assert "| vectorized, launch tuned on this GPU | 99.0 | — |" in text
    assert "| naive (float32 only) | 20.0 | — |" in text
    assert "| operator: forward + backward under autograd | 95.0 | — |" in text
    assert "torch.compile" not in text and "backward kernel" not in text  # not measured: no row


def _readme_table() -> tuple[str, int, int]:
    readme = README.read_text()
    start = readme.index(TABLE_START) + len(TABLE_START)
    return readme, start, readme.index(TABLE_END, start)


def test_the_readme_shows_the_committed_report():
    expected = str(results.report_table(results.committed_report_tables())).rstrip("\n") + "\n"
    readme, start, end = _readme_table()
    if os.environ.get("UPDATE_README") == "1":
        README.write_text(readme[:start] + expected + readme[end:])
        readme, start, end = _readme_table()
    assert readme[start:end] == expected, ("the README's report table is not the committed records' table; rewrite "
                                           "it with UPDATE_README=1 pytest tests/test_course_report.py -k readme")
    assert "(results/h100/figures/06_report.png)" in readme
    assert (env.REPO_ROOT / "results" / "h100" / "figures" / "06_report.png").exists()
    assert re.search(r"\| H100 float32 \|", readme[start:end])
