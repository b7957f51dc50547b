"""The correctness harness must pass a correct SELU and fail each kind of wrong one.

Every wrong SELU here is a mistake a first kernel makes; each test says which part of
the harness catches it, so that a harness too weak to catch it fails the test.
"""
import math

import pytest
import torch

from helpers.check import (
    DEFAULT_DISTRIBUTIONS,
    DTYPES,
    MAX_ULP,
    SELU_ALPHA,
    SELU_SCALE,
    assert_close_ulps,
    assert_selu,
    check_unary,
    harness_input,
    make_input,
    naive_rand_check,
    poisoned_outputs,
    relu_reference,
    selu_reference,
    special_values,
    ulp_distance,
)

CPU = torch.device("cpu")


def failing_groups(report):
    return {case.group for case in report.cases if not case.passed}


def group_max_ulp(report, group):
    return max(case.max_ulp or 0 for case in report.cases if case.group == group)


# ---- references --------------------------------------------------------------------
def test_selu_reference_values_sign_of_zero_and_nan():
    x = torch.tensor([1.0, -1.0, 0.0, -0.0, float("nan"), float("-inf")], dtype=torch.float64)
    y = selu_reference(x)
    assert y.dtype == torch.float64
    assert y[0].item() == SELU_SCALE
    assert y[1].item() == pytest.approx(SELU_SCALE * SELU_ALPHA * math.expm1(-1.0), rel=1e-15)
    assert y[2].item() == 0.0 and not y[2].signbit()
    assert y[3].item() == 0.0 and y[3].signbit()
    assert y[4].isnan()
    assert y[5].item() == -SELU_SCALE * SELU_ALPHA


def test_relu_reference_follows_torch_relu():
    x = torch.tensor([-0.0, 0.0, float("nan"), -2.0, 3.0], dtype=torch.float64)
    y = relu_reference(x)
    assert y[0].signbit() and not y[1].signbit()
    assert y[2].isnan()
    assert y[3:].tolist() == [0.0, 3.0]
    assert check_unary(torch.relu, relu_reference, device=CPU, trials=1).passed


# ---- a correct SELU passes -----------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_selu_passes_on_cpu(dtype):
    report = check_unary(torch.selu, dtype=dtype, device=CPU)
    report.assert_ok()
    assert report.worst.max_ulp <= MAX_ULP[dtype]
    assert report.first_failure() is None
    groups = {case.group for case in report.cases}
    assert groups == set(DEFAULT_DISTRIBUTIONS) | {"special", "views"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_selu_passes_on_cuda(dtype):
    report = check_unary(torch.selu, dtype=dtype, device="cuda")
    report.assert_ok()
    assert report.device.type == "cuda"


# ---- wrong SELUs fail ------------------------------------------------------------------
def lambda_x(x):
    return SELU_SCALE * x


def test_lambda_x_cheat_passes_the_naive_test_and_fails_the_check():
    assert naive_rand_check(lambda_x, device=CPU)
    report = check_unary(lambda_x, device=CPU)
    assert not report.passed
    # Every group has negative inputs, where λ·x is wrong.
    assert failing_groups(report) == set(DEFAULT_DISTRIBUTIONS) | {"special", "views"}
    with pytest.raises(AssertionError, match="FAILED"):
        report.assert_ok()


def test_missing_minus_one_fails():
    def selu_missing_minus_one(x):
        return torch.where(x > 0, SELU_SCALE * x, SELU_SCALE * SELU_ALPHA * torch.exp(x))

    report = check_unary(selu_missing_minus_one, device=CPU, trials=1)
    assert not report.passed
    assert {"normal", "tiny", "large_negative"} <= failing_groups(report)


def test_exp_minus_one_in_float32_fails_on_tiny_inputs():
    def selu_exp_minus_one(x):  # exp(x) - 1 in float32 cancels near 0: expm1 is needed
        return torch.where(x > 0, SELU_SCALE * x, SELU_SCALE * SELU_ALPHA * (torch.exp(x) - 1))

    report = check_unary(selu_exp_minus_one, device=CPU)
    assert not report.passed
    assert "tiny" in failing_groups(report)
    assert group_max_ulp(report, "tiny") > 1000
    assert any(name.startswith("tiny") for name in report.worst.failing)


@pytest.mark.parametrize("where", ["input", "output"])
def test_flushing_subnormals_to_zero_fails_on_special_values(where):
    tiny = torch.finfo(torch.float32).tiny

    def flush(t):  # t * 0 keeps the sign: only the magnitude is flushed, as FTZ does
        return torch.where(t.abs() < tiny, t * 0, t)

    def selu_ftz(x):
        return torch.selu(flush(x)) if where == "input" else flush(torch.selu(x))

    report = check_unary(selu_ftz, device=CPU, trials=1, distributions=("normal",))
    assert not report.passed
    assert "special" in failing_groups(report)
    x, got, expected = report.first_failure()
    bad_subnormal_inputs = (x != 0) & (x.abs() < tiny)
    assert bad_subnormal_inputs.any()


def test_nan_to_zero_fails_the_nan_pattern():
    def selu_nan_to_zero(x):
        y = torch.selu(x)
        return torch.where(torch.isnan(y), torch.zeros_like(y), y)

    report = check_unary(selu_nan_to_zero, device=CPU, trials=1)
    assert not report.passed
    assert not report.worst.nan_match
    assert "numbers where NaN was expected" in str(report)


def test_wrong_sign_of_zero_fails():
    def selu_plus_zero(x):  # adding +0.0 turns -0.0 into +0.0 and changes nothing else
        return torch.selu(x) + 0.0

    report = check_unary(selu_plus_zero, device=CPU, trials=1)
    assert not report.passed
    assert not report.worst.zero_sign
    x, got, expected = report.first_failure()
    assert x[0].item() == 0.0 and x[0].signbit()
    assert not got[0].signbit() and expected[0].signbit()


def test_unwritten_last_element_is_caught_by_the_poison():
    def selu_all_but_last(x):
        y = torch.empty_like(x)
        y.view(-1)[:-1] = torch.selu(x).reshape(-1)[:-1]
        return y

    report = check_unary(selu_all_but_last, device=CPU)
    assert not report.passed
    assert not report.worst.nan_match
    # every case whose last expected value is not NaN fails, and only there
    assert all(case.mismatches == 1 for case in report.cases)
    assert "unwritten" in str(report)


def test_output_never_written_fails():
    report = check_unary(lambda x: torch.empty_like(x), device=CPU, trials=1)
    assert not report.passed
    assert len(report.failing_cases()) == len(report.cases)


def deterministic_settings():
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )


def test_poisoned_outputs_fills_empty_with_nan_and_restores_settings():
    before = deterministic_settings()
    with pytest.raises(RuntimeError, match="inside"):
        with poisoned_outputs():
            assert torch.empty(1000).isnan().all()
            assert torch.empty_like(torch.zeros(3, 5, dtype=torch.float16)).isnan().all()
            raise RuntimeError("inside")
    assert deterministic_settings() == before


def test_poisoned_outputs_restores_settings_that_were_not_the_defaults():
    original = deterministic_settings()
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        with poisoned_outputs():
            assert deterministic_settings() == (True, True, True)
        assert deterministic_settings() == (True, False, False)
    finally:
        torch.use_deterministic_algorithms(original[0], warn_only=original[1])
        torch.utils.deterministic.fill_uninitialized_memory = original[2]


def test_wrong_shape_dtype_or_device_fails():
    def flattened_with_a_new_axis(x):
        return torch.selu(x).unsqueeze(0)

    def in_float64(x):
        return torch.selu(x.double())

    for fn, what in [(flattened_with_a_new_axis, "shape"), (in_float64, "dtype")]:
        report = check_unary(fn, device=CPU, trials=1)
        assert not report.passed
        assert len(report.failing_cases()) == len(report.cases)
        assert f"returned {what}" in report.cases[0].problem


def test_an_exception_is_a_failed_case_with_its_message():
    def raises(x):
        raise RuntimeError("selu_naive: expected a CUDA tensor")

    report = check_unary(raises, device=CPU, trials=1)
    assert not report.passed
    assert "raised RuntimeError: selu_naive: expected a CUDA tensor" in report.cases[0].problem
    assert "expected a CUDA tensor" in str(report)


def test_modifying_the_input_fails():
    report = check_unary(torch.selu_, device=CPU, trials=1)
    assert not report.passed
    assert "modified its input" in str(report)


def test_ignoring_the_storage_offset_fails_only_on_views():
    def selu_from_storage_start(x):  # a kernel that takes the storage's pointer, not the tensor's
        return torch.selu(torch.as_strided(x, x.shape, x.stride(), storage_offset=0))

    report = check_unary(selu_from_storage_start, device=CPU, trials=1)
    assert failing_groups(report) == {"views"}


# ---- ulp_distance ------------------------------------------------------------------------
def from_bits(bits, dtype):
    int_dtype = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
                 torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    return torch.tensor(bits, dtype=torch.int64).to(int_dtype).view(dtype)


def test_ulp_distance_of_neighbours_in_float32_and_float64():
    for dtype in (torch.float32, torch.float64):
        one = torch.tensor([1.0], dtype=dtype)
        next_up = torch.nextafter(one, torch.tensor([2.0], dtype=dtype))
        assert ulp_distance(one, next_up).tolist() == [1]
        assert ulp_distance(next_up, one).tolist() == [1]
        assert ulp_distance(one, one).tolist() == [0]
        assert ulp_distance(one, next_up).dtype == torch.int64


def test_ulp_distance_across_zero():
    smallest = torch.finfo(torch.float32).tiny * torch.finfo(torch.float32).eps
    a = torch.tensor([0.0, smallest, 1.0, -smallest])
    b = torch.tensor([-0.0, -smallest, -1.0, 0.0])
    # -0 and +0 are one ulp apart, so ±smallest subnormal are three apart
    assert ulp_distance(a, b).tolist() == [1, 3, 2 * 0x3F800000 + 1, 2]


def test_ulp_distance_in_half_types_from_bit_patterns():
    # float16: 1.0 is 0x3C00; 0x7BFF is max, 0x7C00 is inf; bfloat16: 1.0 is 0x3F80
    f16 = from_bits([0x3C00, 0x3C00, 0x7BFF, 0x0001], torch.float16)
    f16_b = from_bits([0x3C01, 0x3C02, 0x7C00, 0x0000], torch.float16)
    assert f16[0].item() == 1.0 and f16_b[0].item() == 1.0 + 2**-10
    assert ulp_distance(f16, f16_b).tolist() == [1, 2, 1, 1]
    bf16 = from_bits([0x3F80, 0x3F80], torch.bfloat16)
    bf16_b = from_bits([0x3F81, 0xBF80], torch.bfloat16)  # 1 + 2^-7, and -1.0
    assert bf16_b.float().tolist() == [1.0 + 2**-7, -1.0]
    assert ulp_distance(bf16, bf16_b).tolist() == [1, 2 * 0x3F80 + 1]


def test_ulp_distance_rounds_b_to_a_dtype_and_saturates_in_float64():
    a = torch.tensor([1.0])
    assert ulp_distance(a, torch.tensor([1.0 + 2**-30], dtype=torch.float64)).tolist() == [0]
    big = torch.tensor([torch.finfo(torch.float64).max], dtype=torch.float64)
    assert ulp_distance(big, -big).tolist() == [torch.iinfo(torch.int64).max]
    f32_max = torch.tensor([torch.finfo(torch.float32).max])
    assert ulp_distance(f32_max, -f32_max).tolist() == [2 * 0x7F7FFFFF + 1]


# ---- assert_close_ulps and assert_selu -----------------------------------------------------
def bits_of(x):
    """The bit patterns of x, as integers of its width: compares NaN and the sign of zero too."""
    return x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])


def ulps_up(x, steps):
    """Each (positive, finite) element moved ``steps`` floats up."""
    return (bits_of(x) + steps).view(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_assert_close_ulps_passes_within_the_tolerance_and_fails_beyond_it(dtype):
    x = torch.tensor([0.5, 1.0, 3.0, 1e-3], dtype=dtype)
    two_off = ulps_up(x, 2)
    assert_close_ulps(two_off, x, x, max_ulp=2)
    assert_close_ulps(x, x.double(), x, max_ulp=0)  # expected is rounded to actual's dtype first
    with pytest.raises(AssertionError, match="4 of 4 elements wrong: 4 beyond 1 ulp"):
        assert_close_ulps(two_off, x, x, max_ulp=1)


@pytest.mark.parametrize(
    "actual, expected",
    [
        ([0.0], [-0.0]),
        ([-0.0], [0.0]),
        ([float("nan")], [1.0]),
        ([1.0], [float("nan")]),
        ([torch.finfo(torch.float32).max], [float("inf")]),  # 1 ulp "apart", but not the same
        ([float("-inf")], [float("inf")]),
    ],
    ids=["lost-minus-zero", "invented-minus-zero", "nan-for-number", "number-for-nan", "max-for-inf", "wrong-inf"],
)
def test_assert_close_ulps_is_exact_about_zero_nan_and_inf(actual, expected):
    actual, expected = torch.tensor(actual), torch.tensor(expected)
    with pytest.raises(AssertionError, match="1 of 1 elements wrong: 1 (NaN|numbers where NaN|wrong)"):
        assert_close_ulps(actual, expected, expected, max_ulp=10)


def test_assert_close_ulps_passes_matching_specials():
    values = torch.tensor([0.0, -0.0, float("nan"), float("inf"), float("-inf")])
    assert_close_ulps(values.clone(), values, values, max_ulp=0)


def test_assert_close_ulps_names_the_first_bad_input():
    x = torch.tensor([1.0, 2.0, -0.5, -3.0])
    wrong = torch.selu(x)
    wrong[2:] = 0.0
    with pytest.raises(AssertionError, match=r"2 of 4 elements wrong: .* first: x = -0\.5  ->  got 0\.0"):
        assert_close_ulps(wrong, selu_reference(x), x, max_ulp=2)
    with pytest.raises(AssertionError):
        assert_close_ulps(torch.selu(x)[:3], selu_reference(x), x, max_ulp=2)  # shapes differ


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_assert_selu_allows_exactly_max_ulp(dtype):
    x = torch.tensor([0.5, 1.0, 3.0, 100.0], dtype=dtype)  # positive: selu(x) = λx, no NaN or zero
    expected = selu_reference(x).to(dtype)
    assert_selu(torch.selu(x), x)
    assert_selu(ulps_up(expected, MAX_ULP[dtype]), x)
    with pytest.raises(AssertionError, match=f"beyond {MAX_ULP[dtype]} ulp"):
        assert_selu(ulps_up(expected, MAX_ULP[dtype] + 1), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_assert_selu_passes_torch_selu_and_fails_lambda_x(dtype):
    x = harness_input(dtype=dtype, device=CPU)
    assert_selu(torch.selu(x), x)
    with pytest.raises(AssertionError, match="first: x = "):
        assert_selu(SELU_SCALE * x, x)
    other_dtype = torch.float64 if dtype == torch.float32 else torch.float32
    with pytest.raises(AssertionError):
        assert_selu(torch.selu(x.to(other_dtype)), x)  # the right values in the wrong dtype


# ---- inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values_cover_the_edge_cases(dtype):
    x = special_values(dtype, CPU)
    info = torch.finfo(dtype)
    assert x.dtype == dtype and x.dim() == 1
    zeros = x[x == 0]
    assert zeros.signbit().any() and (~zeros.signbit()).any()
    assert x.isnan().any()
    assert (x == float("inf")).any() and (x == float("-inf")).any()
    subnormal = (x != 0) & (x.abs() < info.tiny)
    assert (subnormal & (x > 0)).any() and (subnormal & (x < 0)).any()
    assert (x.abs() == info.tiny).sum() == 2
    assert (x == info.max).any() and (x == -info.max).any()
    assert ((x > -1e-2) & (x < -1e-8)).sum() >= 2  # where exp(x) - 1 cancels
    assert (x <= -88.5).sum() >= 3  # where exp underflows


def test_make_input_distributions():
    g = torch.Generator().manual_seed(0)
    n = 20000
    normal = make_input("normal", (n,), torch.float32, CPU, g)
    assert abs(normal.std().item() - 1) < 0.05 and (normal < 0).any()
    wide = make_input("wide_uniform", (n,), torch.float32, CPU, g)
    assert wide.min() >= -100 and wide.max() <= 100 and wide.min() < -90 and wide.max() > 90
    for dtype in DTYPES:
        info = torch.finfo(dtype)
        tiny = make_input("tiny", (n,), dtype, CPU, g)
        assert tiny.abs().max() <= 1e-2 and (tiny < 0).any() and (tiny > 0).any()
        assert ((tiny != 0) & (tiny.abs() < info.tiny)).any()  # subnormals
        huge = make_input("huge", (n,), dtype, CPU, g)
        assert huge.abs().min() >= 1 and huge.abs().max() <= info.max / 2
        assert (huge < 0).any() and (huge > 0).any() and huge.abs().max() > info.max / 1e3
        large_negative = make_input("large_negative", (n,), dtype, CPU, g)
        assert large_negative.min() >= -1e4 and large_negative.max() <= -80
    assert make_input("normal", (3, 5), torch.bfloat16, CPU, g).shape == (3, 5)
    with pytest.raises(ValueError, match="unknown distribution"):
        make_input("lognormal", (4,), torch.float32, CPU, g)


def recording_selu(seen):
    def fn(x):
        seen.append(x.clone())
        return torch.selu(x)

    return fn


def test_inputs_are_fresh_per_trial_and_reproducible_per_seed():
    options = dict(device=CPU, trials=2, sizes=(1000,), distributions=("normal",),
                   include_special=False, include_views=False)
    first, again = [], []
    check_unary(recording_selu(first), seed=123, **options)
    check_unary(recording_selu(again), seed=123, **options)
    assert len(first) == 2
    assert not torch.equal(first[0], first[1])  # fresh per trial
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # same seed, same inputs
    unseeded = [check_unary(torch.selu, **options).seed for _ in range(2)]
    assert unseeded[0] != unseeded[1]  # seeds from the clock: new inputs every call


def test_views_are_misaligned_and_two_dimensional():
    seen = []  # the tensors themselves: a clone would not keep the storage offset

    def fn(x):
        seen.append(x)
        return torch.selu(x)

    check_unary(fn, device=CPU, trials=1, distributions=(), include_special=False)
    assert [x.storage_offset() for x in seen] == [1, 2, 3, 1]
    assert seen[-1].dim() == 2 and all(d % 2 == 1 for d in seen[-1].shape)
    assert all(x.isnan().any() for x in seen)  # the views hold special values too


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_harness_input_starts_with_the_special_values(dtype):
    x = harness_input(4096, dtype, CPU, seed=0)
    special = special_values(dtype, CPU)
    assert (x.shape, x.dtype, x.device) == ((4096,), dtype, CPU)
    assert torch.equal(bits_of(x[:special.numel()]), bits_of(special))
    drawn = x[special.numel():]
    assert (drawn < 0).any() and (drawn > 0).any()
    assert ((drawn != 0) & (drawn.abs() < torch.finfo(dtype).tiny)).any()  # subnormals beyond the listed ones
    assert drawn.isfinite().all()


def test_harness_input_draws_equal_shares_of_every_distribution():
    special = special_values(torch.float32, CPU).numel()
    share = 100
    x = harness_input(special + share * len(DEFAULT_DISTRIBUTIONS), device=CPU)
    # In DEFAULT_DISTRIBUTIONS' order, each in its own range.
    assert DEFAULT_DISTRIBUTIONS == ("normal", "wide_uniform", "tiny", "huge", "large_negative")
    normal, wide, tiny, huge, large_negative = x[special:].split(share)
    assert normal.abs().max() < 10 and (normal < 0).any() and (normal > 0).any()
    assert wide.abs().max() <= 100 and wide.abs().max() > 10
    assert tiny.abs().max() <= 1e-2
    assert huge.abs().min() >= 1 and huge.abs().max() > 1e6
    assert large_negative.min() >= -1e4 and large_negative.max() <= -80


def test_harness_input_is_reproducible_per_seed():
    assert torch.equal(bits_of(harness_input(seed=3, device=CPU)), bits_of(harness_input(seed=3, device=CPU)))
    assert not torch.equal(bits_of(harness_input(seed=3, device=CPU)), bits_of(harness_input(seed=4, device=CPU)))


@pytest.mark.parametrize("numel", [0, 1, 10, 5000])
def test_harness_input_has_the_size_asked_for(numel):
    x = harness_input(numel, torch.bfloat16, CPU)
    assert (x.shape, x.dtype) == ((numel,), torch.bfloat16)
    special = special_values(torch.bfloat16, CPU)
    head = min(numel, special.numel())
    assert torch.equal(bits_of(x[:head]), bits_of(special[:head]))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_harness_input_is_the_same_on_the_gpu(dtype):
    # Drawn on the CPU and moved: a failure on the GPU replays anywhere.
    x = harness_input(dtype=dtype, device="cuda", seed=7)
    assert x.device.type == "cuda"
    assert torch.equal(bits_of(x.cpu()), bits_of(harness_input(dtype=dtype, device=CPU, seed=7)))


# ---- the report ----------------------------------------------------------------------------
def test_report_shows_what_went_wrong_compactly():
    report = check_unary(lambda_x, device=CPU, trials=1, name="lambda_x")
    text = str(report)
    assert text.startswith("lambda_x: FAILED")
    assert len(text.splitlines()) <= 12
    markdown = report._repr_markdown_()
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(table_rows) == 1 + len({case.group for case in report.cases})  # header + a row per group
    x, got, expected = report.first_failure()
    assert len(x) > 0
    assert torch.equal(got, lambda_x(x))
    assert not torch.equal(got.nan_to_num(), expected.nan_to_num())
    assert "got" in repr(report.first_failure()) and "expected" in repr(report.first_failure())


def test_passing_report_summary():
    report = check_unary(torch.selu, device=CPU, trials=1, name="torch.selu")
    text = str(report)
    assert text.startswith("torch.selu: passed")
    assert text.splitlines()[1].strip() == (f"worst: {report.worst.max_ulp} ulp; NaN pattern ok, ±inf ok, "
                                            "sign of zero ok")
    assert len(text.splitlines()) == 2  # the headline and the worst case
    assert report.assert_ok() is report
