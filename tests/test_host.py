"""helpers/host.py: the host's share of a small call, and when a GPU timer sees it."""
from __future__ import annotations

import time

import pytest
import torch

from helpers import bench, env, host


def _table(work_rows, compile_samples=(40.0, 45.0, 80.0), flush_us=85.0):
    return {"device": "Test GPU", "device_slug": "test", "numel": 65536, "dtype": "float32",
            "compiled_sizes": 19, "l2_flush_us": flush_us, "sample_s": 0.05,
            "method": bench.METHOD_DO_BENCH,
            "host_us_per_call": {"torch_eager": [8.0, 9.0, 7.5], "torch_compile": list(compile_samples),
                                 "torch_compile, one size compiled": [38.0, 39.0, 41.0]},
            "with_host_work": [{"added_us": us, "median_us": m, "q20_us": m - 1, "q80_us": m + 1}
                               for us, m in work_rows]}


def test_per_call_us_counts_host_work():
    x = torch.zeros(8)
    plain = bench.per_call_us(lambda: torch.neg(x), x.device, 0.02)
    slowed = bench.per_call_us(lambda: host.with_host_work(torch.neg, 200)(x), x.device, 0.02)
    assert 0 < plain < slowed and slowed >= 200


def test_per_call_us_in_blocks_of_the_given_length(monkeypatch):
    """With ``block_s`` one short block sizes the others: about block_s of calls each (here
    100 µs calls, so at most 200 in 20 ms), as many blocks as min_run_time_s holds and at
    least three, where blocked_autorange would grow a block to 1,000 or 10,000 calls."""
    from torch.utils.benchmark import Timer

    x, numbers = torch.zeros(8), []
    timeit = Timer.timeit
    monkeypatch.setattr(Timer, "timeit", lambda self, number=1000000: numbers.append(number) or timeit(self, number))
    slowed = host.with_host_work(torch.neg, 100)
    assert bench.per_call_us(lambda: slowed(x), x.device, 0.1, block_s=0.02) >= 100
    assert numbers[0] == bench.PROBE_CALLS and len(numbers) == 1 + 5
    assert len(set(numbers[1:])) == 1 and 1 <= numbers[1] <= 200
    numbers.clear()
    bench.per_call_us(lambda: slowed(x), x.device, 0.02, block_s=0.02)
    assert len(numbers) == 1 + 3


def test_per_call_us_refuses_a_block_of_no_time():
    with pytest.raises(ValueError, match="block_s .* must be positive"):
        bench.per_call_us(lambda: None, "cpu", 0.02, block_s=0)


def test_with_host_work_waits_then_calls():
    x = torch.arange(4.0)
    start = time.perf_counter()
    assert torch.equal(host.with_host_work(torch.neg, 2000)(x), -x)
    assert time.perf_counter() - start >= 2e-3


def test_hidden_budget_is_the_last_added_work_the_timer_hid():
    table = _table([(0, 6.0), (20, 5.9), (40, 5.0), (60, 30.0), (80, 43.0)])
    assert host.hidden_budget_us(table) == 40.0
    assert host.hidden_budget_us(_table([(0, 6.0), (20, 6.1)])) is None  # never left the GPU's time


def test_host_time_lines_read_the_table_and_give_the_verdict():
    text = host.host_time_lines(_table([(0, 6.0), (20, 5.9), (40, 5.0), (60, 30.0)]), "measured in this run")
    assert text.startswith("Test GPU, float32, 65,536 elements (measured in this run)")
    assert "L2 flush before each timed call: 85.0 µs of GPU time" in text
    assert "torch_compile                     40.0–80.0 µs (median 45.0), 19 versions compiled" in text
    assert "+  60 µs of host work:    30.0 µs [29.0, 31.0]" in text
    # budget 40 + eager's median 8 = 48 µs: one of the three compiled samples is above it
    assert text.endswith("about 48 µs of host time per call with eager's own; "
                         "torch_compile's host time was above that in 1 of 3 samples")
    assert host.host_time_lines(None, "needs a GPU") == "no host time measured: needs a GPU"
    cpu = _table([(0, 6.0), (20, 26.0)], flush_us=None)
    assert "L2 flush" not in host.host_time_lines(cpu, "measured")


def test_above_eager_lists_the_sizes_where_the_line_falls_below():
    def record(variant, numel, median_us, q80_us=None):
        return {"variant": variant, "numel": numel, "median_ms": median_us / 1e3,
                "q80_ms": (q80_us or median_us) / 1e3}
    records = [record("torch_eager", 4096, 5.0, 5.5), record("torch_compile", 4096, 5.2),
               record("torch_eager", 8192, 5.0, 5.5), record("torch_compile", 8192, 25.0),
               record("torch_eager", 10_000, 6.0, 6.5), record("torch_compile", 10_000, 30.0)]
    text = host.above_eager(records)
    assert text.startswith("torch_compile above eager's 80th percentile at 2 of 3 sizes:")
    assert "2^13: 25.0 µs against 5.0" in text and "10,000: 30.0 µs against 6.0" in text
    assert host.above_eager(records[:2]).endswith("at 0 of 1 sizes")
    assert host.above_eager([]).startswith("no sizes with both")


def test_measure_host_time_on_the_cpu(monkeypatch):
    # Eager only: the CPU compiler is slow to start and the table's shape is the point here.
    monkeypatch.setattr(bench, "peers", lambda *a, **k: {"torch_eager": torch.selu})
    monkeypatch.setenv("CI", "true")
    table = host.measure_host_time("cpu", numel=1024, work_us=(0, 50), samples=2)
    assert table["l2_flush_us"] is None and table["compiled_sizes"] is None
    assert list(table["host_us_per_call"]) == ["torch_eager"] and len(table["host_us_per_call"]["torch_eager"]) == 2
    assert [row["added_us"] for row in table["with_host_work"]] == [0, 50]
    # On a CPU the timer waits for the whole call: the busy-wait is all in the reading.
    assert table["with_host_work"][1]["median_us"] > table["with_host_work"][0]["median_us"] + 40
    assert "no host time" not in host.host_time_lines(table, "measured")


def test_host_time_without_a_gpu_is_the_committed_table_or_says_it_needs_one(monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    table, source = host.host_time()
    assert (table is None and "needs a GPU" in source) or (
        source.startswith("no GPU here; reference") and table["with_host_work"])


def test_the_twin_has_a_cache_of_its_own():
    assert host._selu_one_size.__code__ is not bench._selu.__code__


@pytest.mark.gpu
def test_l2_flush_takes_gpu_time():
    flush = host.l2_flush_us()
    assert flush is None or flush > 1.0


@pytest.mark.parametrize("window_ms", [(0, 100), (25, -1), (25,)], ids=str)
def test_time_fn_refuses_a_window_that_is_not_two_positive_lengths(window_ms):
    with pytest.raises(ValueError, match="window_ms is \\(warm-up ms, repetitions ms\\), both positive"):
        bench.time_fn(lambda: None, device="cpu", window_ms=window_ms)
