"""Notebook 04's helpers (helpers/backward.py) on the CPU: every table they show says what
was measured, and says it right; the goal report and the exercise checks decide correctly."""
from __future__ import annotations

import pytest
import torch

from helpers import backward, build, check, exercises, ops


@pytest.fixture(scope="module", autouse=True)
def registered():
    for kernel in ("selu_vectorized", "selu_backward"):
        build.load(kernel, backend="cpu")
    ops.enable_backward()
    yield
    ops.disable_backward()


def rows(markdown) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in str(markdown).splitlines()
            if line.startswith("|") and not line.startswith("|--") and not line.startswith("|:")][1:]


def test_derivative_two_ways_errors():
    _, errors = backward.derivative_two_ways(device="cpu")
    assert errors["from the input x"]["max_ulp"] <= check.BACKWARD_MAX_ULP[torch.float32]
    assert errors["from the output y"]["max_ulp_from_-1"] <= check.BACKWARD_MAX_ULP[torch.float32]
    assert errors["from the output y"]["max_ulp"] > 1000  # the cancellation for x << 0 is real


def test_jump_at_zero_takes_lambda_alpha_at_both_zeros():
    table = {row[0]: row[1:] for row in rows(backward.jump_at_zero("cpu"))}
    for zero in ("−0.0", "+0.0"):
        assert set(table[zero]) == {f"{backward.LAMBDA_ALPHA:.7f}"}
    assert set(table["+1e-30"]) == {f"{backward.LAMBDA:.7f}"}


def test_gradcheck_across_zero_fails_only_across_zero():
    text = str(backward.gradcheck_across_zero())
    verdicts = [row[-1] for row in rows(text)]
    assert verdicts == ["agree", "DISAGREE", "DISAGREE", "DISAGREE", "agree"]
    assert "on these five points: fails" in text and "|x| > 1e-3: passed" in text


def test_correctness_tables_pass_everywhere():
    table = rows(backward.correctness_table("cpu", numel=1 << 14, seed=1))
    assert len(table) == 2 * len(check.DTYPES)
    assert all(row[3] == "yes" for row in table), table
    exhaustive = rows(backward.exhaustive_16_bit("cpu"))
    assert len(exhaustive) == 4 and all(row[3] == "yes" for row in exhaustive), exhaustive


def test_nan_inputs_table_shows_the_difference_with_torch():
    for row in rows(backward.nan_inputs("cpu")):
        assert row[1] != "nan" and row[3] == row[4] == "nan"


def test_autograd_checks_all_pass():
    table = rows(backward.autograd_checks("cpu"))
    assert len(table) == 9 and all(row[1].startswith("passed") for row in table), table


def test_leaf_errors_side_by_side():
    table = {row[0]: row[1] for row in rows(backward.leaf_errors("cpu"))}
    assert "leaf Variable" in table["torch.selu_(leaf)"] and "leaf Variable" in table["ops.selu_vectorized_(leaf)"]
    assert table["ops.selu_vectorized_(leaf * 2)"] == "no error"


def test_training_run_is_reproducible_and_learns():
    run = backward.training_run(steps=25, device="cpu")
    again = backward.train(backward.CourseSELU, 25, "cpu", seed=0)
    losses = run["runs"]["CourseSELU (selu_course operators)"]["losses"]
    assert torch.equal(losses, again["losses"])  # one seed, one device: the same run
    assert losses[-5:].mean() < losses[:5].mean()  # and it learns
    assert run["max_relative_difference"] < 0.05  # torch's and ours follow one curve
    assert "steps on" in backward.training_summary(run)


def record(variant, op, ms, dtype="float32", run="r"):
    reads, writes = {"backward": (2, 1), "step": (3, 2)}[op]
    return {"variant": variant, "op": op, "dtype": dtype, "numel": 1000, "bytes": 1000 * 4 * (reads + writes),
            "median_ms": ms, "run": run, "config": None}


def test_goal_report_decides_each_goal():
    memory = {"rows": [{"variant": "torch.selu_", "peak_bytes": 5e9},
                       {"variant": "selu_course::selu_vectorized_", "peak_bytes": 5e9}]}
    hit = [record("copy", "backward", 1.0), record("torch_eager", "backward", 1.0),
           record("selu_backward", "backward", 1.005), record("copy", "backward", 1.0, "bfloat16"),
           record("torch_eager", "backward", 1.3, "bfloat16"), record("selu_backward", "backward", 1.0, "bfloat16")]
    text = str(backward.goal_report(hit, memory))
    assert text.count("HIT") == 4 and "MISS" not in text
    miss = [{**r, "median_ms": 1.2} if r["variant"] == "selu_backward" else r for r in hit]
    assert str(backward.goal_report(miss)).count("MISS") == 3


def test_speed_table_ratios_within_a_run():
    table = rows(backward.speed_table([record("copy", "backward", 1.0), record("torch_eager", "backward", 2.0),
                                       record("selu_backward", "backward", 1.0)]))
    ours = next(row for row in table if row[2] == "selu_backward")
    assert ours[6] == "100.0%" and ours[7] == "0.500×"


def test_backward_exercise_check():
    def right(grad, x):
        return torch.where(x > 0, grad * backward.LAMBDA, grad * backward.LAMBDA_ALPHA * torch.exp(x))

    def missing_alpha(grad, x):
        return torch.where(x > 0, grad * backward.LAMBDA, grad * backward.LAMBDA * torch.exp(x))

    assert exercises.check_backward_answer(None).status == "open"
    assert exercises.check_backward_answer(right, device="cpu").right
    assert exercises.check_backward_answer(missing_alpha, device="cpu").status == "wrong"


def test_peak_tensors_exercise_check():
    memory = {"tensor_bytes": 100, "rows": [{"variant": "selu_course::selu_vectorized_", "peak_bytes": 502}]}
    assert exercises.check_peak_tensors_answer(5, memory).right
    assert exercises.check_peak_tensors_answer(6, memory).status == "wrong"
    assert exercises.check_peak_tensors_answer(None, memory).status == "open"
