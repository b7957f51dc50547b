"""helpers.check.agreement and helpers.check.outcome: comparing two implementations, and
saying in one line what a function does with an input (an error, or a right or wrong result)."""
import pytest
import torch

from helpers.check import DTYPES, Agreement, agreement, make_input, outcome, special_values


def next_float(x: torch.Tensor) -> torch.Tensor:
    """Each element moved one ulp away from zero (for finite, non-zero x)."""
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[x.dtype]
    return (x.view(bits) + 1).view(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_agreement_of_identical_tensors_with_nan(dtype):
    x = torch.cat([special_values(dtype, "cpu"), make_input("normal", (1000,), dtype, "cpu")])
    y = torch.selu(x)
    match = agreement(y, y.clone())
    assert match == Agreement(numel=x.numel(), identical=x.numel(), max_ulp=0, nan_match=True)
    assert match.within(0) and match.identical_pct == 100.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_agreement_counts_ulps_and_identical_elements(dtype):
    x = make_input("normal", (1000,), dtype, "cpu", torch.Generator().manual_seed(0))
    x = x[x != 0]
    y = x.clone()
    y[:10] = next_float(x[:10])
    match = agreement(y, x, chunk=64)  # several chunks
    assert (match.numel, match.identical, match.max_ulp, match.nan_match) == (x.numel(), x.numel() - 10, 1, True)
    assert match.within(1) and not match.within(0)


def test_agreement_sees_a_lost_sign_of_zero_and_misplaced_nan():
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert agreement(torch.tensor([-0.0, 1.0, float("nan")]), a).max_ulp == 1
    wrong_nan = agreement(torch.tensor([0.0, float("nan"), 2.0]), a)
    assert not wrong_nan.nan_match and not wrong_nan.within(10**9)
    assert "DIFFERENT" in str(wrong_nan)


def test_agreement_of_non_contiguous_and_empty_tensors():
    x = torch.randn(6, 5).t()
    assert agreement(x, x.contiguous()).identical == 30
    assert agreement(torch.empty(0), torch.empty(0)) == Agreement(0, 0, 0, True)


def test_agreement_rejects_mismatched_or_non_float_tensors():
    with pytest.raises(ValueError, match="one shape and dtype"):
        agreement(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="one shape and dtype"):
        agreement(torch.zeros(3), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        agreement(torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))


def test_outcome_of_an_error_is_its_first_line():
    first_line = "selu: expected a float32, float64, float16 or bfloat16 tensor, got Int."

    def raises(x):
        raise RuntimeError(first_line + "\nException raised from ...")

    assert outcome(raises, torch.ones(3)) == "error: RuntimeError: " + first_line


def test_outcome_of_right_and_wrong_results():
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    assert outcome(torch.selu, x) == "correct result: identical to torch.selu"
    off = outcome(lambda t: next_float(torch.selu(t)), x)
    assert off.startswith("correct result: within 1 ulp of torch.selu")
    assert outcome(lambda t: next_float(torch.selu(t)), x, max_ulp=0).startswith("WRONG result against torch.selu")
    assert outcome(lambda t: 1.0507 * t, x).startswith("WRONG result")  # the negative branch forgotten


def test_outcome_of_wrong_shapes_empty_tensors_and_non_tensors():
    x = torch.randn(4, 3)
    flattened = "WRONG: returned shape (12,), expected (4, 3) (as torch.selu gives)"
    assert outcome(lambda t: torch.selu(t).reshape(-1), x) == flattened
    assert outcome(lambda t: torch.selu(t).double(), x).startswith("WRONG: returned dtype torch.float64, expected")
    empty = "correct result: an empty tensor of shape (0, 3), as torch.selu gives"
    assert outcome(torch.selu, torch.empty(0, 3)) == empty
    assert outcome(lambda t: None, x) == "WRONG: returned NoneType, not a tensor"
    # outputs start as NaN, so an output never written is wrong, whatever the memory held before
    assert outcome(torch.empty_like, x).startswith("WRONG result against torch.selu")


def test_outcome_when_only_the_reference_raises():
    x = torch.arange(4, dtype=torch.int32)
    said = outcome(lambda t: t * 2, x)
    assert said.startswith("a result, but torch.selu raises") and "Int" in said
