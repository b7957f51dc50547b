"""helpers.exercises: each check says "not answered yet" to None, accepts a right answer
and rejects a wrong one with a reason, without raising."""
import pytest
import torch

from helpers import bench, check, env, exercises


def _copy_record(numel=2**20, gbps=3000.0):
    return {"variant": bench.COPY, "numel": numel, "gbps": gbps, "dtype": "float32", "op": "forward"}


def test_roofline_answer():
    records = [_copy_record()]
    expected = bench.roofline_ms(2**20, "bfloat16", 3000.0)
    assert exercises.check_roofline_answer(None, records).status == "open"
    assert exercises.check_roofline_answer(expected * 1.01, records).right
    wrong = exercises.check_roofline_answer(2 * expected, records)  # float32 bytes
    assert wrong.status == "wrong" and "half of the float32 bytes" in str(wrong)


def test_selu_answer_accepts_the_formula_and_rejects_cheats():
    def formula(x):
        return torch.where(x > 0, check.SELU_SCALE * x, check.SELU_SCALE * check.SELU_ALPHA * torch.expm1(x))

    def exp_minus_one(x):
        return torch.where(x > 0, check.SELU_SCALE * x, check.SELU_SCALE * check.SELU_ALPHA * (torch.exp(x) - 1))

    assert exercises.check_selu_answer(None).status == "open"
    assert exercises.check_selu_answer(formula, device="cpu").right
    assert exercises.check_selu_answer(exp_minus_one, device="cpu").status == "wrong"
    calls_builtin = exercises.check_selu_answer(torch.selu, device="cpu")
    assert calls_builtin.status == "wrong" and "torch.selu" in str(calls_builtin)


def test_vectors_per_thread_answer():
    def rec(vectors, ms):
        return {"variant": "selu_vectorized", "dtype": "float32", "median_ms": ms, "run": "r", "op": "forward",
                "numel": 1, "bytes": 8, "config": bench.launch_config(256, vectors, 0)}

    records = [rec(1, 1.00), rec(2, 1.003), rec(4, 1.2)]
    assert exercises.check_vectors_per_thread_answer(None, records).status == "open"
    assert exercises.check_vectors_per_thread_answer(1, records).right
    assert exercises.check_vectors_per_thread_answer(2, records).status == "wrong"  # no spread recorded: no tie
    # With the timer's spread: 2 vectors' band [0.995, 1.01] overlaps the fastest's [0.99, 1.005].
    spread = [{**r, "q20_ms": r["median_ms"] - 0.008, "q80_ms": r["median_ms"] + 0.005} for r in records]
    tie = exercises.check_vectors_per_thread_answer(2, spread)
    assert tie.right and "a tie" in tie.message
    assert exercises.check_vectors_per_thread_answer(4, spread).status == "wrong"


def test_read_only_answer():
    assert exercises.check_read_only_answer(None).status == "open"
    assert exercises.check_read_only_answer(exercises.READ_ONLY_ANSWER).right
    wrong = [k for k in exercises.READ_ONLY_CHOICES if k != exercises.READ_ONLY_ANSWER]
    assert all(exercises.check_read_only_answer(k).status == "wrong" for k in wrong + ["z", ["b"], 2])


def test_launch_for_size_answer():
    assert exercises.check_launch_for_size_answer(None, 2**20, (256, 4, 0)).status == "open"
    right = exercises.check_launch_for_size_answer((128, 1), 2**20, (256, 4, 0))
    assert right.right and "2,048 blocks" in right.message
    assert exercises.check_launch_for_size_answer((256, 4), 2**20, (256, 4, 0)).status == "wrong"
    assert "not a pair" in exercises.check_launch_for_size_answer(128, 2**20, (256, 4, 0)).message


def test_the_findings_exercise_is_checked_against_the_harness():
    from helpers import build, evaluate

    build.load("selu_vectorized", backend="cpu")
    assert exercises.check_findings_answer(None, "cpu").status == "open"
    right = {"exp_minus_one": evaluate.WRONG_VALUES, "in_float64": evaluate.WRONG_METADATA,
             "all_but_the_last": evaluate.WRONG_VALUES}
    assert exercises.check_findings_answer(right, "cpu").right
    wrong = exercises.check_findings_answer({**right, "exp_minus_one": "passes"}, "cpu")
    assert wrong.status == "wrong" and "exp_minus_one: the harness says 'wrong values'" in wrong.message
    assert exercises.check_findings_answer({"exp_minus_one": "passes"}, "cpu").status == "wrong"


# ----------------------------------------------------------------------------- notebook 02


def relu_cuda_source() -> str:
    """Notebook 02's RELU_CUDA, read from the notebook."""
    import json

    cells = json.loads((env.REPO_ROOT / "notebooks" / "02_first_cuda_kernel.ipynb").read_text())["cells"]
    namespace: dict = {}
    exec(next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("RELU_CUDA")), namespace)
    return namespace["RELU_CUDA"]


@pytest.mark.skipif(env.nvcc_path() is None, reason="needs nvcc")
def test_int32_index_check_reads_the_ptx():
    source = relu_cuda_source()
    (line,) = [line for line in source.splitlines() if "blockIdx.x" in line]
    assert exercises.check_int32_index_answer(None).status == "open"
    assert exercises.check_int32_index_answer(source).status == "wrong"  # unchanged: still mul.wide.u32
    answer = exercises.check_int32_index_answer(source.replace(line, "  int i = blockIdx.x * blockDim.x + threadIdx.x;"))
    assert answer.right and "cvt.s64.s32" in answer.message


def test_relu_op_check_wants_a_fake_kernel():
    @torch.library.custom_op("exercise_test::relu", mutates_args=())
    def relu_op(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    assert exercises.check_relu_op_answer(None).status == "open"
    assert exercises.check_relu_op_answer(torch.relu).status == "wrong"
    assert "fake" in exercises.check_relu_op_answer(relu_op).message
    relu_op.register_fake(lambda x: torch.empty_like(x))
    assert exercises.check_relu_op_answer(relu_op).right


def test_naive_check_answer_is_checked_live():
    from helpers import build

    build.load("mistakes", backend="cpu")
    build.load("selu_naive", backend="cpu")
    everything_passes = dict.fromkeys(("mistake_missing_minus_one", "mistake_expf_minus_one", "selu_naive"), True)
    answer = exercises.check_naive_check_answer(everything_passes, device="cpu")
    assert answer.right and "selu_naive: naive check passes, the harness passes it" in answer.message
    assert "mistake_missing_minus_one: naive check passes, the harness fails it on" in answer.message
    assert exercises.check_naive_check_answer({**everything_passes, "selu_naive": False}, "cpu").status == "wrong"
    assert exercises.check_naive_check_answer({"selu_naive": True}, "cpu").status == "wrong"
