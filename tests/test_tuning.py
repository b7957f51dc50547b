"""helpers.tuning: the launch configuration of selu_vectorized, measured per GPU model and dtype."""
from __future__ import annotations

import pytest
import torch

from helpers import bench, build, env, ops, tuning


def test_candidates_are_valid_launches():
    configs = tuning.candidates()
    assert len(configs) == len(set(configs)) == len(tuning.THREADS) * len(tuning.VECTORS) * 2
    for threads, vectors, blocks_per_sm in configs:
        assert threads in (64, 128, 256, 512, 1024) and vectors in (1, 2, 4, 8)
        assert blocks_per_sm == 0 or blocks_per_sm * threads == tuning.THREADS_PER_SM


def test_tuning_size_is_the_reference_where_it_fits():
    fp32_reference = 2 * 4 * env.REFERENCE_NUMEL
    assert tuning.tuning_numel(torch.float32, int(fp32_reference / tuning.MEMORY_FRACTION) + 1) == env.REFERENCE_NUMEL
    smaller = tuning.tuning_numel(torch.float64, 24 * 2**30)  # a 24 GB card: fp64 does not fit
    assert smaller < env.REFERENCE_NUMEL and smaller & (smaller - 1) == 0
    assert 2 * 8 * smaller <= tuning.MEMORY_FRACTION * 24 * 2**30


def test_the_default_launch_is_the_kernels():
    from helpers import course_report

    assert course_report.default_launch_in_source() == bench.launch_config(*tuning.DEFAULT_CONFIG)


def test_the_launchers_minimum_blocks_per_sm_is_the_kernels():
    import re

    source = (env.KERNELS_DIR / "selu_vectorized.cu").read_text()
    (value,) = re.findall(r"constexpr int64_t kMinBlocksPerSM = (\d+);", source)
    assert int(value) == tuning.MIN_BLOCKS_PER_SM


def test_launch_for_size_halves_vectors_then_threads():
    # 2^20 fp32 elements are 262,144 vectors: 256 tiles of 256 x 4, fewer than 8 x 132;
    # 1 vector gives 1,024 blocks, still fewer, so the threads halve too: 2,048 blocks.
    assert tuning.launch_for_size((256, 4, 0), 2**20, torch.float32, sms=132) == (128, 1)
    assert tuning.blocks_for(2**20, torch.float32, 128, 1) == 2048
    # Enough blocks at the first halving: 2^23 fp32 at 256 x 4 are 2,048 blocks, at least 1,056.
    assert tuning.launch_for_size((256, 4, 0), 2**23, torch.float32, sms=132) == (256, 4)
    assert tuning.launch_for_size((256, 8, 0), 2**23, torch.float32, sms=132) == (256, 4)
    # The reference size is untouched; threads never drop below 128.
    assert tuning.launch_for_size((512, 8, 0), env.REFERENCE_NUMEL, torch.bfloat16, sms=132) == (512, 8)
    assert tuning.launch_for_size((512, 8, 0), 1, torch.bfloat16, sms=132) == (128, 1)


def test_a_finalist_replaces_the_default_only_beyond_the_spread_of_the_rounds():
    default, other = tuning.DEFAULT_CONFIG, (256, 1, 0)
    # 1% faster by the median, but the rounds overlap: the default stays.
    assert tuning.choose({default: [1.00, 1.03, 0.99], other: [0.99, 0.98, 1.00]}) == default
    # Faster in every round than the default in any: it wins.
    assert tuning.choose({default: [1.00, 1.03, 0.99], other: [0.97, 0.96, 0.98]}) == other
    # The default itself the fastest: nothing to replace.
    assert tuning.choose({default: [0.90, 0.91, 0.92], other: [0.97, 0.96, 0.98]}) == default


def test_rounds_are_judged_against_the_copy_of_the_same_round():
    default, other = tuning.DEFAULT_CONFIG, (256, 1, 0)
    # In round 2 the clock was high and everything ran 10% faster, the copy too. By time,
    # the default's fast round hides that the other launch is 1% faster in every round;
    # as multiples of each round's copy, it is.
    rounds = {default: [1.01, 0.909, 1.01], other: [1.00, 0.90, 1.00]}
    assert tuning.choose(rounds) == default
    assert tuning.choose(rounds, [1.0, 0.9, 1.0]) == other
    with pytest.raises(ValueError, match="one time per round"):
        tuning.choose(rounds, [1.0, 0.9])


def test_nothing_to_tune_without_a_gpu():
    assert tuning.configure("cpu") == {}


def test_cache_is_per_gpu_model_and_build():
    path = tuning.cache_path("cpu", "selu_vectorized_cuda_0123abcd")
    assert path.parent == tuning.CACHE_DIR and path.name == "cpu-selu_vectorized_cuda_0123abcd.json"


def test_config_operators_are_not_tensor_operators():
    # no fake kernel, autograd or opcheck: they take no tensor
    assert not set(ops.CONFIG_SCHEMAS) & set(ops.SCHEMAS)


@pytest.mark.gpu
def test_configure_sets_what_the_operator_uses():
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
    assert len(round_copies) == tuning.ROUNDS and tuning.DEFAULT_CONFIG in rounds
    assert all(len(ms) == tuning.ROUNDS for ms in rounds.values()) and bench.COPY not in rounds
    assert first[0] < full[0] and first[1] < full[1] and tuning.ROUNDS_WINDOW_MS[1] < full[1]
