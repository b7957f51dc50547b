"""helpers.bench: the arithmetic against hand calculations, timing through a
timing library, and records a notebook can save and plot."""
from __future__ import annotations

import json
import sys
import time
import types

import pytest
import torch

from helpers import bench, results

REQUIRED_KEYS = {
    "variant", "op", "dtype", "numel", "bytes", "median_ms", "q20_ms", "q80_ms", "gbps", "gbps_q20",
    "gbps_q80", "n", "method", "device", "device_slug", "torch", "date", "run", "config",
}  # fmt: skip

REFERENCE_NUMEL = 4096 * 393216  # the course's reference problem, 1.61 G elements


@pytest.fixture(autouse=True)
def short_cpu_timing(monkeypatch):
    """CI mode: the CPU timer measures for 0.05 s per function instead of 0.2 s."""
    monkeypatch.setenv("CI", "true")


# --------------------------------------------------------------------------- arithmetic


def test_bytes_and_gbps_of_the_reference_problem():
    # fp32: 1,610,612,736 elements x 4 bytes x (1 read + 1 write) = 12.88 GB; at 4.26 ms, 3024 GB/s.
    nbytes = bench.bytes_moved(REFERENCE_NUMEL, torch.float32)
    assert nbytes == 12_884_901_888
    assert bench.gbps(nbytes, 4.26) == pytest.approx(3024.6, abs=0.1)
    # bf16 moves half the bytes, so the same time is half the throughput.
    half = bench.bytes_moved(REFERENCE_NUMEL, torch.bfloat16)
    assert half == nbytes // 2
    assert bench.gbps(half, 4.26) == pytest.approx(1512.3, abs=0.1)


def test_bytes_moved_counts_reads_and_writes_and_accepts_record_dtype_names():
    assert bench.bytes_moved(1000, "float32") == 8000
    assert bench.bytes_moved(1000, "bfloat16", reads=2, writes=1) == 6000  # a backward pass
    assert bench.bytes_moved(1000, torch.float64, reads=1, writes=0) == 8000


def test_gbps_is_decimal_and_rejects_non_positive_times():
    assert bench.gbps(1e9, 1000.0) == pytest.approx(1.0)  # 1e9 bytes in one second
    with pytest.raises(ValueError):
        bench.gbps(1e9, 0.0)


def test_roofline_ms_is_bytes_over_bandwidth():
    # 12.885 GB at 3000 GB/s: 4.295 ms; the inverse of gbps().
    assert bench.roofline_ms(REFERENCE_NUMEL, torch.float32, 3000) == pytest.approx(4.2950, abs=1e-4)
    ms = bench.roofline_ms(2**20, "bfloat16", 1234.0)
    assert bench.gbps(bench.bytes_moved(2**20, "bfloat16"), ms) == pytest.approx(1234.0)


def _fake(variant, median_ms, *, numel=2**20, op="forward", dtype="float32", run="run-a", nbytes=None):
    return {
        "variant": variant, "op": op, "dtype": dtype, "numel": numel, "median_ms": median_ms,
        "bytes": nbytes if nbytes is not None else bench.bytes_moved(numel, dtype), "run": run,
    }  # fmt: skip


def test_pct_of_copy_is_copy_time_over_variant_time_of_the_same_run_size_dtype_and_op():
    records = [
        _fake("copy", 2.0),
        _fake("slow", 2.5),  # 2.0 / 2.5 = 80%
        _fake("fast", 2.0),  # as fast as the copy: 100%
        _fake("copy", 1.0, numel=2**21),
        _fake("other_size", 4.0, numel=2**21),  # 25%: its own size's copy, not 2**20's
        _fake("bf16", 1.0, dtype="bfloat16"),  # no bf16 copy: no ratio
        _fake("copy", 0.5, run="run-b"),
        _fake("other_run", 1.0, run="run-b"),  # 50%: its own run's copy, not run-a's
        _fake("lonely", 1.0, run="run-c"),  # a run without a copy has no yardstick
    ]
    out = {r["variant"] + str(r["numel"]): r["pct_of_copy"] for r in results.with_roofline_ratios(records)}
    assert out["copy1048576"] == pytest.approx(100.0)
    assert out["slow1048576"] == pytest.approx(80.0)
    assert out["fast1048576"] == pytest.approx(100.0)
    assert out["other_size2097152"] == pytest.approx(25.0)
    assert out["bf161048576"] is None
    assert out["other_run1048576"] == pytest.approx(50.0)
    assert out["lonely1048576"] is None
    assert all("pct_of_copy" not in r for r in records)  # computed on reading, never stored


def test_pct_of_copy_compares_throughput_when_the_op_moves_more_bytes_than_the_copy():
    # Backward: 3 tensors moved in 3 ms is the copy's 2 tensors in 2 ms: the same GB/s.
    numel = 2**20
    copy = _fake("copy", 2.0, op="backward")
    grad = _fake("grad", 3.0, op="backward", nbytes=bench.bytes_moved(numel, "float32", reads=2, writes=1))
    assert results.pct_of_copy(grad, [copy, grad]) == pytest.approx(100.0)


# --------------------------------------------------------------------------- timing


def test_time_fn_on_cpu_uses_torch_benchmark_and_orders_its_statistics():
    x = torch.randn(2**16)
    timing = bench.time_fn(lambda: torch.selu(x), device="cpu")
    assert timing.method == "torch.utils.benchmark"
    assert timing.median_ms > 0
    assert 0 < timing.q20_ms <= timing.median_ms <= timing.q80_ms
    assert timing.n >= 1


def test_take_turns_times_each_function_once_a_round_in_turn(monkeypatch):
    calls = []

    def fake_time_fn(fn, *, device=None, window_ms=(bench.DO_BENCH_WARMUP_MS, bench.DO_BENCH_REP_MS)):
        calls.append((fn(), tuple(window_ms)))
        return bench.Timing(float(len(calls)), 1.0, 1.0, None, "fake")

    monkeypatch.setattr(bench, "time_fn", fake_time_fn)
    times = bench.take_turns({"a": lambda: "a", ("b", 2): lambda: "b"}, 3, device="cpu", window_ms=(1, 2))
    assert [name for name, _ in calls] == ["a", "b"] * 3 and {window for _, window in calls} == {(1, 2)}
    assert times == {"a": [1.0, 3.0, 5.0], ("b", 2): [2.0, 4.0, 6.0]}  # each key's medians, round by round
    with pytest.raises(ValueError, match="at least one round"):
        bench.take_turns({"a": lambda: None}, 0)


@pytest.mark.parametrize("window_ms", [(0, 100), (25, -1), (25,)], ids=str)
def test_time_fn_refuses_a_window_that_is_not_two_positive_lengths(window_ms):
    with pytest.raises(ValueError, match="window_ms is \\(warm-up ms, repetitions ms\\), both positive"):
        bench.time_fn(lambda: None, device="cpu", window_ms=window_ms)


def test_time_fn_sees_that_ten_times_the_work_takes_longer():
    small, big = torch.randn(2**17), torch.randn(10 * 2**17)
    t_small = bench.time_fn(lambda: torch.selu(small), device="cpu")
    t_big = bench.time_fn(lambda: torch.selu(big), device="cpu")
    assert t_big.median_ms > 2 * t_small.median_ms


@pytest.fixture
def fake_triton(monkeypatch):
    """Install a stand-in ``triton.testing.do_bench``: the CUDA path's logic, tested without a GPU."""

    def install(do_bench):
        testing = types.ModuleType("triton.testing")
        testing.do_bench = do_bench
        triton = types.ModuleType("triton")
        triton.testing = testing
        monkeypatch.setitem(sys.modules, "triton", triton)
        monkeypatch.setitem(sys.modules, "triton.testing", testing)

    bench._do_bench_returns_all.cache_clear()  # it remembers which triton it saw
    yield install
    bench._do_bench_returns_all.cache_clear()


SAMPLES = [float(v) for v in range(1, 11)]  # 1..10 ms: median 5.5, q20 2.8, q80 8.2 (linear)


def test_do_bench_path_takes_statistics_from_all_samples(fake_triton):
    calls = []

    def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        assert return_mode in ["min", "max", "mean", "median", "all"]
        calls.append(dict(warmup=warmup, rep=rep, quantiles=quantiles, return_mode=return_mode))
        return list(SAMPLES)

    fake_triton(do_bench)
    timing = bench._time_do_bench(lambda: None)
    assert calls == [dict(warmup=25, rep=100, quantiles=None, return_mode="all")]
    assert (timing.median_ms, timing.q20_ms, timing.q80_ms) == pytest.approx((5.5, 2.8, 8.2))
    assert timing.n == 10 and timing.method == "triton.testing.do_bench"


def test_do_bench_without_all_mode_asks_for_median_and_quantiles(fake_triton):
    def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        assert return_mode in ["min", "max", "mean", "median"]  # an older triton
        assert quantiles == [0.5, 0.2, 0.8]
        return [5.5, 2.8, 8.2]

    fake_triton(do_bench)
    timing = bench._time_do_bench(lambda: None)
    assert (timing.median_ms, timing.q20_ms, timing.q80_ms) == (5.5, 2.8, 8.2)
    assert timing.n is None  # that call does not say how many samples it took


def busy_wait_before(fn, microseconds: float):
    """``fn`` behind a busy-wait of ``microseconds`` on the host: host work of known length."""
    def slowed(x: torch.Tensor) -> torch.Tensor:
        until = time.perf_counter() + microseconds * 1e-6
        while time.perf_counter() < until:
            pass
        return fn(x)

    return slowed


def test_per_call_us_counts_host_work():
    x = torch.zeros(8)
    plain = bench.per_call_us(lambda: torch.neg(x), x.device, 0.02)
    slowed = bench.per_call_us(lambda: busy_wait_before(torch.neg, 200)(x), x.device, 0.02)
    assert 0 < plain < slowed and slowed >= 200


def test_per_call_us_times_a_compiled_function_without_compiling_it_again():
    # Timer's default of one thread would fail dynamo's guard on the thread count: a second compile, timed.
    compiles = []

    def counting_backend(graph, example_inputs):
        compiles.append(graph)
        return graph.forward

    x = torch.zeros(8)
    compiled = torch.compile(lambda t: torch.neg(t) * 2, backend=counting_backend)
    compiled(x)
    bench.per_call_us(lambda: compiled(x), x.device, 0.02)
    assert len(compiles) == 1


def test_per_call_us_in_blocks_of_the_given_length(monkeypatch):
    """One short block sizes the others: about block_s of calls each (here 100 µs calls, so at
    most 200 in 20 ms), as many blocks as min_run_time_s holds and at least three."""
    from torch.utils.benchmark import Timer

    x, numbers = torch.zeros(8), []
    timeit = Timer.timeit
    monkeypatch.setattr(Timer, "timeit", lambda self, number=1000000: numbers.append(number) or timeit(self, number))
    slowed = busy_wait_before(torch.neg, 100)
    assert bench.per_call_us(lambda: slowed(x), x.device, 0.1, block_s=0.02) >= 100
    assert numbers[0] == bench.PROBE_CALLS and len(numbers) == 1 + 5
    assert len(set(numbers[1:])) == 1 and 1 <= numbers[1] <= 200
    numbers.clear()
    bench.per_call_us(lambda: slowed(x), x.device, 0.02, block_s=0.02)
    assert len(numbers) == 1 + 3
    with pytest.raises(ValueError, match="block_s .* must be positive"):
        bench.per_call_us(lambda: None, "cpu", 0.02, block_s=0)


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_random_input_is_standard_normal_with_both_signs_and_no_zeros(dtype):
    x = bench.random_input(2**16, dtype, "cpu", seed=1)
    assert x.shape == (2**16,) and x.dtype == dtype
    assert (x < 0).any() and (x > 0).any()
    assert not (x == 0).any()
    assert x.float().mean().abs() < 0.05 and 0.95 < x.float().std() < 1.05  # N(0, 1), not U[0, 1)
    assert torch.equal(x, bench.random_input(2**16, dtype, "cpu", seed=1))  # a seed reproduces it


def test_random_input_replaces_exact_zeros(monkeypatch):
    monkeypatch.setattr(torch, "randn", lambda n, **kw: torch.zeros(n, dtype=kw["dtype"]))
    x = bench.random_input(100, torch.float16, "cpu")
    assert not (x == 0).any()


# --------------------------------------------------------------------------- records


def test_measure_times_the_copy_and_each_variant_into_json_ready_records():
    variants = {"torch_eager": torch.selu, "two_passes": lambda x: torch.selu(x).clone()}
    records = bench.measure(variants, 2**14, device="cpu")
    assert [r["variant"] for r in records] == ["copy", "torch_eager", "two_passes"]
    for r in records:
        assert REQUIRED_KEYS <= set(r), REQUIRED_KEYS - set(r)
        assert r["op"] == "forward" and r["dtype"] == "float32" and r["numel"] == 2**14
        assert r["bytes"] == 2**14 * 4 * 2
        assert r["gbps"] == pytest.approx(r["bytes"] / (r["median_ms"] * 1e-3) / 1e9)
        assert r["gbps_q20"] <= r["gbps"] <= r["gbps_q80"]
        assert r["device_slug"] == "cpu" and r["method"] == "torch.utils.benchmark"
        assert r["torch"] == torch.__version__
        assert r["config"] is None and "pct_of_copy" not in r
    assert len({r["run"] for r in records}) == 1  # one call, one run: ratios are taken within it
    assert results.pct_of_copy(records[1], records) == pytest.approx(
        records[0]["median_ms"] / records[1]["median_ms"] * 100
    )
    assert json.loads(json.dumps(records)) == records
    again = bench.measure({"torch_eager": torch.selu}, 2**14, device="cpu")
    assert again[0]["run"] != records[0]["run"]


def test_a_variant_carries_its_launch_configuration_as_a_field():
    config = bench.launch_config(128, 2, 0)
    variants = {
        "a": bench.Variant(torch.selu, "selu_vectorized", config),
        "b": bench.Variant(torch.selu, "selu_vectorized", bench.launch_config(256, 4, 8)),
    }
    records = bench.measure(variants, 2**12, device="cpu", include_copy=False)
    assert [r["variant"] for r in records] == ["selu_vectorized", "selu_vectorized"]
    assert records[0]["config"] == {"threads_per_block": 128, "vectors_per_thread": 2, "max_blocks_per_sm": 0}
    assert results.label(records[1]) == "selu_vectorized (256 threads × 4 vectors, ≤ 8 blocks/SM)"
    assert results.find(records, "selu_vectorized", config=config) is records[0]


def test_measure_uses_a_given_input_and_refuses_the_roofline_name():
    x = bench.random_input(4096, torch.bfloat16, "cpu")
    seen = set()
    records = bench.measure({"spy": lambda t: seen.add(id(t)) or t}, 4096, x=x, include_copy=False)
    assert seen == {id(x)}
    assert [r["variant"] for r in records] == ["spy"] and records[0]["dtype"] == "bfloat16"
    with pytest.raises(ValueError):
        bench.measure({"copy": torch.selu}, 4096, device="cpu")


def test_sweep_measures_every_size():
    records = bench.sweep({"torch_eager": torch.selu}, [2**12, 2**14], device="cpu")
    assert sorted((r["numel"], r["variant"]) for r in records) == [
        (2**12, "copy"), (2**12, "torch_eager"), (2**14, "copy"), (2**14, "torch_eager"),
    ]  # fmt: skip


def test_peers_leave_out_a_compile_that_fails_with_a_note(monkeypatch, capsys):
    def broken():
        raise RuntimeError("no C++ compiler\nlong traceback")

    monkeypatch.setattr(bench, "compiled_selu", broken)
    assert list(bench.peers(device="cpu")) == ["torch_eager"]
    assert "torch_compile left out" in capsys.readouterr().out


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_timing_uses_do_bench_and_the_copy_runs_at_memory_speed():
    pytest.importorskip("triton", reason="triton.testing.do_bench needs triton")
    x = bench.random_input(2**24, torch.float32, "cuda")
    out = torch.empty_like(x)
    timing = bench.time_fn(lambda: out.copy_(x), device="cuda")
    assert timing.method == "triton.testing.do_bench"
    assert 0 < timing.q20_ms <= timing.median_ms <= timing.q80_ms
    (copy,) = bench.measure({}, 2**24, device="cuda")
    assert copy["variant"] == "copy" and copy["gbps"] > 100, copy


@pytest.mark.parametrize("op", sorted(bench.TENSORS_READ_WRITTEN))
def test_roofline_copy_moves_the_bytes_of_its_op(op):
    x = torch.randn(1000)
    copy = bench.roofline_copy(op, x)
    written = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in ("copy_", "add"):
                reads = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
                written.append((name, len(reads)))
            return func(*args, **(kwargs or {}))

    with Spy():
        copy()
    reads, writes = bench.TENSORS_READ_WRITTEN[op]
    # copy_(out, x): 1 read + 1 written; add(x, other, out=out): 2 read + 1 written
    moved = sum(n for _, n in written)
    assert moved == reads + writes and len(written) == writes


def test_roofline_copy_refuses_an_unknown_op():
    with pytest.raises(ValueError, match="op must be one of"):
        bench.roofline_copy("sideways", torch.randn(4))


@pytest.mark.gpu
def test_gpu_kernels_lists_every_kernel_of_every_call_with_its_own_time():
    x = torch.randn(1 << 20, device="cuda")
    one, three = bench.gpu_kernels(lambda: x.mul(2)), bench.gpu_kernels(lambda: x.mul(2), calls=3)
    assert len(one) == 1 and len(three) == 3  # one elementwise kernel a call, nothing of the host's
    assert all(us > 0 for _, us in three) and all(name == one[0][0] for name, _ in three)
