"""helpers.tuning: the launch configuration of selu_vectorized, measured per GPU model and dtype."""
from __future__ import annotations

import pytest
import torch

from helpers import bench, build, env, ops, results, tuning

DEFAULT = (128, 2, 0)  # a launch to stand for the default in choose's tests


@pytest.fixture(scope="module", autouse=True)
def cpu_kernels():
    build.load("selu_vectorized", backend="cpu")  # the launch operators answer on every machine


def test_candidates_are_launches_the_kernel_accepts():
    configs = tuning.candidates()
    assert len(configs) == len(set(configs)) == len(tuning.THREADS) * len(tuning.VECTORS) * 2
    for config in configs:
        torch.ops.selu_course.check_launch_config(*config)  # the kernel's own check: raises if refused
        assert config[2] == 0 or config[2] * config[0] == tuning.THREADS_PER_SM


def test_tuning_size_is_the_reference_where_it_fits():
    fp32_reference = 2 * 4 * env.REFERENCE_NUMEL
    assert tuning.tuning_numel(torch.float32, int(fp32_reference / tuning.MEMORY_FRACTION) + 1) == env.REFERENCE_NUMEL
    smaller = tuning.tuning_numel(torch.float64, 24 * 2**30)  # a 24 GB card: fp64 does not fit
    assert smaller < env.REFERENCE_NUMEL and smaller & (smaller - 1) == 0
    assert 2 * 8 * smaller <= tuning.MEMORY_FRACTION * 24 * 2**30


def test_a_finalist_replaces_the_default_only_beyond_the_spread_of_the_rounds():
    default, other = DEFAULT, (256, 1, 0)
    # 1% faster by the median, but the rounds overlap: the default stays.
    assert tuning.choose({default: [1.00, 1.03, 0.99], other: [0.99, 0.98, 1.00]}, default=default) == default
    # Faster in every round than the default in any: it wins.
    assert tuning.choose({default: [1.00, 1.03, 0.99], other: [0.97, 0.96, 0.98]}, default=default) == other
    # The default itself the fastest: nothing to replace.
    assert tuning.choose({default: [0.90, 0.91, 0.92], other: [0.97, 0.96, 0.98]}, default=default) == default
    # Without one named, the default is the kernel's.
    kernels_default = ops.default_launch_config()
    assert tuning.choose({kernels_default: [0.9], other: [1.0]}) == kernels_default


def test_rounds_are_judged_against_the_copy_of_the_same_round():
    default, other = DEFAULT, (256, 1, 0)
    # In round 2 the clock was high and everything ran 10% faster, the copy too. By time,
    # the default's fast round hides that the other launch is 1% faster in every round;
    # as multiples of each round's copy, it is.
    rounds = {default: [1.01, 0.909, 1.01], other: [1.00, 0.90, 1.00]}
    assert tuning.choose(rounds, default=default) == default
    assert tuning.choose(rounds, [1.0, 0.9, 1.0], default=default) == other
    with pytest.raises(ValueError, match="one time per round"):
        tuning.choose(rounds, [1.0, 0.9], default=default)


def test_nothing_to_tune_without_a_gpu():
    assert tuning.configure("cpu") == {}


def test_cache_is_per_gpu_model_and_build():
    path = tuning.cache_path("cpu", "selu_vectorized_cuda_0123abcd")
    assert path.parent == tuning.CACHE_DIR and path.name == "cpu-selu_vectorized_cuda_0123abcd.json"


@pytest.mark.gpu
def test_load_leaves_the_default_launch_and_configure_sets_what_the_operator_uses():
    # A build of its own (another flag), loaded fresh: load registers, and tunes nothing.
    with build.loaded("selu_vectorized", extra_cuda_cflags=("-DSELU_COURSE_FRESH_BUILD",)):
        for dtype in tuning.DTYPES:
            assert ops.launch_config("cuda", dtype) == ops.default_launch_config()
    build.load("selu_vectorized")
    chosen = tuning.configure("cuda", verbose=False)
    assert set(chosen) == set(tuning.DTYPES)
    for dtype, config in chosen.items():
        assert ops.launch_config("cuda", dtype) == config and config in tuning.candidates()
    records = tuning.cached("cuda")
    assert records is not None and records["float32"]["times_ms"] and records["float32"]["copy_ms"] > 0
    assert len(records["float32"]["rounds_copy_ms"]) == tuning.ROUNDS


@pytest.mark.gpu
def test_set_launch_config_refuses_bad_values():
    build.load("selu_vectorized")
    with pytest.raises(RuntimeError, match="vectors_per_thread must be 1, 2, 4 or 8"):
        ops.set_launch_config("cuda", torch.float32, 128, 3, 0)
    with pytest.raises(RuntimeError, match="per CUDA device"):
        ops.set_launch_config("cpu", torch.float32, 128, 2, 0)
    with pytest.raises(RuntimeError, match="float32, float64, float16 or bfloat16"):
        ops.launch_config("cuda", torch.int32)
    before = ops.launch_config("cuda", torch.float32)
    try:
        ops.set_launch_config("cuda", torch.float32, 512, 8, 4)
        assert ops.launch_config("cuda", torch.float32) == (512, 8, 4)
        x = torch.randn(10**6 + 3, device="cuda")
        assert torch.equal(ops.selu_vectorized(x), torch.selu(x))
    finally:
        ops.set_launch_config("cuda", torch.float32, *before)


def test_the_first_pass_ranks_in_a_short_window_and_the_rounds_take_turns_in_theirs(monkeypatch):
    windows = []

    def fake_time_fn(fn, *, device=None, window_ms=(bench.DO_BENCH_WARMUP_MS, bench.DO_BENCH_REP_MS)):
        windows.append(tuple(window_ms))
        return bench.Timing(1.0, 1.0, 1.0, None, "fake")

    monkeypatch.setattr(bench, "time_fn", fake_time_fn)
    copy_ms, times, rounds, round_copies = tuning._time_candidates(torch.empty(16))
    full, first = (bench.DO_BENCH_WARMUP_MS, bench.DO_BENCH_REP_MS), tuple(tuning.FIRST_PASS_WINDOW_MS)
    count = len(tuning.candidates())
    assert windows[0] == full  # the first copy, which the tuning table's shares divide by
    assert windows[1:1 + count] == [first] * count  # then every candidate once
    # Then every round: its copy and the finalists (the default among them).
    assert windows[1 + count:] == [tuple(tuning.ROUNDS_WINDOW_MS)] * (tuning.ROUNDS * (1 + len(rounds)))
    assert len(round_copies) == tuning.ROUNDS and ops.default_launch_config() in rounds
    assert all(len(ms) == tuning.ROUNDS for ms in rounds.values()) and bench.COPY not in rounds
    assert first[0] < full[0] and first[1] < full[1] and tuning.ROUNDS_WINDOW_MS[1] < full[1]


def test_a_launch_reads_the_same_in_the_tuner_and_in_the_records():
    # One vector per thread is singular in both, and both say the block's shape in the same words.
    assert tuning.launch_label((256, 1, 0)) == "256 threads × 1 vector, one-shot"
    assert tuning.launch_label((128, 2, 8)) == "128 threads × 2 vectors, 8/SM"
    record = {"variant": "selu_vectorized", "config": bench.launch_config(256, 1, 0)}
    assert results.label(record) == "selu_vectorized (256 threads × 1 vector, one-shot grid)"
