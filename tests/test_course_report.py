"""helpers/course_report.py: the report of notebook 06 reads its records right.

* The default launch it times is the one kernels/selu_vectorized.cu starts from.
* Every ratio is taken against the copy of the record's own run, and a missing row
  shows as a dash, not as a number.
* The figure plots what the table says, and the verdicts name the fastest row.
* On the CPU, :func:`measure` and :func:`measure_curves` run every stage and peer
  (small sizes, one run).
* The curves add the report's point at the problem size, are saved only where they
  were measured, and their verdicts take the worst size within one run.
"""
from __future__ import annotations

import json

import pytest
import torch

from helpers import build, course_report


def record(variant, op, dtype, run, gbps):
    """A record of 1e9 bytes moved at ``gbps``."""
    return {"variant": variant, "op": op, "dtype": dtype, "run": run, "gbps": gbps, "numel": 8, "bytes": 10**9,
            "median_ms": 1e3 / gbps, "config": None}


def table(device="a GPU"):
    records = [record("copy", "forward", "float32", "r1", 100.0), record("selu_vectorized", "forward", "float32", "r1", 99.0),
               record("torch_eager", "forward", "float32", "r1", 98.0),
               # another run's copy must not be the yardstick of run r1's records
               record("copy", "forward", "float32", "r2", 50.0), record("selu_naive", "forward", "float32", "r2", 10.0),
               record("copy", "backward", "float32", "r3", 100.0), record("selu_backward", "backward", "float32", "r3", 97.0),
               record("torch_eager", "backward", "float32", "r3", 90.0),
               record("copy", "step", "float32", "r4", 100.0), record("selu_course_autograd", "step", "float32", "r4", 95.0),
               record("torch_autograd", "step", "float32", "r4", 80.0)]
    return {"device": device, "source": "test", "records": records}


def test_ratios_are_within_a_run_and_missing_rows_show_a_dash():
    found = {"h100": table()}
    assert course_report.pct_of_copy(found["h100"], "forward", "float32", "selu_naive") == pytest.approx(20.0)
    assert course_report.pct_of_copy(found["h100"], "forward", "float32", "selu_vectorized") == pytest.approx(99.0)
    assert course_report.pct_of_copy(found["h100"], "forward", "float16", "selu_vectorized") is None
    text = str(course_report.summary_table(found, dtypes=(torch.float32, torch.float16)))
    assert "| vectorized, launch tuned on this GPU | 99.0 | — |" in text
    assert "| naive (float32 only) | 20.0 | — |" in text
    assert "| operator: forward + backward under autograd | 95.0 | — |" in text
    assert "torch.compile" not in text  # not measured: no row


def test_figure_and_verdicts_say_what_the_table_says(tmp_path, monkeypatch):
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    found = {"h100": table("GPU one"), "h200": table("GPU two")}
    course_report.roofline_figure(found, dtypes=(torch.float32,))
    data = json.loads((tmp_path / "figures" / "06_report.json").read_text())
    bars = {(b["device"], b["variant"]): b["pct_of_copy"] for b in data["panels"][0]["bars"]}
    assert bars[("h200", "selu_vectorized")] == pytest.approx(99.0)
    assert bars[("h100", "torch_compile")] is None
    lines = str(course_report.verdicts(found, dtypes=(torch.float32,))).splitlines()
    assert lines[0] == ("- H100 float32: forward, the tuned kernel at 99.0% of the copy, the fastest row vectorized, "
                        "launch tuned on this GPU (99.0%); backward 97.0% (torch 90.0%); step 95.0% (torch 80.0%)")
    partial = {"h100": {**table(), "records": [r for r in table()["records"] if r["op"] == "forward"]}}
    assert "backward not measured (torch not measured)" in str(course_report.verdicts(partial, dtypes=(torch.float32,)))


def test_committed_memory_table_is_shown():
    assert "| H100 | torch.selu |" in str(course_report.memory_table())


def curve_table(source):
    """Our kernel at two sizes, each in a run of its own with torch eager and the copy."""
    records = []
    for numel, ours, eager in ((2**12, 5.0, 10.0), (2**20, 90.0, 100.0)):
        for variant, gbps in (("copy", 100.0), ("selu_vectorized", ours), ("torch_eager", eager)):
            records.append(record(variant, "forward", "float32", f"n{numel}", gbps) | {"numel": numel})
    return {"device": "a GPU", "device_slug": "h100", "source": source, "records": records}


def test_curves_add_the_report_point_and_save_only_what_was_measured_here(tmp_path, monkeypatch):
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(course_report.env, "can_build_cuda", lambda: True)
    monkeypatch.setattr(course_report, "measure_curves", lambda: curve_table("x"))
    report = {"h100": {"records": [record("selu_vectorized", "forward", "float32", "big", 99.0) | {"numel": 2**30}]}}
    found = course_report.curves(report, slugs=("h100",))
    assert found["h100"]["source"] == "measured in this run"
    assert [r["numel"] for r in found["h100"]["records"]][-1] == 2**30  # the report's point, appended
    assert json.loads((tmp_path / "h100" / "06_curves.json").read_text())["records"][0]["numel"] == 2**12
    course_report.curves_figures(found, dtypes=(torch.float32,))
    data = json.loads((tmp_path / "h100" / "figures" / "06_curves.json").read_text())
    series = data["panels"][0]["series"]
    assert series["selu_vectorized"]["numel"] == [2**12, 2**20, 2**30]
    committed = {"h200": curve_table("committed")}
    course_report.curves_figures(committed, dtypes=(torch.float32,))
    assert not (tmp_path / "h200").exists()  # a committed table is drawn, never re-saved


def test_curve_verdicts_take_the_worst_size_from_the_goal_up():
    found = {"h100": curve_table("test")}
    text = str(course_report.curve_verdicts(found, dtypes=(torch.float32,), smallest=2**12))
    assert "- H100 float32: forward 0.50× at 2^12" in text
    text = str(course_report.curve_verdicts(found, dtypes=(torch.float32,), smallest=2**16))
    assert "- H100 float32: forward 0.90× at 2^20" in text  # 2^12 is below the goal's range


def test_measure_curves_runs_every_stage_on_the_cpu():
    for kernel in ("selu_naive", "selu_vectorized", "selu_backward"):
        build.load(kernel, backend="cpu")
    measured = course_report.measure_curves(dtypes=(torch.float32,), sizes=(2**8, 2**10), device="cpu")
    variants = {(r["op"], r["variant"], r["numel"]) for r in measured["records"]}
    for op, labels in course_report.LABELS.items():
        for variant in labels:
            if variant not in ("triton", "selu_triton", "selu_triton_backward", "torch_compile"):
                assert {(op, variant, 2**8), (op, variant, 2**10)} <= variants, (op, variant)


def test_measure_runs_every_stage_on_the_cpu(monkeypatch):
    monkeypatch.setenv("CI", "true")  # small sizes
    for kernel in ("selu_naive", "selu_vectorized", "selu_backward"):
        build.load(kernel, backend="cpu")
    measured = course_report.measure(dtypes=(torch.float32,), device="cpu", repeats=1)
    variants = {(r["op"], r["variant"]) for r in measured["records"]}
    for op, labels in course_report.LABELS.items():
        for variant in labels:
            if variant not in ("triton", "selu_triton", "selu_triton_backward", "torch_compile"):
                assert (op, variant) in variants, (op, variant)


def test_the_readme_shows_the_committed_report():
    readme = (course_report.env.REPO_ROOT / "README.md").read_text()
    assert str(course_report.summary_table(course_report.committed_tables())) in readme
    assert "(results/figures/06_report.png)" in readme
    assert (course_report.env.REPO_ROOT / "results" / "figures" / "06_report.png").exists()


def test_measure_leaves_the_rule_and_entry_it_found(monkeypatch):
    from helpers import ops

    monkeypatch.setenv("CI", "true")
    for kernel in ("selu_naive", "selu_vectorized", "selu_backward"):
        build.load(kernel, backend="cpu")
    before = ops.autograd_rule("selu_vectorized"), ops.uses_cpp_entry()
    course_report.measure(dtypes=(torch.float16,), device="cpu", repeats=1)
    assert (ops.autograd_rule("selu_vectorized"), ops.uses_cpp_entry()) == before
