"""helpers.every_gpu (notebook 03b) and its exercises, on records made up for the purpose."""
from __future__ import annotations

import pytest
import torch

from helpers import check, demos, env, every_gpu, exercises, results, tuning


def tuning_record(copy_ms=1.0, times=None, config=(128, 2, 0)):
    times = times or {",".join(map(str, c)): 1.1 for c in tuning.candidates()}
    times[",".join(map(str, config))] = 1.02
    threads, vectors, _ = config
    return {"dtype": "bfloat16", "numel": env.REFERENCE_NUMEL, "copy_ms": copy_ms, "config": list(config),
            "label": f"{threads} threads × {vectors} vectors, one-shot", "times_ms": times}


def test_tuning_table_reads_the_choice_and_the_default_launch():
    table = {"device": "NVIDIA H200", "bfloat16": tuning_record(config=(256, 4, 0))}
    text = str(every_gpu.tuning_table({"h200": table}))
    row = next(line for line in text.splitlines() if line.startswith("| H200"))
    assert "| bfloat16 | 256 threads × 4 vectors, one-shot | 98.0% |" in row  # chosen: 1.0 / 1.02
    assert row.endswith("| 90.9% |")  # the default, 128 threads × 2 vectors: 1.0 / 1.1
    assert "default launch (128 threads × 2 vectors, one-shot)" in text


def test_misaligned_goals_take_the_worse_of_the_two_views():
    rows = [{"dtype": "float32", "numel": 10, "variant": name, "median_ms": ms} for name, ms in (
        ("aligned x[:n]", 2.0), ("x[1:n+1] (fresh out)", 2.3), ("x[1:n+1] into y[1:n+1]", 2.1),
        ("torch.selu aligned", 2.0), ("torch.selu x[1:n+1]", 2.4))]
    (text, value, ok), = every_gpu.misaligned_goals({"h100": {"device": "H100", "rows": rows}})
    assert text.startswith("H100 float32") and value == "1.150×" and not ok


def test_issue_bound_arithmetic():
    table = {"device": "H200", "numel": 2**24, "per_element": {"bfloat16": {"torch.selu": 45.0}}}
    text = str(every_gpu.issue_bound_table({"nowhere": table}))
    expected_ms = env.REFERENCE_NUMEL * 45.0 / 32 / (132 * 4 * 1.98e9) * 1e3
    assert f"{expected_ms:.2f} ms" in text


def test_issue_bound_table_reads_how_busy_the_fp64_units_were():
    table = {"device": "H200", "numel": 2**24, "per_element": {"float64": {"selu_vectorized": 86.1}},
             "fp64_pipe_busy_pct": {"torch.selu": 38.2, "selu_vectorized": 36.9}}
    text = str(every_gpu.issue_bound_table({"h200": table}))
    assert "fp64 units busy" in text and "H200 torch.selu 38%, selu_vectorized 37%" in text
    older = {key: value for key, value in table.items() if key != "fp64_pipe_busy_pct"}  # a table from before
    assert "fp64 units busy" not in str(every_gpu.issue_bound_table({"h200": older}))


def test_misaligned_issue_lines_set_the_count_beside_the_time():
    instructions = {"h200": {"per_element": {"bfloat16": {"selu_vectorized": 20.0, every_gpu.MISALIGNED_KERNEL: 22.0},
                                             "float32": {"selu_vectorized": 45.0}}}}
    rows = [{"dtype": "bfloat16", "variant": "aligned x[:n]", "median_ms": 1.5},
            {"dtype": "bfloat16", "variant": "x[1:n+1] (fresh out)", "median_ms": 1.62},
            {"dtype": "float16", "variant": "aligned x[:n]", "median_ms": 1.5}]
    text = every_gpu.misaligned_issue_lines(instructions, {"h200": {"rows": rows}})
    assert text == ("H200 bfloat16: x[1:] into a fresh result issues 22.0 instructions per element against the "
                    "aligned loop's 20.0 (1.100×), and takes 1.080× the aligned time")
    assert "no count" in every_gpu.misaligned_issue_lines({}, {"h200": {"rows": rows}})


def test_ncu_csv_gives_counts_per_element_and_how_busy_the_fp64_units_were():
    def row(i, kernel, metric, value):
        return f'"{i}","{kernel}","{metric}","{value}"'
    vectorized = "void selu_course::selu_vectorized_kernel<double, 4, 0, 1>(const T1 *, T1 *, long)"
    eager = "void at::vectorized_elementwise_kernel<2, at::elu_kernel(double)>"
    text = "\n".join(["==PROF== Disconnected", '"ID","Kernel Name","Metric Name","Metric Value"',
                      row(1, eager, every_gpu.INSTRUCTIONS_METRIC, "40,108,032"),
                      row(1, eager, every_gpu.FP64_PIPE_METRIC, "38.21"),
                      row(2, vectorized, every_gpu.INSTRUCTIONS_METRIC, "45,154,304"),
                      row(2, vectorized, every_gpu.FP64_PIPE_METRIC, "36.9"),
                      row(3, "void at::distribution_kernel<float>", every_gpu.INSTRUCTIONS_METRIC, "1")])
    found = every_gpu.read_ncu_csv(text, ("float64",))
    assert found["per_element"] == {"float64": {"torch.selu": 76.5, "selu_vectorized": 86.1}}
    realigned = "void selu_course::<unnamed>::selu_vectorized_kernel<c10::BFloat16, 8, 0, 0>(const T1 *, T1 *, long)"
    aligned = realigned.replace("8, 0, 0>", "8, 0, 1>")
    halves = "\n".join(['"ID","Kernel Name","Metric Name","Metric Value"',
                        row(1, aligned, every_gpu.INSTRUCTIONS_METRIC, "11,149,312"),
                        row(2, realigned, every_gpu.INSTRUCTIONS_METRIC, "12,009,505")])
    assert every_gpu.read_ncu_csv(halves, ("bfloat16",))["per_element"] == {
        "bfloat16": {"selu_vectorized": 21.3, every_gpu.MISALIGNED_KERNEL: 22.9}}
    assert found["fp64_pipe_busy_pct"] == {"torch.selu": 38.2, "selu_vectorized": 36.9}
    assert every_gpu.read_ncu_csv("==ERROR== no kernels were profiled", ("float64",)) is None


def test_ptx_counts_show_the_economical_path_is_cheaper():
    pytest.importorskip("torch")
    if env.nvcc_path() is None:
        pytest.skip("needs nvcc")
    text = str(every_gpu.ptx_per_element())
    per_element = {line.split("|")[1].strip(): float(line.split("|")[2]) for line in text.splitlines()
                   if line.startswith("| expm1f") or line.startswith("| economical")}
    expm1f, economical = per_element["expm1f (what torch runs)"], per_element["economical (selu_math.cuh)"]
    assert economical < 0.7 * expm1f, per_element


def test_committed_gpus_show_without_a_gpu():
    text = str(every_gpu.two_gpus_table())
    assert "H100 (committed H100 run)" in text or "this run" in text


def test_head_exercise():
    assert exercises.check_head_answer(None).status == "open"
    assert exercises.check_head_answer(5, torch.bfloat16, 3).right  # 6 bytes in: 5 more elements reach 16
    assert exercises.check_head_answer(1, torch.float32, 3).right
    assert not exercises.check_head_answer(3, torch.bfloat16, 3).right


def test_instruction_budget_exercise():
    numel = env.REFERENCE_NUMEL
    exact = 1.5 * 1e-3 * 132 * 4 * 1.98e9 * 32 / numel
    assert exercises.check_instruction_budget_answer(exact * 1.01, 1.5, numel).right
    assert not exercises.check_instruction_budget_answer(exact / 32, 1.5, numel).right
    assert exercises.check_instruction_budget_answer(None, 1.5, numel).status == "open"


# ----------------------------------------------------------------------------- the polynomial, in Python


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_python_polynomial_is_the_kernels_bit_for_bit(dtype):
    # kernels/selu_math.cuh's economical path (the CPU kernel) against its float32 emulation,
    # on every 16-bit input: the emulation rounds each operation as the kernel's does.
    from helpers import build, ops

    build.load("selu_vectorized", backend="cpu")
    x = check.every_16_bit_value(dtype, "cpu")
    match = check.agreement(every_gpu.selu_economical(x.float()).to(dtype), ops.selu_vectorized(x))
    assert match.identical == x.numel(), str(match)  # NaN in, NaN out: a NaN's payload is the converter's


def test_fmaf_rounds_once():
    # a * b + c = 1 + 2^-23 - 2^-24 + 2^-60 = 1 + 2^-24 + 2^-60, just past the float32 midpoint
    # 1 + 2^-24. Rounded to float64 first it is the midpoint itself, which then rounds to
    # even, 1.0: two roundings. The fused multiply-add rounds once, up to 1 + 2^-23.
    a = torch.tensor([-(1 + 2**-18)], dtype=torch.float32)
    b = torch.tensor([2**-24 * (1 - 2**-18)], dtype=torch.float32)
    c = 1 + 2**-23
    assert (a.double() * b.double() + c).float().item() == 1.0  # rounding twice
    assert every_gpu.fmaf(a, b, c).item() == 1 + 2**-23
    assert every_gpu.fmaf(torch.tensor([3.0]), 2.0, -6.0).item() == 0.0


def test_a_shorter_polynomial_shows_in_fp16_first():
    assert every_gpu.polynomial_mismatches(7) == {"float16": 0, "bfloat16": 0}
    five = every_gpu.polynomial_mismatches(5)
    assert five["float16"] > 0 and five["bfloat16"] == 0  # fp16 keeps 3 more bits of the error
    right = {"float16": "differs", "bfloat16": "matches"}
    assert exercises.check_polynomial_answer(None).status == "open"
    assert exercises.check_polynomial_answer(right).right
    assert exercises.check_polynomial_answer({"float16": "matches", "bfloat16": "differs"}).status == "wrong"
    assert exercises.check_polynomial_answer("float16").status == "wrong"  # not a dict: said, not raised


def test_littles_law_uses_the_measured_latency_and_says_where_it_assumes(monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)  # the committed runs of both GPUs
    lines = every_gpu.littles_law().splitlines()
    for slug, line in zip(("h100", "h200"), lines):
        table = results.load_table(demos.LATENCY_FILE, slug)
        if table:
            assert f"{table['latency_ns']:.0f} ns of latency measured" in line, line
        else:
            assert "assumed 0.5–1.0 µs" in line and "none measured" in line, line


def test_littles_law_takes_this_runs_latency_for_this_gpu(monkeypatch, tmp_path):
    # On a GPU, notebook 02 (or 03) saved this run's measurement: it wins over the committed one.
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(every_gpu, "_here", lambda: "h100")
    monkeypatch.setattr(every_gpu, "_records", lambda slug: results.load_reference(slug))
    results.save_table({"device": "NVIDIA H100 80GB HBM3", "latency_ns": 123.0}, demos.LATENCY_FILE, "h100")
    assert "the 123 ns of latency measured" in every_gpu.littles_law().splitlines()[0]


def test_this_gpu_without_notebook_03_here_reads_its_committed_records(monkeypatch, tmp_path):
    # Notebook 03b run on its own on an H100: this run holds none of notebook 03's records,
    # so every record-based section takes the H100's committed ones, and says so.
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(every_gpu, "_here", lambda: "h100")
    label = "committed H100 run; notebook 03 has not run here yet"
    assert f"H100 ({label})" in str(every_gpu.two_gpus_table())
    assert [f"H100, {label}" in str(r) for r in every_gpu.goal_reports()] == [True, False]
    curve = every_gpu.curve_verdicts().splitlines()[0]
    assert curve.startswith(f"H100 ({label})") and "no selu_vectorized and torch_eager records" not in curve
    # Once notebook 03 has run here, its records are this run's.
    results.save(results.load_reference("h100"), "h100")
    assert "H100 (this run)" in str(every_gpu.two_gpus_table())
    assert every_gpu.curve_verdicts().startswith("H100 (this run)")
